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
    Select,
    String,
    Text,
    false,
    literal,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship, validates

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
        Index("ix_votes_redaction_due", "redacted_at", "created_at"),
        # The receipt cap counts an address's recent votes (vote_integrity.py).
        Index("ix_votes_email_hash_created", "email_hash", "created_at"),
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
    confirmed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
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
    reply_body: Mapped[str | None] = mapped_column(Text)
    reply_author_id: Mapped[uuid.UUID | None] = foreign_id("users", ondelete="SET NULL", index=True)
    reply_created_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reply_updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

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
    """The revision of a location's votes: a new random number whenever one of them is
    added, changed or deleted, in the change's own transaction, so the votes export's ETag
    is known before a row is read (caching.py). Changes that bypass the ORM (retention,
    erasure) turn it with `turn_vote_revisions`."""

    __tablename__ = "vote_revisions"

    location_id: Mapped[uuid.UUID] = foreign_id("locations", ondelete="CASCADE", primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger)


def _turned(statement: Any) -> Any:
    """`statement` (an insert into vote_revisions) as an upsert that turns the revision."""
    return statement.on_conflict_do_update(
        index_elements=["location_id"], set_={"revision": statement.excluded.revision}
    )


@functools.cache
def _turn_by_id(dialect: str) -> Any:
    """The upsert of a location's revision, built once per database: building a statement
    and its cache key costs more than running it, on every vote written."""
    return _turned(UPSERTS[dialect](VoteRevision.__table__))


def turn_vote_revisions(connection: Connection, locations: Select | Iterable[uuid.UUID]) -> None:
    """A new revision for the votes of these locations: ids, or a statement selecting
    them (distinct, and with a WHERE clause: SQLite's upsert from a SELECT needs one)."""
    if isinstance(locations, Select):
        statement = upsert(connection, VoteRevision.__table__).from_select(
            ["location_id", "revision"], locations.add_columns(literal(new_revision()))
        )
        connection.execute(_turned(statement))
        return
    ids = sorted(set(locations))  # in one order, so two transactions never deadlock
    if ids:
        rows = [{"location_id": id_, "revision": new_revision()} for id_ in ids]
        connection.execute(_turn_by_id(connection.dialect.name), rows)


def turn_revisions_of_votes(session: Session, _context: object) -> None:
    """After a flush that added, changed or deleted votes, turn their locations' revisions."""
    changed = (*session.new, *session.dirty, *session.deleted)
    locations = {item.location_id for item in changed if isinstance(item, Vote)}
    turn_vote_revisions(session.connection(), locations)


# Registered by create_app (events.py).
LISTENERS = ((Session, "after_flush", turn_revisions_of_votes, {}),)
