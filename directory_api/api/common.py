"""Small pieces every route group shares: lookups, targets named in a body, 201, 409."""

import uuid
from typing import Any

from flask import Response, jsonify
from sqlalchemy import Select, func, select

from ..errors import abort, invalid
from ..extensions import db


def get_or_404(model: Any, *criteria: Any, what: str = "resource") -> Any:
    found = db.session.scalar(select(model).where(*criteria).limit(1))
    if found is None:
        abort(404, f"No such {what}.")
    return found


def id_by_slug(model: Any, slug: str, *scope: Any) -> Any:
    """The id of the row with `slug`, as a subquery for list filters (no such slug: no rows)."""
    return select(model.id).where(model.slug == slug, *scope).scalar_subquery()


def by_slug_or_422(model: Any, slug: str, field: str, *scope: Any, where: str = "") -> Any:
    """The row a body field names by slug; 422 on that field when there is none."""
    found = db.session.scalar(select(model).where(model.slug == slug, *scope))
    if found is None:
        invalid(field, f"No {model.__name__.lower()} {slug!r}{where}.")
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


def created(body: dict[str, Any], location: str) -> Response:
    response = jsonify(body)
    response.status_code = 201
    response.headers["Location"] = location
    return response


def no_content() -> Response:
    return Response(status=204)


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
