"""Votes (testimonials) submitted by the public about a location's businesses and employers."""

import enum
import functools
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Index,
    Integer,
    Select,
    String,
    Text,
    false,
    literal,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship, validates

from ..platform.crypto import email_hash
from ..platform.email_addresses import EMAIL_LENGTH
from ..platform.extensions import db
from ..platform.types import IdMixin, UTCDateTime, string_enum
from .base import NAME_LENGTH, PHONE_LENGTH, ROW_COLUMNS, Audit, TimestampMixin, foreign_id
from .listing import UPSERTS, Employer, new_revision, upsert
from .user import User


class VoteType(enum.StrEnum):
    BTOB = "btob"
    BTOC = "btoc"
    EMPLOYER = "employer"


class Vote(IdMixin, TimestampMixin, db.Model):
    __tablename__ = "votes"
    # Moderation and the submitter's words; what the service keeps for itself (the address
    # hash, receipts, duplicates, redaction) is not a privileged write's change.
    __audit__ = Audit(
        (
            "type",
            "active",
            "confirmed",
            "employer",
            "business_name",
            "business_branch",
            "vote_body",
            "your_business",
            "your_position",
            "your_name",
            "your_email",
            "your_phone",
            "reply_body",
            "suspect",
        ),
        personal=frozenset({"your_name", "your_email", "your_phone"}),
        unaudited=(
            *ROW_COLUMNS,
            "location_id",
            "employer_id",
            "email_hash",
            "redacted_at",
            "confirmed_at",
            "duplicate_of_id",
            "receipt_token_hash",
            "receipt_expires_at",
            "notice_token_hash",
            # The reply's author is the entry's actor.
            "reply_author_id",
            "reply_created_at",
            "reply_updated_at",
        ),
        type="vote",
        located=True,
        parts=(("reply_body", "reply"),),
    )
    __table_args__ = (
        Index("ix_votes_location_created", "location_id", "created_at", "id"),
        Index("ix_votes_location_active", "location_id", "active"),
        # Retention: votes not yet redacted, oldest first (only those are in the index),
        # and receipts by their expiry.
        Index(
            "ix_votes_unredacted_created",
            "created_at",
            postgresql_where=text("redacted_at IS NULL"),
            sqlite_where=text("redacted_at IS NULL"),
        ),
        Index("ix_votes_receipt_expires_at", "receipt_expires_at"),
        # The receipt allowance counts an address's receipts of the day (vote_integrity.py):
        # its entries alone, however many votes the address made (migration 0027).
        Index(
            "ix_votes_email_hash_receipts",
            "email_hash",
            "created_at",
            postgresql_where=text("receipt_token_hash IS NOT NULL"),
            sqlite_where=text("receipt_token_hash IS NOT NULL"),
        ),
        # A new vote's original: its address's earliest vote for that employer, the first
        # entry here however many votes the address made (migration 0026).
        Index(
            "ix_votes_email_hash_employer_created", "email_hash", "employer_id", "created_at", "id"
        ),
    )

    location_id: Mapped[uuid.UUID] = foreign_id("locations", ondelete="RESTRICT")
    # What decides whether a vote counts in its employer's results keeps its old value
    # when changed (active_history), for the stored counts (vote_integrity.py).
    type: Mapped[VoteType] = mapped_column(string_enum(VoteType, "vote_type"), active_history=True)
    active: Mapped[bool] = mapped_column(Boolean, default=False, active_history=True)
    employer_id: Mapped[uuid.UUID | None] = foreign_id(
        "listings", ondelete="RESTRICT", index=True, active_history=True
    )
    # Null once redacted (PII_RETENTION_DAYS); email_hash stays for duplicates and erasure.
    your_name: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    your_email: Mapped[str | None] = mapped_column(String(EMAIL_LENGTH))
    your_phone: Mapped[str | None] = mapped_column(String(PHONE_LENGTH))
    business_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    business_branch: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    vote_body: Mapped[str] = mapped_column(Text)
    your_business: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    your_position: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    email_hash: Mapped[str | None] = mapped_column(String(64))
    redacted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # Vote integrity (API.md 8; vote_integrity.py). An employer vote is confirmed from the
    # receipt mailed to its submitter; one token (kept as its SHA-256) confirms or
    # withdraws it for 30 days. A later vote from the same address for the same employer
    # points at the earliest.
    # What the summary counts keeps its old value when changed, as the results' fields do.
    confirmed: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false(), active_history=True
    )
    confirmed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duplicate_of_id: Mapped[uuid.UUID | None] = foreign_id(
        "votes", ondelete="SET NULL", index=True, active_history=True
    )
    receipt_token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    receipt_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The withdraw link mailed with the first reply (API.md 15): a token of its own, so the
    # receipt's stays valid; both expire at receipt_expires_at.
    notice_token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)

    # The location's public reply (API.md 15): one per vote, written by its staff.
    reply_body: Mapped[str | None] = mapped_column(Text, active_history=True)
    reply_author_id: Mapped[uuid.UUID | None] = foreign_id("users", ondelete="SET NULL", index=True)
    reply_created_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reply_updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # Held as possibly automated (API.md 17): staff see it, filter on it, and clear it.
    suspect: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false(), active_history=True
    )

    employer: Mapped[Employer | None] = relationship()
    reply_author: Mapped[User | None] = relationship()

    @property
    def redacted(self) -> bool:
        return self.redacted_at is not None

    @property
    def reply(self) -> "Vote | None":
        """The reply's fields are the vote's own `reply_*` (ReplyOut reads them)."""
        return self if self.reply_created_at is not None else None

    @validates("your_email")
    def _keep_email_hash(self, _key: str, email: str | None) -> str | None:
        """Whoever sets the address (submission, staff, moderation) sets its keyed hash."""
        if email is not None:
            self.email_hash = email_hash(email)
        return email


class VoteRevision(db.Model):
    """A location's votes at a glance, kept in the transaction of every change to them: a
    revision (a new random number whenever one is added, changed or deleted, so the votes
    export's ETag is known before a row is read: caching.py) and the summary's counts
    (API.md 8, 15, 17), so the summary reads one row whatever the number of votes.

    vote_integrity.py keeps both from the ORM's flushes; changes that bypass the ORM
    turn the revision with `turn_vote_revisions` and, when they change what is counted
    (erasure), recount (`vote_integrity.recount_votes`)."""

    __tablename__ = "vote_revisions"

    location_id: Mapped[uuid.UUID] = foreign_id("locations", ondelete="CASCADE", primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger)
    pending: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    active: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    unconfirmed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    duplicates: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    unanswered: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    suspect: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


# The counts a location's row keeps, by name (vote_integrity.py says what each counts).
TALLIES = ("pending", "active", "unconfirmed", "duplicates", "unanswered", "suspect")


def _turned(statement: Any) -> Any:
    """`statement` (an insert into vote_revisions) as an upsert that turns the revision and
    adds the inserted counts to the stored ones (a location's first row starts from them)."""
    table, excluded = VoteRevision.__table__, statement.excluded
    return statement.on_conflict_do_update(
        index_elements=["location_id"],
        set_={
            "revision": excluded.revision,
            **{name: table.c[name] + excluded[name] for name in TALLIES},
        },
    )


@functools.cache
def _turn_by_id(dialect: str) -> Any:
    """The upsert of a location's revision, built once per database: building a statement
    and its cache key costs more than running it, on every vote written."""
    return _turned(UPSERTS[dialect](VoteRevision.__table__))


NO_CHANGE: dict[str, int] = dict.fromkeys(TALLIES, 0)


def turn_vote_revisions(
    connection: Connection,
    locations: Select | Iterable[uuid.UUID],
    changes: dict[uuid.UUID, dict[str, int]] | None = None,
) -> None:
    """A new revision for the votes of these locations: ids (with what each one's counts
    change by, in `changes`; nothing by default), or a statement selecting them (distinct,
    and with a WHERE clause: SQLite's upsert from a SELECT needs one)."""
    if isinstance(locations, Select):
        statement = upsert(connection, VoteRevision.__table__).from_select(
            ["location_id", "revision", *TALLIES],
            locations.add_columns(literal(new_revision()), *(literal(0) for _ in TALLIES)),
        )
        connection.execute(_turned(statement))
        return
    ids = sorted(set(locations))  # in one order, so two transactions never deadlock
    if ids:
        changes = changes or {}
        rows = [
            {"location_id": id_, "revision": new_revision(), **changes.get(id_, NO_CHANGE)}
            for id_ in ids
        ]
        connection.execute(_turn_by_id(connection.dialect.name), rows)
