"""/locations/:slug/businesses and /locations/:slug/employers: one piece of code, two kinds.

Anyone reads and searches; the location's owners and admins (and supers) write. PUT and
DELETE name their target in the body by `id` or current `slug`.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from flask import Blueprint, Response, current_app, g
from marshmallow import ValidationError
from sqlalchemy import Row, Select, bindparam, inspect, select
from sqlalchemy.orm import joinedload, selectinload

from ..access import located
from ..audit import changed_fields, shown
from ..endpoints import Access, Unlocated, endpoint
from ..listing_pages import CSV_LINES, listings_output
from ..models import (
    Business,
    Category,
    Employer,
    Listing,
    ListingCount,
    ListingSocial,
    Location,
    Social,
    Vote,
)
from ..models.api_token import Scope
from ..platform import reads
from ..platform.caching import answer_if_known, may_answer_early
from ..platform.csv_export import columns, csv_response
from ..platform.csv_import import read_rows, row_key
from ..platform.current import current_application, current_globals, current_request
from ..platform.errors import APIError, abort, invalid
from ..platform.extensions import db
from ..platform.limits import costly_reads_per_ip, exports_per_ip, read_was_costly
from ..platform.output import schema_instance
from ..platform.page_queries import every_line, paginate
from ..platform.pagination import Order, Page, sort_fields
from ..platform.slugs import derive_slug, slugs_in_use
from ..schemas.base import TargetSchema
from ..schemas.common import ImportArgs, ImportOut
from ..schemas.listings import (
    ListingIn,
    ListingListArgs,
    ListingOut,
    ListingUpdate,
)
from ..search import TERM_SCHEMA, checked_term, rows_read, search_criteria, search_of
from .changes import apply_changes, create_named, delete_unused, update_named
from .lookups import by_slug_or_422, find_target, get_or_404, id_by_slug, named_by_path


class PathLocation(NamedTuple):
    """The path's location as a list page's statement finds it (`location_with_counts`)."""

    id: Any
    slug: str
    total: int | None
    revision: Any


def known_this_request(model: Any) -> dict[str, Any]:
    """The rows of a reference list (categories, socials) this request has looked up, by
    slug: an import's rows name the same few again and again, looked up once each."""
    return g.setdefault(f"known_{model.__tablename__}", {})


def resolve_subcategory(slug: str | None) -> Category | None:
    if slug is None:
        return None
    known = known_this_request(Category)
    category = known.get(slug)
    if category is None:
        category = known[slug] = by_slug_or_422(Category, slug, "subcategory")
    if category.parent_id is None:
        invalid("subcategory", [f"{slug!r} is a top-level category; use one of its subcategories."])
    return category


def resolve_socials(links: list[dict[str, str]] | None) -> list[ListingSocial]:
    """The social links, in the order given; the list replaces the old one as a whole."""
    links = links or []
    slugs = [link["social"] for link in links]
    socials = known_this_request(Social)
    if unknown := set(slugs) - socials.keys():
        socials |= {
            s.slug: s for s in db.session.scalars(select(Social).where(Social.slug.in_(unknown)))
        }
    errors: dict[int, dict[str, list[str]]] = {}
    for index, slug in enumerate(slugs):
        if slug not in socials:
            errors[index] = {"social": [f"No social {slug!r}."]}
        elif slug in slugs[:index]:
            errors[index] = {"social": ["Listed twice."]}
    if errors:
        invalid("socials", errors)
    return [
        ListingSocial(social=socials[link["social"]], url=link["url"], position=position)
        for position, link in enumerate(links)
    ]


REFERENCES = {"subcategory": resolve_subcategory, "socials": resolve_socials}


def reference_problems(data: dict[str, Any]) -> dict[str, Any]:
    """Resolve the slugs `data` names (its subcategory and socials) in place; the problems
    of each that names nothing, all of them (a CSV row's report lists every one at once)."""
    problems: dict[str, Any] = {}
    for name, resolve in REFERENCES.items():
        if name in data:
            try:
                data[name] = resolve(data[name])
            except APIError as error:  # a slug naming nothing: 422 on that field
                problems |= error.extra.get("errors") or {name: [error.description]}
    return problems


def resolve_references(data: dict[str, Any]) -> None:
    if problems := reference_problems(data):
        abort(422, "The request body has invalid fields.", errors=problems)


_listings, _categories, _locations = Listing.__table__, Category.__table__, Location.__table__


def plan_import(
    model: type[Listing], location: Location, rows: list[dict[str, Any]], errors: dict[str, Any]
) -> list[tuple[Listing | None, dict[str, Any]]]:
    """What each valid row does: (the listing it updates, or None to create one; its data).

    A row whose `slug` names a listing of this location updates it, changing only the
    columns present; any other row creates one. Every row's problems go into `errors`.
    """
    slugs = {row["slug"] for row in rows if row.get("slug")}
    # With their socials: a row that sends them replaces the old ones, which would each
    # be loaded alone.
    existing = {
        listing.slug: listing
        for listing in db.session.scalars(
            select(model)
            .where(model.location_id == location.id, model.slug.in_(slugs))
            .options(selectinload(model.socials))
        )
    }
    first_row: dict[str, int] = {}
    plans = []
    unnamed: list[tuple[str, dict[str, Any]]] = []  # new rows that send no slug
    for number, row in enumerate(rows, 1):
        key = row_key(number)
        if key in errors:
            continue
        slug = row.pop("slug", None) or None
        if slug in first_row:
            errors[key] = {"slug": [f"Also in row {first_row[slug]}."]}
            continue
        if slug is not None:
            first_row[slug] = number
        target = existing.get(slug)
        if target is None and slug is not None:
            row["slug"] = slug
        problems: dict[str, Any] = {}
        try:
            data = schema_instance(ListingUpdate if target else ListingIn).load(row)
        except ValidationError as error:  # its valid fields' references are checked too
            data, problems = dict(error.valid_data or {}), dict(error.messages)
        problems |= reference_problems(data)
        if problems:
            errors[key] = problems
            continue
        if target is None:
            data["location"] = location
            if "slug" not in data:
                unnamed.append((key, data))
        plans.append((target, data))
    name_new_rows(model, location, plans, unnamed, errors)
    return plans


def differing(target: Listing, data: dict[str, Any]) -> dict[str, Any]:
    """What of an import row's `data` differs from what `target` holds (as `plan_import`
    loaded it: its columns and its socials; the subcategory by its id, never loaded), by
    the audit log's measure (`audit.shown`). A row that changes nothing then assigns
    nothing: its listing stays clean, with nothing to write (its socials are not replaced
    by equal copies) or to compare at the commit."""
    loaded = inspect(target).dict
    changes = {}
    for field, value in data.items():
        if field == "subcategory":
            same = target.subcategory_id == (value.id if value is not None else None)
        else:
            same = field in loaded and shown(loaded[field]) == shown(value)
        if not same:
            changes[field] = value
    return changes


def name_new_rows(
    model: type[Listing],
    location: Location,
    plans: list[tuple[Listing | None, dict[str, Any]]],
    unnamed: list[tuple[str, dict[str, Any]]],
    errors: dict[str, Any],
) -> None:
    """The slugs of the new rows that send none, derived from their names as the slug rules
    do, against the location's slugs and every slug the import's rows send (so a row's
    explicit slug is its own wherever it stands): in a dry run too, which then answers as
    the import would. One query for the lot, not one (and a flush) per row."""
    if not unnamed:
        return
    in_use = slugs_in_use(model, model.location_id == location.id)
    in_use |= {data["slug"] for target, data in plans if target is None and "slug" in data}
    for key, data in unnamed:
        try:
            data["slug"] = derive_slug(model, data["name"], in_use=in_use)
        except APIError as error:  # a name with nothing to make a slug of
            errors[key] = error.extra.get("errors") or {"slug": [error.description]}
            continue
        in_use.add(data["slug"])


def too_few_to_be_broad() -> bool:
    """The path's location lists fewer than RATELIMIT_BROAD_SEARCH_ROWS of the kind searched
    (`g.listing_counts`): no search of it reads that many, so none checks the allowance of
    broad searches (an address past it may still search there)."""
    counted = current_globals().listing_counts[0]
    return counted < current_application().config["RATELIMIT_BROAD_SEARCH_ROWS"]


# One limit for both kinds' searches (Flask-Limiter keys a route's limits by its view's
# module and name, the same for both blueprints: two would both count each search).
broad_searches_per_ip = costly_reads_per_ip(too_few_to_be_broad)


def listings_blueprint(
    model: type[Listing], plural: str, noun: str, uses: Callable[[Listing], dict[str, Select]]
) -> Blueprint:
    bp = Blueprint(plural, __name__, url_prefix=f"/locations/<slug:slug>/{plural}")
    # What the output shows, loaded with the row.
    load = (joinedload(model.subcategory), selectinload(model.socials))
    # Sorted by the table's columns: a list page's statements are SQL alone (no ORM).
    list_args = ListingListArgs.sorted_by(sort_fields(_listings.c), default="name")
    search_args = ListingListArgs.sorted_by(sort_fields(_listings.c))  # default: by relevance
    export_args = list_args.without_paging()
    kind = model.__mapper__.polymorphic_identity

    # Built once, their values bound per request (paginate's `params`): the location's
    # listings of this kind, and those of one subcategory.
    of_location = select(_listings.c.id).where(
        _listings.c.location_id == bindparam("location_id"), _listings.c.kind == kind
    )
    of_subcategory = of_location.where(
        _listings.c.subcategory_id == id_by_slug(_categories.c, bindparam("subcategory"))
    )
    # An export's lines (listing_pages.CSV_LINES), the same two ways.
    export_of_location = CSV_LINES.where(
        _listings.c.location_id == bindparam("location_id"), _listings.c.kind == kind
    )
    export_of_subcategory = export_of_location.where(
        _categories.c.slug == bindparam("subcategory")  # joined already: its slug
    )

    # Searches, built once per shape (search.search_criteria: at most 50 words, indexed or
    # not) and list: the statement, and the order by relevance (named, so that its pages'
    # statements are kept too).
    @functools.cache
    def search_statement(shape: tuple[int, bool], subcategory: bool) -> tuple[Select, Order]:
        criteria, relevance = search_criteria(_listings.c, shape)
        by_relevance = Order([relevance, _listings.c.name.asc()])
        by_relevance.text = "relevance"
        return (of_subcategory if subcategory else of_location).where(*criteria), by_relevance

    # Built once (not for every request, with its cache key): the path's location, as much
    # of it as these reads use (its id and slug), with its stored counts of this kind, in
    # one statement of SQL alone.
    _counts = ListingCount.__table__
    location_with_counts = (
        select(_locations.c.id, _locations.c.slug, _counts.c.total, _counts.c.revision)
        .select_from(
            _locations.outerjoin(
                _counts, (_counts.c.location_id == _locations.c.id) & (_counts.c.kind == kind)
            )
        )
        .where(_locations.c.slug == bindparam("slug"))
    )

    def revision_of(location: Row) -> tuple[Any, ...]:
        return location.id, kind, current_globals().listing_counts[1]

    def locate_with_counts(slug: str) -> Row:
        """The path's location as these reads use it (a row with its `id` and `slug`), and
        in `g.listing_counts` the unfiltered list's total, kept by the ORM (no COUNT over
        the location), and the revision of what the location's pages of this kind show."""
        row = located(reads.first(location_with_counts, {"slug": slug}), slug)
        g.listing_counts = (row.total or 0, row.revision)
        return row

    # The same list, its location named by its slug: a first page found with its location
    # in one statement (`Endpoint.locate_later`).
    of_location_by_slug = select(_listings.c.id).where(
        _listings.c.location_id == id_by_slug(_locations.c, bindparam("slug")),
        _listings.c.kind == kind,
    )

    def first_page_not_kept() -> bool:
        """The location's first page, unfiltered, which no answer kept could serve, from a
        database across the network. SQLite, in the process, has no round trip to save:
        there the two statements cost less than the one (bench/INSTRUCTIONS.md)."""
        if db.engine.dialect.name == "sqlite" or may_answer_early():
            return False
        args = current_request().args
        try:  # as the query's schema reads it ("01" too); one it refuses is not
            return int(args.get("page", "1")) == 1 and "subcategory" not in args
        except ValueError:
            return False

    def first_page_located(args: dict[str, Any], slug: str) -> Response | Page:
        """The first page and its location in one statement; the answer kept for that
        revision if another request kept it meanwhile.

        A page with no rows (no listing) finds its location alone after it (404 if there
        is none), in a snapshot of its own: a listing added between the two would have
        its revision name an empty page. That answer is not kept (no revision asked)."""
        page = paginate(
            of_location_by_slug,
            args,
            tiebreak=_listings.c.id,
            encoded=listings_output,
            params={"slug": slug},
            located=location_with_counts,
        )
        if page.located is None:
            g.path_location = locate_with_counts(slug)
            page.total = current_globals().listing_counts[0]
            return page
        location = g.path_location = PathLocation(*page.located)
        g.listing_counts = (location.total or 0, location.revision)
        return answer_if_known(*revision_of(location)) or page

    def target_of(location: Location, data: dict[str, Any]) -> Listing:
        return find_target(model, data, model.location_id == location.id, what=noun)

    @bp.get("/", endpoint="list")
    @endpoint(
        response=ListingOut,
        query=list_args,
        paged=True,
        locate=locate_with_counts,
        revision=revision_of,
        locate_later=first_page_not_kept,
    )
    def list_listings(args, location: Row | Unlocated):  # locate_with_counts: id and slug
        if isinstance(location, Unlocated):
            return first_page_located(args, location.slug)
        params = {"location_id": location.id, "subcategory": args.get("subcategory")}
        return paginate(
            of_subcategory if "subcategory" in args else of_location,
            args,
            tiebreak=_listings.c.id,
            total=None if "subcategory" in args else current_globals().listing_counts[0],
            encoded=listings_output,
            revision=revision_of(location),
            params=params,
        )

    # An export shows what the list does, so the list's revision determines it with its URL
    # (its ETag, known before a row is read), and with its columns, which a new release
    # may change while the revision stays.
    export_columns = tuple(columns(schema_instance(ListingOut)))

    def export_revision(location: Row) -> tuple[Any, ...]:
        return (*revision_of(location), export_columns)

    @bp.get("/export.csv")
    @endpoint(
        response=ListingOut,
        query=export_args,
        csv=True,
        limits=(exports_per_ip,),
        locate=locate_with_counts,
        revision=export_revision,
    )
    def export_listings(args, location: Row):  # locate_with_counts: its id and slug
        stmt = export_of_subcategory if "subcategory" in args else export_of_location
        lines = every_line(
            stmt.order_by(*args["sort"], _listings.c.id.asc()),
            {"location_id": location.id, "subcategory": args.get("subcategory")},
        )
        return csv_response(ListingOut, lines, f"{location.slug}-{plural}.csv", lines=True)

    @bp.get("/slug/<slug:item_slug>", endpoint="get_by_slug")
    @bp.get("/id/<uuid:item_id>", endpoint="get_by_id")
    @endpoint(response=ListingOut)
    def get_listing(location: Location, item_slug=None, item_id=None):
        criteria = (model.location_id == location.id, named_by_path(model, item_slug, item_id))
        return get_or_404(model, *criteria, what=noun, options=load)

    @bp.get("/search/<term>")
    @endpoint(
        response=ListingOut,
        query=search_args,
        paged=True,
        path={"term": TERM_SCHEMA},
        limits=(broad_searches_per_ip,),
        locate=locate_with_counts,
        revision=revision_of,
    )
    def search(args, location: Row, term: str):
        found = search_of(checked_term(term))
        stmt, by_relevance = search_statement(found.shape, "subcategory" in args)
        page = paginate(
            stmt,
            args,
            default_order=by_relevance,
            tiebreak=_listings.c.id,
            encoded=listings_output,
            count_with_page=True,
            params={
                **found.values,
                "location_id": location.id,
                "subcategory": args.get("subcategory"),
            },
        )
        broad = current_app.config["RATELIMIT_BROAD_SEARCH_ROWS"]
        if rows_read(found, page.total, current_globals().listing_counts[0]) >= broad:
            read_was_costly()
        return page

    @bp.post("/import")
    @endpoint(
        ListingIn,
        ImportOut,
        query=ImportArgs,
        access=Access.ACCESS,
        scope=Scope.DIRECTORY_WRITE,
        csv_body=True,
    )
    def import_listings(args, text: str, location: Location):
        _, rows, errors = read_rows(text, schema_instance(ListingIn))
        plans = plan_import(model, location, rows, errors)
        if errors:
            abort(422, "The CSV has invalid rows; nothing was imported.", errors=errors)
        created = updated = 0
        for target, data in plans:
            if target is None:
                created += 1
                if not args["dry_run"]:  # its slug chosen already (name_new_rows)
                    db.session.add(model(**data))
            elif changes := differing(target, data):
                # Applied in a dry run too, to tell a row that changes something from one
                # that changes nothing (the audit log's measure); rolled back below. No
                # flush in between (replacing the socials loads the old ones), which would
                # leave nothing pending to compare.
                with db.session.no_autoflush:
                    apply_changes(target, changes)
                    updated += bool(changed_fields(target))
        if args["dry_run"]:
            db.session.rollback()
        else:
            db.session.commit()
        unchanged = len(plans) - created - updated
        return {
            "created": created,
            "updated": updated,
            "unchanged": unchanged,
            "dry_run": args["dry_run"],
        }

    @bp.post("/")
    @endpoint(
        ListingIn,
        ListingOut,
        status=201,
        access=Access.ACCESS,
        scope=Scope.DIRECTORY_WRITE,
        conflicts=True,
    )
    def create(data, location: Location):
        resolve_references(data)
        data["location"] = location
        return create_named(model, data, model.location_id == location.id)

    @bp.put("/")
    @endpoint(
        ListingUpdate,
        ListingOut,
        access=Access.ACCESS,
        scope=Scope.DIRECTORY_WRITE,
        conflicts=True,
        not_found=True,
    )
    def update(data, location: Location):
        item = target_of(location, data)
        resolve_references(data)
        return update_named(item, data, model.location_id == location.id)

    @bp.delete("/")
    @endpoint(
        TargetSchema,
        status=204,
        access=Access.ACCESS,
        scope=Scope.DIRECTORY_WRITE,
        conflicts=True,
        not_found=True,
    )
    def delete(target, location: Location):
        item = target_of(location, target)
        return delete_unused(item, noun, uses(item))

    # One function serves both kinds: each blueprint's views say which in their summary.
    list_listings.__doc__ = f"List the {plural} of a location (paged, sortable)."
    get_listing.__doc__ = f"Get one {noun} by slug or by id."
    search.__doc__ = f"Search the {plural} of a location (accent- and case-insensitive)."
    export_listings.__doc__ = f"Every {noun} of the location as CSV (the list's filters and sort)."
    import_listings.__doc__ = (
        f"Create or update {plural} from CSV: all rows or none (`dryRun=true` only checks)."
    )
    create.__doc__ = f"Create a {noun} at the location (its owners and admins)."
    update.__doc__ = f"Change the {noun} named in the body by `id` or current `slug`."
    delete.__doc__ = f"Delete the {noun} named in the body."
    return bp


businesses = listings_blueprint(Business, "businesses", "business", lambda item: {})
employers = listings_blueprint(
    Employer,
    "employers",
    "employer",
    lambda item: {"votes": select(Vote.id).where(Vote.employer_id == item.id)},
)
