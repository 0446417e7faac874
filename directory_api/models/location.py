"""Locations and the owner/admin memberships that give users access to them."""

import enum
import uuid
from datetime import datetime

from sqlalchemy import Boolean
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..platform.extensions import db
from ..platform.types import IdMixin, UTCDateTime, string_enum, utcnow
from .base import (
    CONTACT_FIELDS,
    ROW_COLUMNS,
    Audit,
    ContactMixin,
    SlugNameMixin,
    TimestampMixin,
    foreign_id,
)
from .reference import Region


class Role(enum.StrEnum):
    OWNER = "owner"
    ADMIN = "admin"


class Location(IdMixin, SlugNameMixin, ContactMixin, TimestampMixin, db.Model):
    __tablename__ = "locations"
    # Its entries belong to itself (audit.py).
    __audit__ = Audit(
        ("slug", "name", "region", "directory_location", *CONTACT_FIELDS),
        # `listened`: whether webhooks listen (models/webhook.py), not a column of its own.
        unaudited=(*ROW_COLUMNS, "region_id", "listened"),
        type="location",
    )

    region_id: Mapped[uuid.UUID | None] = foreign_id("regions", ondelete="RESTRICT", index=True)
    directory_location: Mapped[bool] = mapped_column(Boolean, default=False, index=True)

    region: Mapped[Region | None] = relationship(lazy="joined")


class Membership(db.Model):
    """A user's role at one location; at most one per user and location (owner supersedes)."""

    __tablename__ = "memberships"

    user_id: Mapped[uuid.UUID] = foreign_id("users", ondelete="CASCADE", primary_key=True)
    location_id: Mapped[uuid.UUID] = foreign_id(
        "locations", ondelete="CASCADE", primary_key=True, index=True
    )
    role: Mapped[Role] = mapped_column(string_enum(Role, "role"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    location: Mapped[Location] = relationship(lazy="joined")
