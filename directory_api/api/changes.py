"""The write steps route groups share: create, update and delete of slugged resources (201
with Location, renames by slug rules, 409 naming what still uses a row)."""

from collections.abc import Callable
from typing import Any

from flask import request, url_for
from sqlalchemy import Select, func, select

from ..endpoints import Answer
from ..platform.errors import abort
from ..platform.extensions import db
from ..platform.slugs import choose_slug


def refuse_if_used(what: str, uses: dict[str, Select]) -> None:
    """409 naming everything that still refers to the object about to be deleted."""
    counts = {
        label: db.session.scalar(select(func.count()).select_from(stmt.subquery()))
        for label, stmt in uses.items()
    }
    in_use = {label: count for label, count in counts.items() if count}
    if in_use:
        listed = ", ".join(f"{label} ({count})" for label, count in in_use.items())
        abort(409, f"The {what} is still used by: {listed}.", usedBy=in_use)


def apply_changes(obj: Any, changes: dict[str, Any]) -> None:
    for field, value in changes.items():
        setattr(obj, field, value)


def created(item: Any, endpoint: str, **values: Any) -> Answer:
    """201's answer: `item`, with the URL of `endpoint` (in this blueprint) as Location."""
    url = url_for(f"{request.blueprint}.{endpoint}", **(request.view_args or {}), **values)
    return Answer(item, headers={"Location": url})


def create_named(
    model: Any,
    data: dict[str, Any],
    *scope: Any,
    reserved: frozenset[str] = frozenset(),
) -> Answer:
    """Insert `model(**data)` with its slug chosen by the slug rules; 201 with Location."""
    data["slug"] = choose_slug(model, data.get("slug"), data["name"], *scope, reserved=reserved)
    item = model(**data)
    db.session.add(item)
    db.session.commit()
    return created(item, "get_by_slug", item_slug=item.slug)


def update_named(
    item: Any,
    data: dict[str, Any],
    *scope: Any,
    reserved: frozenset[str] = frozenset(),
    also: Callable[[], None] | None = None,
) -> Any:
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
    return item


def delete_unused(item: Any, what: str, uses: dict[str, Select]) -> None:
    """Delete `item` unless something in `uses` still refers to it (409 naming them)."""
    refuse_if_used(what, uses)
    db.session.delete(item)
    db.session.commit()
