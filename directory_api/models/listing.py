"""Businesses and employers: one table, one shape, told apart by `kind`."""

import secrets
import uuid
from collections import Counter
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    literal,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from ..platform.extensions import db
from ..platform.slugs import SLUG_LENGTH
from ..platform.timeouts import unbounded
from ..platform.types import IdMixin
from .base import (
    CONTACT_FIELDS,
    NAME_LENGTH,
    ROW_COLUMNS,
    URL_LENGTH,
    Audit,
    ContactMixin,
    TimestampMixin,
    foreign_id,
)
from .location import Location
from .reference import Category, Social


class Listing(IdMixin, ContactMixin, TimestampMixin, db.Model):
    __tablename__ = "listings"
    # Entries are a business's or an employer's (the kind); the search text, the stored
    # vote count and the kind follow from what is audited.
    __audit__ = Audit(
        ("slug", "name", "subcategory", "branch", *CONTACT_FIELDS, "socials"),
        unaudited=(
            *ROW_COLUMNS,
            "kind",
            "location_id",
            "subcategory_id",
            "search_name",
            "search_text",
            "output_json",
            "output_csv",
            "vote_count",
            "active_votes",
            "pending_votes",
        ),
        located=True,
    )
    __table_args__ = (
        UniqueConstraint("location_id", "kind", "slug"),
        Index("ix_listings_location_kind_name", "location_id", "kind", "name", "id"),
        Index("ix_listings_location_kind_created", "location_id", "kind", "created_at", "id"),
        # The listings whose outputs are not stored (listing_pages.store_missing_outputs):
        # found without reading the others, however many.
        Index(
            "ix_listings_output_missing",
            "id",
            sqlite_where=text("output_json IS NULL"),
            postgresql_where=text("output_json IS NULL"),
        ),
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
    # What pages and exports show of it, as the database writes it (its `ListingOut` as
    # JSON text; its export's CSV line), stored by the flush that changes what they show
    # (listing_pages.py); NULL where not stored, written as it is read. Never loaded with
    # the object.
    output_json: Mapped[str | None] = mapped_column(Text, deferred=True)
    output_csv: Mapped[str | None] = mapped_column(Text, deferred=True)
    # Employers: their active, non-duplicate votes, kept by vote_integrity.py on every
    # change, so the public results page reads counts instead of counting votes.
    vote_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # And every vote linked to it, active or pending, duplicates included: the summary's
    # per-employer figures (API.md 8).
    active_votes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    pending_votes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

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
    """How many businesses or employers a location has, and the revision of what their list
    shows, kept with every change in the change's own transaction.

    An exact COUNT(*) over a location with 100k listings costs more than the rest of a
    list request; the unfiltered list reads its `total` from here instead. `revision` is a
    new random number whenever anything a list or search page of these listings shows
    changes (a listing, its links, a category's or social's slug): a page's ETag, once
    known for a revision, answers a revalidation without the page's work (caching.py). A
    random number, not a counter, so that a value never comes back with other data (after
    a recount or a restored backup).
    """

    __tablename__ = "listing_counts"

    location_id: Mapped[uuid.UUID] = foreign_id("locations", ondelete="CASCADE", primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    total: Mapped[int] = mapped_column(Integer, default=0)
    revision: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


def new_revision() -> int:
    return secrets.randbits(62)


# The INSERT that can be an upsert (`on_conflict_do_update`), by database.
UPSERTS = {"postgresql": postgresql_insert, "sqlite": sqlite_insert}


def upsert(connection: Connection, table: Table) -> Any:
    """An INSERT that can be an upsert in the connection's SQL."""
    return UPSERTS[connection.dialect.name](table)


def _change_count(connection: Connection, location_id: uuid.UUID, kind: str, delta: int) -> None:
    """Add `delta` (0 for a change) and turn the revision, atomically (an upsert), in the
    transaction of the change."""
    table = ListingCount.__table__
    revision = new_revision()
    connection.execute(
        upsert(connection, table)
        .values(location_id=location_id, kind=kind, total=delta, revision=revision)
        .on_conflict_do_update(
            index_elements=["location_id", "kind"],
            set_={"total": table.c.total + delta, "revision": revision},
        )
    )


def count_flushed(session: Session, _context: object) -> None:
    """The counts of the listings a flush inserted and deleted, and with them the
    revisions: one upsert per location and kind whatever the number of rows (an import of
    10,000 writes one, not 10,000), in the flush's transaction."""
    deltas: Counter[tuple[uuid.UUID, str]] = Counter()
    for objects, step in ((session.new, 1), (session.deleted, -1)):
        for listing in objects:
            if isinstance(listing, Listing):
                deltas[listing.location_id, listing.kind] += step
    for (location_id, kind), delta in deltas.items():
        _change_count(session.connection(), location_id, kind, delta)


# Registered by create_app (platform/events.py): the counts, and with them the revisions,
# in the change's flush (listing_pages.py turns them for the other changes pages show).
LISTENERS = ((Session, "after_flush", count_flushed, {}),)


def recount_listings() -> None:
    """Recompute every count, after bulk loads that bypass the ORM (flask listings recount)."""
    table = ListingCount.__table__
    with unbounded(db.session.connection()):
        db.session.execute(table.delete())
        db.session.execute(
            table.insert().from_select(
                ["location_id", "kind", "total", "revision"],
                select(
                    Listing.location_id, Listing.kind, func.count(), literal(new_revision())
                ).group_by(Listing.location_id, Listing.kind),
            )
        )
