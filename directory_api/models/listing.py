"""Businesses and employers: one table, one shape, told apart by `kind`."""

import unicodedata
import uuid

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, event, select
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..extensions import db
from .base import NAME_LENGTH, SLUG_LENGTH, URL_LENGTH, ContactMixin, IdMixin, TimestampMixin
from .location import Location
from .reference import Category, Social


class Listing(IdMixin, ContactMixin, TimestampMixin, db.Model):
    __tablename__ = "listings"
    __table_args__ = (
        UniqueConstraint("location_id", "kind", "slug"),
        Index("ix_listings_location_kind_name", "location_id", "kind", "name", "id"),
        Index("ix_listings_location_kind_created", "location_id", "kind", "created_at", "id"),
        # Substring search (LIKE '%word%') through trigrams; PostgreSQL only (migration 0002).
        Index(
            "ix_listings_search_text_trgm",
            "search_text",
            postgresql_using="gin",
            postgresql_ops={"search_text": "gin_trgm_ops"},
            info={"only_on": "postgresql"},
        ).ddl_if(dialect="postgresql"),
    )

    kind: Mapped[str] = mapped_column(String(16))
    location_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("locations.id", ondelete="RESTRICT"))
    slug: Mapped[str] = mapped_column(String(SLUG_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    subcategory_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("categories.id", ondelete="RESTRICT"), index=True
    )
    branch: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    # Accent- and case-folded text kept up to date on write, for search on every database.
    search_name: Mapped[str] = mapped_column(Text, default="")
    search_text: Mapped[str] = mapped_column(Text, default="")

    location: Mapped[Location] = relationship()
    subcategory: Mapped[Category | None] = relationship()
    socials: Mapped[list["ListingSocial"]] = relationship(
        cascade="all, delete-orphan", order_by="ListingSocial.position"
    )

    __mapper_args__ = {"polymorphic_on": "kind"}  # noqa: RUF012


class Business(Listing):
    __mapper_args__ = {"polymorphic_identity": "business"}  # noqa: RUF012


class Employer(Listing):
    __mapper_args__ = {"polymorphic_identity": "employer"}  # noqa: RUF012


class ListingSocial(db.Model):
    """A business's or employer's profile on one social network."""

    __tablename__ = "listing_socials"

    listing_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("listings.id", ondelete="CASCADE"), primary_key=True
    )
    social_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("socials.id", ondelete="RESTRICT"), primary_key=True, index=True
    )
    url: Mapped[str] = mapped_column(String(URL_LENGTH))
    position: Mapped[int] = mapped_column(Integer, default=0)

    social: Mapped[Social] = relationship(lazy="joined")


def fold(text: str | None) -> str:
    """Lower-cased, accents stripped: "Café" and "CAFE" both become "cafe"."""
    decomposed = unicodedata.normalize("NFKD", text or "")
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def refresh_search_of_subcategory(category: Category) -> None:
    """Listings search their subcategory's name too: keep them in step when it is renamed."""
    for listing in db.session.scalars(select(Listing).where(Listing.subcategory_id == category.id)):
        refresh_search_columns(None, None, listing)


@event.listens_for(Listing, "before_insert", propagate=True)
@event.listens_for(Listing, "before_update", propagate=True)
def refresh_search_columns(_mapper, _connection, listing: Listing) -> None:
    listing.search_name = fold(listing.name)
    parts = (
        listing.name,
        listing.branch,
        listing.description,
        listing.subcategory.name if listing.subcategory else None,
    )
    listing.search_text = " ".join(fold(part) for part in parts if part)
