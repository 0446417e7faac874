"""The one list helper: page, perPage, sort, filters, total and the RFC 8288 Link header.

A list declares its query schema, `ListArgs.sorted_by(...)` (or a subclass with filters),
whose `sort` field loads as ORDER BY clauses; the view returns `paginate(stmt, args)`, a
`Page`, and `@endpoint` answers it with `page_answer`.
"""

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from flask import Response, jsonify, request
from marshmallow import Schema, ValidationError, fields, validate
from sqlalchemy import Select, func, select
from sqlalchemy.orm import InstrumentedAttribute

from .extensions import db

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 20
MAX_SORT = 200
PATH_SAFE = "/!$&'()*+,;=:@-._~"  # RFC 3986 pchar and "/", left as they are
# Loads one page's rows: given the page's ids (a SELECT or a list) and the ORDER BY clauses.
Fetch = Callable[[Any, list[Any]], Sequence[Any]]
Sortable = Mapping[str, InstrumentedAttribute]


def sort_fields(model: Any, *extra: str) -> dict[str, InstrumentedAttribute]:
    """The sortable fields of a model: name/slug where it has them, the timestamps, and extra."""
    names = {"name": "name", "slug": "slug", "createdAt": "created_at", "updatedAt": "updated_at"}
    names.update({field: field for field in extra})
    return {api: getattr(model, attr) for api, attr in names.items() if hasattr(model, attr)}


def sort_pattern(names: Sequence[str]) -> str:
    one = "-?(?:" + "|".join(re.escape(name) for name in names) + ")"
    return f"^{one}(?:,{one})*$"


class Sort(fields.String):
    """`name,-createdAt`: sortable names, each ascending or (with "-") descending.

    Loads as the ORDER BY clauses; the names and the pattern they follow are documented
    from the field itself.
    """

    def __init__(self, sortable: Sortable, default: str | None = None, **kwargs: Any) -> None:
        self.sortable = dict(sortable)
        names = sorted(self.sortable)
        metadata: dict[str, Any] = {
            "pattern": sort_pattern(names),
            "minLength": 1,
            "maxLength": MAX_SORT,
        }
        order = None
        if default:
            metadata["default"] = default
            order = self.clauses(default)
        super().__init__(load_default=lambda: order, metadata=metadata, **kwargs)

    def clauses(self, value: str) -> list[Any]:
        order = []
        for raw in value.split(","):
            name = raw.strip()
            column = self.sortable.get(name.lstrip("-"))
            if column is None:
                allowed = ", ".join(self.sortable)
                raise ValidationError(f"Cannot sort by {name!r}; sortable fields: {allowed}.")
            order.append(column.desc() if name.startswith("-") else column.asc())
        return order

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[Any]:
        text = super()._deserialize(value, attr, data, **kwargs)
        if not 1 <= len(text) <= MAX_SORT:
            raise ValidationError(f"Length must be between 1 and {MAX_SORT}.")
        return self.clauses(text)


class ListArgs(Schema):
    """Query parameters every list takes; resources subclass it to add their filters."""

    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(
        data_key="perPage",
        load_default=DEFAULT_PER_PAGE,
        validate=validate.Range(min=1, max=MAX_PER_PAGE),
    )

    @classmethod
    def without_paging(cls) -> type["ListArgs"]:
        """These arguments for every row at once (an export): filters and sort only."""
        meta = type("Meta", (), {"register": False, "exclude": ("page", "per_page")})
        return type(cls.__name__, (cls,), {"Meta": meta})  # type: ignore[return-value]

    @classmethod
    def sorted_by(cls, sortable: Sortable, default: str | None = None) -> type["ListArgs"]:
        """These arguments with a `sort` over `sortable` (`default` when none is given)."""
        return type(  # type: ignore[return-value]
            cls.__name__,
            (cls,),
            {"sort": Sort(sortable, default), "Meta": type("Meta", (), {"register": False})},
        )


@dataclass
class Page:
    """One page of a list: its rows (objects or plain rows, as the output schema reads them)."""

    items: Sequence[Any]
    page: int
    per_page: int
    total: int


def paginate(
    stmt: Select,
    args: dict[str, Any],
    *,
    default_order: Sequence[Any] = (),
    tiebreak: Any = None,
    options: Sequence[Any] = (),
    total: int | None = None,
    fetch: Fetch | None = None,
    count_with_page: bool = False,
) -> Page:
    """One page of `stmt`, in the order `args["sort"]` asks (else `default_order`).

    Ties break on `tiebreak` (the entity's id by default), so pages never overlap or skip.
    `options` are loader options (eager loads) for the page's rows. `total`, when the
    caller knows it (a stored count), saves the COUNT(*). `fetch(page_ids, order)`, for hot
    lists, loads the page's rows itself (plain rows instead of ORM objects).
    `count_with_page` counts in the statement that finds the page's ids, for lists whose
    every match is read to order them anyway (a search by relevance): one pass, not two.
    """
    page, per_page = args["page"], args["per_page"]
    entity = stmt.column_descriptions[0]["entity"]
    tiebreak = entity.id if tiebreak is None else tiebreak
    clauses = [*(args.get("sort") or default_order), tiebreak.asc()]
    # A deferred join: the page's ids come from the index alone (cheap even deep in a
    # long list), then only those rows are loaded, with what the output shows.
    page_ids = (
        stmt.with_only_columns(tiebreak, maintain_column_froms=True)
        .order_by(*clauses)
        .limit(per_page)
        .offset((page - 1) * per_page)
    )
    ids: Select | list[Any] = page_ids
    if total is None and count_with_page:
        found = db.session.execute(page_ids.add_columns(func.count().over())).all()
        ids = [row[0] for row in found]
        total = found[0][1] if found else None  # past the last page: counted below
    if total is None:
        # COUNT(*) over the same FROM and WHERE: no subquery that would carry every column.
        total = db.session.scalar(
            stmt.with_only_columns(func.count(), maintain_column_froms=True).order_by(None)
        )
    if isinstance(ids, list) and not ids:
        return Page([], page, per_page, total)
    return Page(load_rows(entity, tiebreak, ids, clauses, options, fetch), page, per_page, total)


def load_rows(
    entity: Any,
    tiebreak: Any,
    ids: Select | Sequence[Any],
    clauses: list[Any],
    options: Sequence[Any],
    fetch: Fetch | None,
) -> Sequence[Any]:
    """The rows with these ids, in `clauses` order: ORM objects with `options`, or what
    `fetch` loads."""
    if fetch is not None:
        return fetch(ids, clauses)
    stmt = select(entity).where(tiebreak.in_(ids)).options(*options).order_by(*clauses)
    return list(db.session.scalars(stmt).unique())


def every_row(
    stmt: Select,
    args: dict[str, Any],
    *,
    default_order: Sequence[Any] = (),
    options: Sequence[Any] = (),
    fetch: Fetch | None = None,
    batch: int = 500,
) -> Iterator[Sequence[Any]]:
    """Every row of `stmt` in the order `args["sort"]` asks, batch by batch (an export):
    the ids stream from the database, and only one batch of rows is loaded at a time."""
    entity = stmt.column_descriptions[0]["entity"]
    clauses = [*(args.get("sort") or default_order), entity.id.asc()]
    ids = db.session.scalars(
        stmt.with_only_columns(entity.id, maintain_column_froms=True)
        .order_by(*clauses)
        .execution_options(yield_per=batch)
    )
    for chunk in ids.partitions(batch):
        yield load_rows(entity, entity.id, list(chunk), clauses, options, fetch)


def _page_url(page: int) -> str:
    args = request.args.to_dict()
    args["page"] = str(page)
    # The path as sent, percent-encoded again: a search term may hold any character,
    # line breaks included, and a header may not.
    return f"{quote(request.path, safe=PATH_SAFE)}?{urlencode(args)}"


def page_answer(page: Page, items: list[Any]) -> Response:
    """The page envelope with its dumped `items`, and the Link header."""
    response = jsonify(
        {"items": items, "page": page.page, "perPage": page.per_page, "total": page.total}
    )
    last = max(1, -(-page.total // page.per_page))
    links = [f'<{_page_url(1)}>; rel="first"', f'<{_page_url(last)}>; rel="last"']
    if page.page > 1:
        links.append(f'<{_page_url(min(page.page - 1, last))}>; rel="prev"')
    if page.page < last:
        links.append(f'<{_page_url(page.page + 1)}>; rel="next"')
    response.headers["Link"] = ", ".join(links)
    return response
