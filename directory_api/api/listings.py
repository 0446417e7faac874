"""/locations/:slug/businesses and /locations/:slug/employers: one piece of code, two kinds.

Anyone reads and searches; the location's owners and admins (and supers) write. PUT and
DELETE name their target in the body by `id` or current `slug`.
"""

import uuid
from collections.abc import Callable
from typing import Any

from flask import Blueprint, g
from sqlalchemy import Select, select
from sqlalchemy.orm import joinedload, selectinload

from ..access import require_location_access
from ..bodies import load_body
from ..errors import abort, invalid
from ..extensions import db
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
from ..openapi import spec
from ..pagination import page_response, parse_list_args, sort_fields
from ..schemas.base import TargetSchema
from ..schemas.fields import CONTROL, CONTROL_CHARACTERS, WHITESPACE
from ..schemas.listings import ListingIn, ListingListArgs, ListingOut, ListingUpdate
from ..search import search_criteria
from .common import by_slug_or_422, find_target, id_by_slug
from .resources import create_named, delete_unused, register_reads, update_named

MIN_TERM, MAX_TERM = 2, 100
# The same rule for the OpenAPI document: 2 to 100 characters once stripped, none of them
# a control character.
TERM_PATTERN = (
    f"^[{WHITESPACE}]*[^{WHITESPACE}{CONTROL}][^{CONTROL}]{{{MIN_TERM - 2},{MAX_TERM - 2}}}"
    f"[^{WHITESPACE}{CONTROL}][{WHITESPACE}]*$"
)


def location_id_or_404(slug: str) -> uuid.UUID:
    """The id of the location in the path, looked up once per request."""
    known = g.setdefault("location_ids", {})
    if slug not in known:
        known[slug] = db.session.scalar(select(Location.id).where(Location.slug == slug))
    if known[slug] is None:
        abort(404, "No such location.")
    return known[slug]


def resolve_subcategory(slug: str | None) -> Category | None:
    if slug is None:
        return None
    category = by_slug_or_422(Category, slug, "subcategory")
    if category.parent_id is None:
        invalid("subcategory", [f"{slug!r} is a top-level category; use one of its subcategories."])
    return category


def resolve_socials(links: list[dict[str, str]] | None) -> list[ListingSocial]:
    """The social links, in the order given; the list replaces the old one as a whole."""
    links = links or []
    slugs = [link["social"] for link in links]
    socials = {s.slug: s for s in db.session.scalars(select(Social).where(Social.slug.in_(slugs)))}
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


def resolve_references(data: dict[str, Any]) -> None:
    if "subcategory" in data:
        data["subcategory"] = resolve_subcategory(data["subcategory"])
    if "socials" in data:
        data["socials"] = resolve_socials(data["socials"])


# What a listing's output shows, as columns: rows load without the ORM's per-object work.
SHOWN = ("id", "slug", "name", "description", "branch", "email", "phone", "address", "website")


def fetch_listings(page_ids: Select, order: list[Any]) -> list[dict[str, Any]]:
    """One page of listings as plain rows, shaped by the same `ListingOut` as single ones.

    Two statements whatever the page size: the listings with their subcategory's slug,
    then all their social links.
    """
    table, categories = Listing.__table__, Category.__table__
    rows = db.session.execute(
        select(
            *(table.c[name] for name in SHOWN),
            table.c.created_at,
            table.c.updated_at,
            categories.c.slug.label("subcategory_slug"),
        )
        .select_from(table.outerjoin(categories, table.c.subcategory_id == categories.c.id))
        .where(table.c.id.in_(page_ids))
        .order_by(*order)
    )
    items = [{**row._mapping, "socials": []} for row in rows]
    if items:
        by_id = {item["id"]: item["socials"] for item in items}
        links, socials = ListingSocial.__table__, Social.__table__
        for listing_id, social_slug, url in db.session.execute(
            select(links.c.listing_id, socials.c.slug, links.c.url)
            .join(socials, links.c.social_id == socials.c.id)
            .where(links.c.listing_id.in_(list(by_id)))
            .order_by(links.c.position)
        ):
            by_id[listing_id].append({"social_slug": social_slug, "url": url})
    return items


def listings_blueprint(
    model: type[Listing], plural: str, noun: str, uses: Callable[[Listing], dict[str, Select]]
) -> Blueprint:
    bp = Blueprint(plural, __name__, url_prefix=f"/locations/<slug:slug>/{plural}")
    # What the output shows, loaded with the page: a constant number of queries per list.
    load = (joinedload(model.subcategory), selectinload(model.socials))
    sortable = sort_fields(model)
    one, many = ListingOut(), ListingOut(many=True)
    search_args = ListingListArgs()

    def in_location(slug: str) -> list[Any]:
        return [model.location_id == location_id_or_404(slug)]

    def filter_subcategory(stmt: Select, args: dict[str, Any]) -> Select:
        if "subcategory" in args:
            stmt = stmt.where(model.subcategory_id == id_by_slug(Category, args["subcategory"]))
        return stmt

    def stored_total(args: dict[str, Any], slug: str) -> int | None:
        """The unfiltered list's total, kept by the ORM; a filtered list counts its rows."""
        if "subcategory" in args:
            return None
        total = db.session.scalar(
            select(ListingCount.total).where(
                ListingCount.location_id == location_id_or_404(slug),
                ListingCount.kind == model.__mapper__.polymorphic_identity,
            )
        )
        return total or 0

    register_reads(
        bp,
        model,
        ListingOut,
        what=noun,
        list_args=ListingListArgs,
        filters=filter_subcategory,
        scope=in_location,
        options=load,
        stored_total=stored_total,
        fetch=fetch_listings,
    )

    @bp.get("/search/<term>")
    @spec(
        response=ListingOut,
        query=ListingListArgs,
        paged=True,
        sortable=sortable,
        # 2 to 100 characters once surrounding spaces are trimmed.
        path={"term": {"minLength": MIN_TERM, "pattern": TERM_PATTERN}},
    )
    def search(slug: str, term: str):
        """Search by words in name, branch, description and subcategory (accents ignored)."""
        criteria = in_location(slug)
        term = term.strip()
        problem = None
        if not MIN_TERM <= len(term) <= MAX_TERM:
            problem = f"Give {MIN_TERM} to {MAX_TERM} characters."
        elif CONTROL_CHARACTERS.search(term):
            # Refused before any query: databases disagree on them (SQLite's FTS fails on NUL).
            problem = "Contains control characters."
        if problem:
            abort(422, "The query has invalid parameters.", errors={"term": [problem]})
        args = parse_list_args(search_args)
        found, relevance = search_criteria(model, term)
        stmt = select(model).where(*criteria, *found)
        return page_response(
            filter_subcategory(stmt, args),
            args,
            many.dump,
            sortable=sortable,
            default_sort=[relevance, model.name],
            tiebreak=model.id,
            fetch=fetch_listings,
        )

    search.__doc__ = f"Search the {plural} of a location (accent- and case-insensitive)."

    @bp.post("/")
    @require_location_access
    @spec(body=ListingIn, response=ListingOut, status=201, conflicts=True)
    def create(location: Location):
        data = load_body(ListingIn())
        resolve_references(data)
        data["location"] = location
        return create_named(model, one, data, model.location_id == location.id)

    @bp.put("/")
    @require_location_access
    @spec(body=ListingUpdate, response=ListingOut, conflicts=True, not_found=True)
    def update(location: Location):
        data = load_body(ListingUpdate())
        item = find_target(model, data, model.location_id == location.id, what=noun)
        resolve_references(data)
        return update_named(item, one, data, model.location_id == location.id)

    @bp.delete("/")
    @require_location_access
    @spec(body=TargetSchema, status=204, conflicts=True, not_found=True)
    def delete(location: Location):
        target = find_target(
            model, load_body(TargetSchema()), model.location_id == location.id, what=noun
        )
        return delete_unused(target, noun, uses(target))

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
