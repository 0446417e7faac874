"""Slugs: what one looks like (in a body and in a URL), derived from the name when absent
(with -2, -3 … suffixes), 409 when taken."""

from typing import Any, ClassVar

from slugify import slugify
from sqlalchemy import or_, select
from werkzeug.routing import BaseConverter

from .errors import abort, invalid
from .extensions import db

SLUG_LENGTH = 100
SLUG_REGEX = r"[a-z0-9]+(?:-[a-z0-9]+)*"
SLUG_PATTERN = f"^{SLUG_REGEX}$"


class SlugConverter(BaseConverter):
    """`<slug:…>` in a route: anything that is not a slug is a 404 before any query."""

    regex = SLUG_REGEX
    # How the OpenAPI document describes the parameter (openapi.py).
    json_schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "pattern": SLUG_PATTERN,
        "maxLength": SLUG_LENGTH,
    }


def slug_taken(model: Any, slug: str, *scope: Any, exclude: Any = None) -> bool:
    stmt = select(model.id).where(model.slug == slug, *scope)
    if exclude is not None:
        stmt = stmt.where(model.id != exclude)
    return db.session.scalar(stmt.limit(1)) is not None


def slugs_in_use(model: Any, *scope: Any) -> set[str]:
    """Every slug taken in `scope`, for many rows created at once (an import): each row's
    slug is derived against this set (`derive_slug`'s `in_use`), which it then joins,
    instead of a query and a flush per row."""
    return set(db.session.scalars(select(model.slug).where(*scope)))


def name_slug(name: str) -> str:
    """A name as a slug, transliterated ("Café Zürich" → cafe-zurich); empty if nothing is
    left of it."""
    return slugify(name, max_length=SLUG_LENGTH, word_boundary=True)


def derive_slug(
    model: Any,
    name: str,
    *scope: Any,
    reserved: frozenset[str] = frozenset(),
    in_use: set[str] | None = None,
) -> str:
    """The name's slug, numbered (`-2`, `-3`, …) past those taken in `scope`: asked of the
    database, or read from `in_use` (`slugs_in_use`) when given."""
    base = name_slug(name)
    if not base:
        invalid("slug", ["Cannot derive a slug from this name; send a slug."])
    if in_use is not None:
        taken = in_use if not reserved else in_use | reserved
    else:
        taken = set(reserved) | set(
            db.session.scalars(
                select(model.slug).where(
                    or_(model.slug == base, model.slug.like(f"{base}-%")), *scope
                )
            )
        )
    if base not in taken:
        return base
    number = 2
    while True:
        suffix = f"-{number}"
        candidate = base[: SLUG_LENGTH - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
        number += 1


def choose_slug(
    model: Any,
    slug: str | None,
    name: str,
    *scope: Any,
    exclude: Any = None,
    reserved: frozenset[str] = frozenset(),
) -> str:
    """The slug to store: the explicit one (409 if taken), else one derived from the name.

    `reserved` slugs would make a URL ambiguous; they are never derived and refused if given.
    """
    if slug is None:
        return derive_slug(model, name, *scope, reserved=reserved)
    if slug in reserved:
        invalid("slug", [f"{slug!r} is reserved; choose another slug."])
    if slug_taken(model, slug, *scope, exclude=exclude):
        abort(409, f"The slug {slug!r} is already taken.", errors={"slug": ["Already taken."]})
    return slug
