"""Businesses and employers: one table, one shape, told apart by `kind`."""

import uuid

from sqlalchemy import (
    Connection,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..extensions import db
from ..timeouts import unbounded
from .base import (
    NAME_LENGTH,
    SLUG_LENGTH,
    URL_LENGTH,
    ContactMixin,
    IdMixin,
    TimestampMixin,
    foreign_id,
)
from .location import Location
from .reference import Category, Social


class Listing(IdMixin, ContactMixin, TimestampMixin, db.Model):
    __tablename__ = "listings"
    __table_args__ = (
        UniqueConstraint("location_id", "kind", "slug"),
        Index("ix_listings_location_kind_name", "location_id", "kind", "name", "id"),
        Index("ix_listings_location_kind_created", "location_id", "kind", "created_at", "id"),
        # Substring search (LIKE '%word%') through trigrams, within one location and kind;
        # PostgreSQL only (migrations 0002 and 0005, with pg_trgm and btree_gin).
        Index(
            "ix_listings_search_trgm",
            "location_id",
            "kind",
            "search_text",
            postgresql_using="gin",
            postgresql_ops={"search_text": "gin_trgm_ops"},
            info={"only_on": "postgresql"},
        ).ddl_if(dialect="postgresql"),
    )

    kind: Mapped[str] = mapped_column(String(16))
    location_id: Mapped[uuid.UUID] = foreign_id("locations", ondelete="RESTRICT")
    slug: Mapped[str] = mapped_column(String(SLUG_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    subcategory_id: Mapped[uuid.UUID | None] = foreign_id(
        "categories", ondelete="RESTRICT", index=True
    )
    branch: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    # Accent- and case-folded text kept up to date on write, for search on every database
    # (search.py).
    search_name: Mapped[str] = mapped_column(Text, default="")
    search_text: Mapped[str] = mapped_column(Text, default="")
    # Employers: their active, non-duplicate votes, kept by vote_integrity.py on every
    # change, so the public results page reads counts instead of counting votes.
    vote_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    location: Mapped[Location] = relationship()
    subcategory: Mapped[Category | None] = relationship()
    socials: Mapped[list["ListingSocial"]] = relationship(
        cascade="all, delete-orphan", order_by="ListingSocial.position"
    )

    __mapper_args__ = {"polymorphic_on": "kind"}  # noqa: RUF012

    @property
    def subcategory_slug(self) -> str | None:
        """What the output shows; a list page reads it with a join instead (api/listings.py)."""
        return self.subcategory.slug if self.subcategory else None


class Business(Listing):
    __mapper_args__ = {"polymorphic_identity": "business"}  # noqa: RUF012


class Employer(Listing):
    __mapper_args__ = {"polymorphic_identity": "employer"}  # noqa: RUF012


class ListingSocial(db.Model):
    """A business's or employer's profile on one social network."""

    __tablename__ = "listing_socials"

    listing_id: Mapped[uuid.UUID] = foreign_id("listings", ondelete="CASCADE", primary_key=True)
    social_id: Mapped[uuid.UUID] = foreign_id(
        "socials", ondelete="RESTRICT", primary_key=True, index=True
    )
    url: Mapped[str] = mapped_column(String(URL_LENGTH))
    position: Mapped[int] = mapped_column(Integer, default=0)

    social: Mapped[Social] = relationship(lazy="joined")

    @property
    def social_slug(self) -> str:
        return self.social.slug


class ListingCount(db.Model):
    """How many businesses or employers a location has, kept with every insert and delete.

    An exact COUNT(*) over a location with 100k listings costs more than the rest of a
    list request; the unfiltered list reads its `total` from here instead.
    """

    __tablename__ = "listing_counts"

    location_id: Mapped[uuid.UUID] = foreign_id("locations", ondelete="CASCADE", primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    total: Mapped[int] = mapped_column(Integer, default=0)


def _change_count(connection: Connection, location_id: uuid.UUID, kind: str, delta: int) -> None:
    """Add `delta` atomically (an upsert), in the transaction of the insert or delete."""
    table = ListingCount.__table__
    insert = postgresql_insert if connection.dialect.name == "postgresql" else sqlite_insert
    connection.execute(
        insert(table)
        .values(location_id=location_id, kind=kind, total=delta)
        .on_conflict_do_update(
            index_elements=["location_id", "kind"], set_={"total": table.c.total + delta}
        )
    )


@event.listens_for(Listing, "after_insert", propagate=True)
def count_inserted(_mapper, connection: Connection, listing: Listing) -> None:
    _change_count(connection, listing.location_id, listing.kind, 1)


@event.listens_for(Listing, "after_delete", propagate=True)
def count_deleted(_mapper, connection: Connection, listing: Listing) -> None:
    _change_count(connection, listing.location_id, listing.kind, -1)


def recount_listings() -> None:
    """Recompute every count, after bulk loads that bypass the ORM (flask listings recount)."""
    table = ListingCount.__table__
    with unbounded(db.session.connection()):
        db.session.execute(table.delete())
        db.session.execute(
            table.insert().from_select(
                ["location_id", "kind", "total"],
                select(Listing.location_id, Listing.kind, func.count()).group_by(
                    Listing.location_id, Listing.kind
                ),
            )
        )
