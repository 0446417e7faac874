"""The parts every slugged resource shares: its three reads, and create/update/delete steps.

A route group calls `register_reads` for GET /, /slug/:slug and /id/:id, and builds its
writes from `create_named`, `update_named` and `delete_unused`. Resources that live inside
a location (businesses, employers) pass a `scope` that confines every read to it.
"""

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from flask import Blueprint, Response, request, url_for
from marshmallow import Schema
from sqlalchemy import Select, select

from ..errors import abort
from ..extensions import db
from ..openapi import spec
from ..pagination import Fetch, ListArgs, page_response, parse_list_args, sort_fields
from ..slugs import choose_slug
from .common import apply_changes, created, no_content, refuse_if_used

Filters = Callable[[Select, dict[str, Any]], Select]


def register_reads(
    bp: Blueprint,
    model: Any,
    out: type[Schema],
    *,
    what: str,
    list_args: type[ListArgs] = ListArgs,
    filters: Filters | None = None,
    scope: Callable[..., list[Any]] | None = None,
    options: Sequence[Any] = (),
    stored_total: Callable[..., int | None] | None = None,
    fetch: Fetch | None = None,
) -> None:
    """GET / (paged, sorted, filtered), GET /slug/:slug and GET /id/:id for `model`.

    `scope(**path_args)` returns the criteria confining reads to a parent named in the path
    (and answers 404 for an unknown parent); `options` eager-load what the output shows;
    `stored_total(args, **path_args)` may answer the list's total without counting;
    `fetch` may load a page's rows itself (see `page_response`).
    """
    sortable = sort_fields(model)
    one, many = out(), out(many=True)
    args_schema = list_args()  # built once: a schema deep-copies its fields when made

    def criteria(path_args: dict[str, Any]) -> list[Any]:
        return scope(**path_args) if scope is not None else []

    def find(path_args: dict[str, Any], *match: Any) -> Any:
        stmt = select(model).where(*criteria(path_args), *match).options(*options)
        found = db.session.scalar(stmt)
        if found is None:
            abort(404, f"No such {what}.")
        return found

    def list_items(**path_args: Any) -> Response:
        args = parse_list_args(args_schema)
        stmt = select(model).where(*criteria(path_args))
        if filters is not None:
            stmt = filters(stmt, args)
        return page_response(
            stmt,
            args,
            many.dump,
            sortable=sortable,
            default_sort="name",
            tiebreak=model.id,
            options=options,
            total=stored_total(args, **path_args) if stored_total is not None else None,
            fetch=fetch,
        )

    def get_by_slug(item_slug: str, **path_args: Any) -> dict[str, Any]:
        return one.dump(find(path_args, model.slug == item_slug))

    def get_by_id(item_id: uuid.UUID, **path_args: Any) -> dict[str, Any]:
        return one.dump(find(path_args, model.id == item_id))

    spec(response=out, query=list_args, paged=True, sortable=sortable)(list_items)
    spec(response=out)(get_by_slug)
    spec(response=out)(get_by_id)
    list_items.__doc__ = f"List {what} entries (paged, sortable)."
    get_by_slug.__doc__ = f"Get one {what} by slug."
    get_by_id.__doc__ = f"Get one {what} by id."
    bp.add_url_rule("/", "list", list_items, methods=["GET"])
    bp.add_url_rule("/slug/<slug:item_slug>", "get_by_slug", get_by_slug, methods=["GET"])
    bp.add_url_rule("/id/<uuid:item_id>", "get_by_id", get_by_id, methods=["GET"])


def create_named(
    model: Any,
    out: Schema,
    data: dict[str, Any],
    *scope: Any,
    reserved: frozenset[str] = frozenset(),
) -> Response:
    """Insert `model(**data)` with its slug chosen by the slug rules; 201 with Location."""
    data["slug"] = choose_slug(model, data.get("slug"), data["name"], *scope, reserved=reserved)
    item = model(**data)
    db.session.add(item)
    db.session.commit()
    location = url_for(
        f"{request.blueprint}.get_by_slug", item_slug=item.slug, **(request.view_args or {})
    )
    return created(out.dump(item), location)


def update_named(
    item: Any,
    out: Schema,
    data: dict[str, Any],
    *scope: Any,
    reserved: frozenset[str] = frozenset(),
    also: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Apply a partial change; a new `slug` renames (409 when taken). `also` runs what must
    change in the same transaction."""
    if "slug" in data:
        data["slug"] = choose_slug(
            type(item), data["slug"], item.name, *scope, exclude=item.id, reserved=reserved
        )
    apply_changes(item, data)
    if also is not None:
        also()
    db.session.commit()
    return out.dump(item)


def delete_unused(item: Any, what: str, uses: dict[str, Select]) -> Response:
    """Delete `item` unless something in `uses` still refers to it (409 naming them)."""
    refuse_if_used(what, uses)
    db.session.delete(item)
    db.session.commit()
    return no_content()
