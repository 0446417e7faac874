"""What a page of businesses or employers shows, declared once: the statements that write
each listing's output (`ListingOut` as JSON, and its export's CSV line, written by the
database and stored with the listing), and, derived from them, the changes that store a
listing's outputs again and turn the revision of the location's pages (whose ETags a
revalidation is answered by, without the page's work: platform/caching.py).

Every table the output statement reads is one whose changes a page may show: a listing
itself (inserted and deleted ones turn theirs with their counts, models/listing.py), a row
that names its listing (a social link: that listing's pages), or a row listings name (a
category, a social: any page may show it, so every revision turns). A join added to the
output is followed by its revisions with nothing more to write.
"""

from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    Connection,
    FromClause,
    Select,
    Table,
    bindparam,
    func,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from .models import Category, Listing, ListingCount, ListingSocial, Social
from .models.listing import new_revision
from .platform.extensions import db
from .platform.output import schema_instance
from .platform.page_queries import encoded_by_id
from .platform.sql import (
    csv_cells,
    csv_lines_of,
    json_list,
    json_of,
    json_text,
    never_formula,
    plain_cell,
    spaced_list,
    tables_read,
)
from .schemas.listings import ListingOut, SocialLinkOut

# Each listing's `ListingOut` as JSON text (sql.json_of), its subcategory's slug and social
# links (in their order) included, and its export's CSV cells (sql.csv_cells): written by
# the database from `listings` (the table, or an alias of it) joined to its subcategory.
_listings, _categories = Listing.__table__, Category.__table__
_links, _socials = ListingSocial.__table__, Social.__table__


def _links_of(listings: FromClause, item: Any) -> Any:
    """The rows of a listing's social links, `item` of the link and its social, in order."""
    return (
        select(item, _links.c.position)
        .select_from(_links.join(_socials, _links.c.social_id == _socials.c.id))
        .where(_links.c.listing_id == listings.c.id)
        .order_by(_links.c.position)
        .correlate(listings)
        .subquery()
    )


def _with_subcategory(listings: FromClause) -> Any:
    return listings.outerjoin(_categories, listings.c.subcategory_id == _categories.c.id)


def json_output(listings: FromClause) -> Any:
    """A listing's output as JSON text."""
    links = _links_of(
        listings,
        json_of(
            schema_instance(SocialLinkOut), {"social_slug": _socials.c.slug, "url": _links.c.url}
        ).label("link"),
    )
    return json_text(
        json_of(
            schema_instance(ListingOut),
            {
                **listings.c,
                "subcategory_slug": _categories.c.slug,
                "socials": func.coalesce(
                    select(json_list(links.c.link, links.c.position)).scalar_subquery(),
                    literal_column("'[]'"),
                ),
            },
        )
    )


def csv_output(listings: FromClause) -> list[Any]:
    """A listing's CSV cells, the same output as an export shows it: a social link is
    `social:url`, a listing's links one cell, separated by spaces, in their order."""
    links = _links_of(
        listings, (_socials.c.slug + literal_column("':'") + _links.c.url).label("cell")
    )
    return csv_cells(
        schema_instance(ListingOut),
        {
            **listings.c,
            # Slugs (slugs.SLUG_REGEX) need neither a guard nor quotes.
            "slug": plain_cell(listings.c.slug),
            "subcategory_slug": plain_cell(_categories.c.slug),
            # Each link starts with its social's slug (slugs.SLUG_REGEX): never a formula.
            "socials": never_formula(
                select(spaced_list(links.c.cell, links.c.position)).scalar_subquery()
            ),
        },
    )


# Both are stored with the listing (`Listing.output_json`, `Listing.output_csv`) by the
# flush that changes what they show (`keep_pages`), so that a page or an export reads one
# text a row; a row whose text is not stored (NULL: written outside the ORM, cleared by a
# trigger, or there before migration 0025) has it written as it is read, with the same
# expressions, over `_written` (an alias: the listings read are the outer statement's).
_written = _listings.alias("written")


def _written_rows(*columns: Any) -> Select:
    return select(*columns).select_from(_with_subcategory(_written))


def _of_listing(rows: Select) -> Select:
    """`rows` of the listing the outer statement reads."""
    return rows.where(_written.c.id == _listings.c.id).correlate(_listings)


COMPUTED_JSON = _of_listing(_written_rows(json_output(_written))).scalar_subquery()
COMPUTED_CSV = csv_lines_of(_of_listing(_written_rows(*csv_output(_written)))).scalar_subquery()
OUTPUT = select(func.coalesce(_listings.c.output_json, COMPUTED_JSON)).select_from(_listings)

# Listings (a page) as their output: one statement whatever their number, and nothing
# to dump.
listings_output = encoded_by_id(OUTPUT, _listings.c.id)

# An export's lines (sql.csv_lines_of), the listings joined to their subcategory (which it
# may be filtered by).
CSV_LINES = select(func.coalesce(_listings.c.output_csv, COMPUTED_CSV)).select_from(
    _with_subcategory(_listings)
)


def store_outputs(connection: Connection, ids: Collection[Any]) -> int:
    """Store the outputs of the listings with these ids: how many were stored.

    Their rows are locked first, in the order of their ids, by a statement of its own: on
    PostgreSQL the outputs are then written from a snapshot taken once no other
    transaction can change them (an UPDATE that waited for a row would write what its
    snapshot saw, over a change committed meanwhile). A flush's own changes hold those
    locks already. At most STORED_AT_ONCE ids a statement (PostgreSQL binds 65,535
    parameters at most)."""
    stored, ordered = 0, sorted(ids)
    locks = connection.dialect.name != "sqlite"
    for start in range(0, len(ordered), STORED_AT_ONCE):
        chunk = ordered[start : start + STORED_AT_ONCE]
        if locks:
            connection.execute(LOCKED, {"ids": chunk})
        stored += connection.execute(STORE, {"ids": chunk}).rowcount
    return stored


STORED_AT_ONCE = 10_000
_IDS = bindparam("ids", expanding=True)
# FOR UPDATE is PostgreSQL's; SQLite's writers take turns (store_outputs does not ask).
LOCKED = (
    select(_listings.c.id)
    .where(_listings.c.id.in_(_IDS))
    .order_by(_listings.c.id)
    .with_for_update()
)
# The outputs of listings by id, stored in one statement: the cells in a subquery (OFFSET
# 0: each is written once, sql.csv_lines_of), updated from it. A row's updatedAt is not an
# edit's, and stays.
_STORED = csv_lines_of(
    _written_rows(
        _written.c.id.label("written_id"),
        json_output(_written).label("written_json"),
        *csv_output(_written),
    ).where(_written.c.id.in_(_IDS)),
    carry=2,
).subquery()
STORE = (
    update(_listings)
    .where(_listings.c.id == _STORED.c.written_id)
    .values(
        output_json=_STORED.c.written_json,
        output_csv=list(_STORED.c)[2],
        updated_at=_listings.c.updated_at,
    )
)


def store_missing_outputs(batch: int = 1000, most: int | None = None) -> int:
    """Store the outputs of the listings that have none (written outside the ORM, cleared
    by a trigger, or there before migration 0025), `batch` at a time in the order of their
    ids (found by a partial index of those rows alone), each batch committed, no batch
    begun once `most` are stored: how many were stored."""
    stored, after = 0, None
    missing = (
        select(_listings.c.id)
        .where(_listings.c.output_json.is_(None))
        .order_by(_listings.c.id)
        .limit(batch)
    )
    while most is None or stored < most:
        ids = db.session.scalars(
            missing if after is None else missing.where(_listings.c.id > after)
        ).all()
        if not ids:
            break
        stored += store_outputs(db.session.connection(), ids)
        db.session.commit()
        after = ids[-1]
    return stored


def listing_keys(shown: frozenset[Table]) -> dict[Table, str | None]:
    """For each table the pages read, the attribute that names a row's listing: `id` for
    a listing, its foreign key for a row of a listing's (a social link), None for a row
    that listings name (any page may show it)."""
    keys: dict[Table, str | None] = {}
    for table in shown:
        if table is _listings:
            keys[table] = "id"
            continue
        to_listing = [fk.parent for fk in table.foreign_keys if fk.column.table is _listings]
        keys[table] = to_listing[0].key if to_listing else None
    return keys


SHOWN = tables_read(OUTPUT)
LISTING_KEYS = listing_keys(SHOWN)


def keep_pages(session: Session, _context: object) -> None:
    """After a flush that changed what pages show: the changed listings' outputs stored
    again, then their pages' revisions turned (in the order a listing's change takes their
    locks: the listing's row, then its counts), each in one statement.

    A row that listings name (a category, a social) turns every revision; the outputs it
    shows were cleared by the database's triggers if it changed a slug, for the reads to
    write and the worker to store again (`store_missing_outputs`): a rename holds the
    rows it names only as long as clearing them takes."""
    changed_ids: set[Any] = set()  # whose pages' revisions turn; their outputs are stored
    new_ids: set[Any] = set()  # new listings: outputs stored, revisions turned by counts
    every_revision = False
    for changed, rows in (
        ("new", session.new),
        ("dirty", session.dirty),
        ("deleted", session.deleted),
    ):
        for row in rows:
            table = getattr(type(row), "__table__", None)
            if table not in LISTING_KEYS:
                continue
            key = LISTING_KEYS[table]
            if key is None:
                every_revision |= changed != "new"  # a new one is on no page yet
            elif table is not _listings or changed == "dirty":
                changed_ids.add(getattr(row, key))
            elif changed == "new":  # a deleted one turns its revision with its counts
                new_ids.add(row.id)
    if not (changed_ids or new_ids or every_revision):
        return
    connection = session.connection()
    if changed_ids or new_ids:
        store_outputs(connection, changed_ids | new_ids)
    counts = ListingCount.__table__
    if every_revision:  # any page may show it
        connection.execute(counts.update().values(revision=new_revision()))
    elif changed_ids:
        of_listings = select(_listings.c.location_id, _listings.c.kind).where(
            _listings.c.id.in_(changed_ids)
        )
        connection.execute(
            counts.update()
            .where(tuple_(counts.c.location_id, counts.c.kind).in_(of_listings))
            .values(revision=new_revision())
        )


# Registered by create_app (platform/events.py): the outputs and revisions, in the change's
# flush.
LISTENERS = ((Session, "after_flush", keep_pages, {}),)
