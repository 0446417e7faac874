"""The list contract: page, perPage, sort, filters, total and the RFC 8288 Link header.

A list declares its query schema, `ListArgs.sorted_by(...)` (or a subclass with filters),
whose `sort` field loads as ORDER BY clauses; the view returns a `Page` (found by
`page_queries.paginate`), and `@endpoint` answers it with `page_answer`.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from flask import Response, jsonify
from marshmallow import Schema, ValidationError, fields, validate
from sqlalchemy.orm import InstrumentedAttribute

from .current import current_request

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 20
MAX_SORT = 200
PATH_SAFE = "/!$&'()*+,;=:@-._~"  # RFC 3986 pchar and "/", left as they are
Sortable = Mapping[str, InstrumentedAttribute]


def sort_fields(model: Any, *extra: str) -> dict[str, InstrumentedAttribute]:
    """The sortable fields of a model: name/slug where it has them, the timestamps, and extra."""
    names = {"name": "name", "slug": "slug", "createdAt": "created_at", "updatedAt": "updated_at"}
    names.update({field: field for field in extra})
    return {api: getattr(model, attr) for api, attr in names.items() if hasattr(model, attr)}


def sort_pattern(names: Sequence[str]) -> str:
    one = "-?(?:" + "|".join(re.escape(name) for name in names) + ")"
    return f"^{one}(?:,{one})*$"


class Order(list):
    """The ORDER BY clauses of a sort, and its `text` (which names it: `name,-createdAt`)."""

    text: str


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

    def clauses(self, value: str) -> "Order":
        order = Order()
        names = []
        for raw in value.split(","):
            name = raw.strip()
            column = self.sortable.get(name.lstrip("-"))
            if column is None:
                allowed = ", ".join(self.sortable)
                raise ValidationError(f"Cannot sort by {name!r}; sortable fields: {allowed}.")
            order.append(column.desc() if name.startswith("-") else column.asc())
            names.append(name)
        order.text = ",".join(names)
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
    located: tuple[Any, ...] | None = None  # page_queries.paginate's `located`


def page_url() -> Callable[[int], str]:
    """The URL of another page of this list: the request's, `page` set (the first value of
    each argument, in their order; `page` where it was, else last), encoded once."""
    req = current_request()
    args = req.args.to_dict()
    args["page"] = ""
    pairs = [urlencode({key: value}) for key, value in args.items()]
    at = list(args).index("page")
    # The path as sent, percent-encoded again: a search term may hold any character,
    # line breaks included, and a header may not.
    prefix = quote(req.path, safe=PATH_SAFE) + "?" + "".join(f"{p}&" for p in pairs[:at])
    suffix = "".join(f"&{p}" for p in pairs[at + 1 :])
    return lambda page: f"{prefix}page={page}{suffix}"


def page_answer(page: Page, items: list[Any]) -> Response:
    """The page envelope with its dumped `items`, and the Link header."""
    response = jsonify(
        {"items": items, "page": page.page, "perPage": page.per_page, "total": page.total}
    )
    last = max(1, -(-page.total // page.per_page))
    url = page_url()
    links = [f'<{url(1)}>; rel="first"', f'<{url(last)}>; rel="last"']
    if page.page > 1:
        links.append(f'<{url(min(page.page - 1, last))}>; rel="prev"')
    if page.page < last:
        links.append(f'<{url(page.page + 1)}>; rel="next"')
    response.headers["Link"] = ", ".join(links)
    return response
