"""Mixins and column sizes shared by the models."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, MappedColumn, mapped_column

from ..platform.email_addresses import EMAIL_LENGTH
from ..platform.slugs import SLUG_LENGTH
from ..platform.types import UTCDateTime, utcnow


@dataclass(frozen=True)
class Audit:
    """What the audit log (audit.py) records of a model, declared on the model itself:
    the `fields` an entry shows (attribute names; a many-to-one relationship shows the
    related slug, `socials` the list of links), those of them that are `personal` (shown
    redacted), and `unaudited`: every other column, each left out on purpose. A test holds
    every column of an audited model to one list or the other, so a new column is a
    decision, never silently unaudited. `type` is the entries' target type (default: the
    model's polymorphic identity); a `located` model belongs to the location its
    `location_id` names."""

    fields: tuple[str, ...]
    unaudited: tuple[str, ...]
    personal: frozenset[str] = frozenset()
    type: str | None = None
    located: bool = False
    # A change of one of these fields names the entry's action (`revoked_at` → "revoke")
    # instead of "update".
    verbs: tuple[tuple[str, str], ...] = ()
    # A field that is a part of the model with entries of its own (a vote's `reply_body` →
    # "reply"): a change of it is `<part>.create|update|delete` as it is set, changed or
    # cleared, its target still the model.
    parts: tuple[tuple[str, str], ...] = ()


# What no entry shows: every row's own id and timestamps.
ROW_COLUMNS = ("id", "created_at", "updated_at")
CONTACT_FIELDS = ("description", "email", "phone", "address", "website")


def foreign_id(table: str, *, ondelete: str, **options: Any) -> MappedColumn[Any]:
    """A column holding the id of a row of `table`, saying what deleting that row does
    (CASCADE takes this row along, RESTRICT refuses); nullable if its annotation says so.
    `options` go to `mapped_column` (primary_key, index …)."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete=ondelete), **options)


class TimestampMixin:
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime, default=utcnow, onupdate=utcnow, index=True
    )


NAME_LENGTH = 200
PHONE_LENGTH = 40
URL_LENGTH = 2048
TEXT_LENGTH = 5000


class SlugNameMixin:
    """A globally unique slug and a name (regions, categories, socials, locations)."""

    slug: Mapped[str] = mapped_column(String(SLUG_LENGTH), unique=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), index=True)


class ContactMixin:
    """How to reach a location, business or employer."""

    description: Mapped[str | None] = mapped_column(Text)
    email: Mapped[str | None] = mapped_column(String(EMAIL_LENGTH))
    phone: Mapped[str | None] = mapped_column(String(PHONE_LENGTH))
    address: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    website: Mapped[str | None] = mapped_column(String(URL_LENGTH))
