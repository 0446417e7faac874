"""Finding the rows a request names: by path, by a body's target, by a slug in a filter."""

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from ..platform.errors import abort, invalid
from ..platform.extensions import db


def get_or_404(
    model: Any, *criteria: Any, what: str = "resource", options: Sequence[Any] = ()
) -> Any:
    """The row matching `criteria` (`options`: what to load with it); else 404."""
    found = db.session.scalar(select(model).where(*criteria).options(*options).limit(1))
    if found is None:
        abort(404, f"No such {what}.")
    return found


def named_by_path(model: Any, item_slug: str | None, item_id: uuid.UUID | None) -> Any:
    """The criterion of a read that names its row in the path by slug or by id."""
    return model.id == item_id if item_slug is None else model.slug == item_slug


def id_by_slug(model: Any, slug: Any, *scope: Any) -> Any:
    """The id of the row with `slug` (a value, or a bind parameter of a statement built
    once), as a subquery for list filters (no such slug: no rows). `model` may be a
    model or a table's columns (`Table.c`, for a statement of SQL alone)."""
    return select(model.id).where(model.slug == slug, *scope).scalar_subquery()


def by_slug_or_422(model: Any, slug: str, field: str, *scope: Any, where: str = "") -> Any:
    """The row a body field names by slug; 422 on that field when there is none."""
    found = db.session.scalar(select(model).where(model.slug == slug, *scope))
    return named_or_422(found, model, slug, field, where=where)


def named_or_422(
    found: Any, model: Any, slug: str, field: str, *, where: str = "", within: str = ""
) -> Any:
    """`found`, the row a body field names by slug (looked up by the caller, e.g. with a
    statement built once); 422 on that field (of the object `within`) when there is none."""
    if found is None:
        message = f"No {model.__name__.lower()} {slug!r}{where}."
        if within:
            invalid(within, {field: [message]})
        invalid(field, message)
    return found


def find_target(model: Any, data: dict[str, Any], *scope: Any, what: str) -> Any:
    """The object a body names by `id`, or else by its current `slug`, taken out of `data`.

    With `id`, a `slug` left in `data` is a change (a rename).
    """
    if data.get("id") is not None:
        target_id: uuid.UUID = data.pop("id")
        return get_or_404(model, model.id == target_id, *scope, what=what)
    data.pop("id", None)
    if data.get("slug") is not None:
        return get_or_404(model, model.slug == data.pop("slug"), *scope, what=what)
    abort(
        422,
        "The request body must name its target.",
        errors={"id": ["Give the id or the current slug of the target."]},
    )
