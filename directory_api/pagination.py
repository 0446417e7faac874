"""The one list helper: page, perPage, sort, filters, total and the RFC 8288 Link header."""

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from flask import Response, jsonify, request
from marshmallow import Schema, fields, validate
from sqlalchemy import Select, func, select
from sqlalchemy.orm import InstrumentedAttribute

from .bodies import load_query
from .errors import abort
from .extensions import db

MAX_PER_PAGE = 100
PATH_SAFE = "/!$&'()*+,;=:@-._~"  # RFC 3986 pchar and "/", left as they are
# Loads one page's rows: given the SELECT of the page's ids and the ORDER BY clauses.
Fetch = Callable[[Select, list[Any]], Sequence[Any]]
DEFAULT_PER_PAGE = 20


class ListArgs(Schema):
    """Query parameters every list takes; resources subclass it to add their filters."""

    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(
        data_key="perPage",
        load_default=DEFAULT_PER_PAGE,
        validate=validate.Range(min=1, max=MAX_PER_PAGE),
    )
    sort = fields.String(load_default=None, validate=validate.Length(min=1, max=200))


def sort_fields(model: Any, *extra: str) -> dict[str, InstrumentedAttribute]:
    """The sortable fields of a model: name/slug where it has them, the timestamps, and extra."""
    names = {"name": "name", "slug": "slug", "createdAt": "created_at", "updatedAt": "updated_at"}
    names.update({field: field for field in extra})
    return {api: getattr(model, attr) for api, attr in names.items() if hasattr(model, attr)}


def order_by(sort: str, sortable: dict[str, InstrumentedAttribute], tiebreak: Any) -> list[Any]:
    clauses = []
    for raw in sort.split(","):
        name = raw.strip()
        descending = name.startswith("-")
        column = sortable.get(name.lstrip("-"))
        if column is None:
            allowed = ", ".join(sortable)
            abort(
                422,
                "The query has invalid parameters.",
                errors={"sort": [f"Cannot sort by {name!r}; sortable fields: {allowed}."]},
            )
        clauses.append(column.desc() if descending else column.asc())
    # Ties break on id, so pages never overlap or skip.
    clauses.append(tiebreak.asc())
    return clauses


DEFAULT_ARGS = ListArgs()


def parse_list_args(schema: ListArgs | None = None) -> dict[str, Any]:
    return load_query(schema or DEFAULT_ARGS)


def _page_url(page: int) -> str:
    args = request.args.to_dict()
    args["page"] = str(page)
    # The path as sent, percent-encoded again: a search term may hold any character,
    # line breaks included, and a header may not.
    return f"{quote(request.path, safe=PATH_SAFE)}?{urlencode(args)}"


def page_response(
    stmt: Select,
    args: dict[str, Any],
    dump: Any,
    *,
    sortable: dict[str, InstrumentedAttribute],
    default_sort: str | list[Any],
    tiebreak: Any,
    options: Sequence[Any] = (),
    total: int | None = None,
    fetch: Fetch | None = None,
) -> Response:
    """Run one page of `stmt` and answer it with items, counts and Link header.

    `default_sort` is a sort parameter ("name") or, for orders no client can name
    (search relevance), a list of SQL order clauses. `options` are loader options
    (eager loads) for the page's rows. `total`, when the caller knows it (a stored count),
    saves the COUNT(*). `fetch(page_ids, order)`, for hot lists, loads the page's rows
    itself (plain rows instead of ORM objects); `dump` shapes either.
    """
    page, per_page = args["page"], args["per_page"]
    if total is None:
        # COUNT(*) over the same FROM and WHERE: no subquery that would carry every column.
        total = db.session.scalar(
            stmt.with_only_columns(func.count(), maintain_column_froms=True).order_by(None)
        )
    sort = args.get("sort")
    if sort is None and not isinstance(default_sort, str):
        clauses = [*default_sort, tiebreak.asc()]
    else:
        clauses = order_by(sort or default_sort, sortable, tiebreak)
    # A deferred join: the page's ids come from the index alone (cheap even deep in a
    # long list), then only those rows are loaded, with what the output shows.
    page_ids = (
        stmt.with_only_columns(tiebreak, maintain_column_froms=True)
        .order_by(*clauses)
        .limit(per_page)
        .offset((page - 1) * per_page)
    )
    if fetch is None:
        entity = stmt.column_descriptions[0]["entity"]
        page_stmt = (
            select(entity).where(tiebreak.in_(page_ids)).options(*options).order_by(*clauses)
        )
        rows: Sequence[Any] = list(db.session.scalars(page_stmt).unique())
    else:
        rows = fetch(page_ids, clauses)
    response = jsonify({"items": dump(rows), "page": page, "perPage": per_page, "total": total})
    last = max(1, -(-total // per_page))
    links = [f'<{_page_url(1)}>; rel="first"', f'<{_page_url(last)}>; rel="last"']
    if page > 1:
        links.append(f'<{_page_url(min(page - 1, last))}>; rel="prev"')
    if page < last:
        links.append(f'<{_page_url(page + 1)}>; rel="next"')
    response.headers["Link"] = ", ".join(links)
    return response
