"""Mixins and column sizes shared by the models."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, Uuid
from sqlalchemy.orm import Mapped, MappedColumn, mapped_column

from ..types import UTCDateTime, utcnow


def foreign_id(table: str, *, ondelete: str, **options: Any) -> MappedColumn[Any]:
    """A column holding the id of a row of `table`, saying what deleting that row does
    (CASCADE takes this row along, RESTRICT refuses); nullable if its annotation says so.
    `options` go to `mapped_column` (primary_key, index …)."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete=ondelete), **options)


class IdMixin:
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)


class TimestampMixin:
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime, default=utcnow, onupdate=utcnow, index=True
    )


SLUG_LENGTH = 100
NAME_LENGTH = 200
EMAIL_LENGTH = 254
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
