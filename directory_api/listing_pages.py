"""What a page of businesses or employers shows, declared once: the statement that writes
each listing's output (`ListingOut`, written by the database), and, derived from it, the
changes that turn the revision of the location's pages (whose ETags a revalidation is
answered by, without the page's work: platform/caching.py).

Every table the output statement reads is one whose changes a page may show: a listing
itself (inserted and deleted ones turn theirs with their counts, models/listing.py), a row
that names its listing (a social link: that listing's pages), or a row listings name (a
category, a social: any page may show it, so every revision turns). A join added to the
output is followed by its revisions with nothing more to write.
"""

from typing import Any

from sqlalchemy import Table, func, literal_column, select, tuple_
from sqlalchemy.orm import Session

from .models import Category, Listing, ListingCount, ListingSocial, Social
from .models.listing import new_revision
from .platform.output import schema_instance
from .platform.page_queries import encoded_by_id
from .platform.sql import (
    csv_cells,
    json_list,
    json_of,
    json_text,
    never_formula,
    plain_cell,
    spaced_list,
    tables_read,
)
from .schemas.listings import ListingOut, SocialLinkOut

# Each row's `ListingOut` as JSON text (sql.json_of), its subcategory's slug and social
# links (in their order) included. Built once, not for every page (with its cache key); the
# page's ids and order are added per request.
_listings, _categories = Listing.__table__, Category.__table__
_links, _socials = ListingSocial.__table__, Social.__table__
_link_rows = (
    select(
        json_of(
            schema_instance(SocialLinkOut), {"social_slug": _socials.c.slug, "url": _links.c.url}
        ).label("link"),
        _links.c.position,
    )
    .select_from(_links.join(_socials, _links.c.social_id == _socials.c.id))
    .where(_links.c.listing_id == _listings.c.id)
    .order_by(_links.c.position)
    .correlate(_listings)
    .subquery()
)
LINKS = select(json_list(_link_rows.c.link, _link_rows.c.position)).scalar_subquery()
OUTPUT = select(
    json_text(
        json_of(
            schema_instance(ListingOut),
            {
                **_listings.c,
                "subcategory_slug": _categories.c.slug,
                "socials": func.coalesce(LINKS, literal_column("'[]'")),
            },
        )
    )
).select_from(_listings.outerjoin(_categories, _listings.c.subcategory_id == _categories.c.id))

# Listings (a page) as their output: one statement whatever their number, and nothing
# to dump.
listings_output = encoded_by_id(OUTPUT, _listings.c.id)

# Each row's CSV cells (sql.csv_cells), the same output as an export shows it: a social
# link is `social:url`, a listing's links one cell, separated by spaces, in their order.
_link_cells = (
    select(
        (_socials.c.slug + literal_column("':'") + _links.c.url).label("cell"), _links.c.position
    )
    .select_from(_links.join(_socials, _links.c.social_id == _socials.c.id))
    .where(_links.c.listing_id == _listings.c.id)
    .order_by(_links.c.position)
    .correlate(_listings)
    .subquery()
)
CSV_ROWS = select(
    *csv_cells(
        schema_instance(ListingOut),
        {
            **_listings.c,
            # Slugs (slugs.SLUG_REGEX) need neither a guard nor quotes.
            "slug": plain_cell(_listings.c.slug),
            "subcategory_slug": plain_cell(_categories.c.slug),
            # Each link starts with its social's slug (slugs.SLUG_REGEX): never a formula.
            "socials": never_formula(
                select(spaced_list(_link_cells.c.cell, _link_cells.c.position)).scalar_subquery()
            ),
        },
    )
).select_from(_listings.outerjoin(_categories, _listings.c.subcategory_id == _categories.c.id))


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


def turn_page_revisions(session: Session, _context: object) -> None:
    """After a flush that changed what pages show, turn their revisions: in one statement
    whatever the number of rows (a category rename touches all its listings)."""
    listing_ids: set[Any] = set()
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
                if changed != "new":  # a new row is on no page until a listing names it
                    turn_every_revision(session)
                    return
            elif table is not _listings or changed == "dirty":
                listing_ids.add(getattr(row, key))
    if listing_ids:
        counts = ListingCount.__table__
        of_listings = select(_listings.c.location_id, _listings.c.kind).where(
            _listings.c.id.in_(listing_ids)
        )
        session.connection().execute(
            counts.update()
            .where(tuple_(counts.c.location_id, counts.c.kind).in_(of_listings))
            .values(revision=new_revision())
        )


def turn_every_revision(session: Session) -> None:
    session.connection().execute(ListingCount.__table__.update().values(revision=new_revision()))


# Registered by create_app (platform/events.py): the revisions, in the change's flush.
LISTENERS = ((Session, "after_flush", turn_page_revisions, {}),)
