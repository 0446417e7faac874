"""The reference lists: regions, categories (two levels) and socials."""

import uuid

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..platform.extensions import db
from ..platform.types import IdMixin
from .base import ROW_COLUMNS, URL_LENGTH, Audit, SlugNameMixin, TimestampMixin, foreign_id


class Region(IdMixin, SlugNameMixin, TimestampMixin, db.Model):
    __tablename__ = "regions"
    __audit__ = Audit(("slug", "name"), unaudited=ROW_COLUMNS, type="region")


class Category(IdMixin, SlugNameMixin, TimestampMixin, db.Model):
    """A category; one with a parent is a subcategory (businesses and employers use those)."""

    __tablename__ = "categories"
    __audit__ = Audit(
        ("slug", "name", "parent"), unaudited=(*ROW_COLUMNS, "parent_id"), type="category"
    )

    parent_id: Mapped[uuid.UUID | None] = foreign_id("categories", ondelete="RESTRICT", index=True)

    parent: Mapped["Category | None"] = relationship(remote_side="Category.id")


class Social(IdMixin, SlugNameMixin, TimestampMixin, db.Model):
    """A social network that businesses and employers link to."""

    __tablename__ = "socials"
    __audit__ = Audit(("slug", "name", "url"), unaudited=ROW_COLUMNS, type="social")

    url: Mapped[str | None] = mapped_column(String(URL_LENGTH))
