"""The audit log (API.md 10): who changed what, written with the change it records."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.email_addresses import EMAIL_LENGTH
from ..platform.extensions import db
from ..platform.slugs import SLUG_LENGTH
from ..platform.types import IdMixin, UTCDateTime, utcnow

ACTION_LENGTH = 40


class AuditEntry(IdMixin, db.Model):
    """One privileged write, role change or sign-in event (audit.py writes them).

    An entry names its actor, target and location by id and keeps what they were called
    at the time (an e-mail, a slug): no foreign keys, so nothing that happens to them later
    changes or removes the record. Nothing in the API updates or deletes a row; only
    retention (`AUDIT_RETENTION_DAYS`) does.
    """

    __tablename__ = "audit_entries"
    __table_args__ = (
        # The default order (-at), retention, and each filter with that order.
        Index("ix_audit_entries_at", "at", "id"),
        Index("ix_audit_entries_location_at", "location_id", "at"),
        Index("ix_audit_entries_actor_at", "actor_id", "at"),
        Index("ix_audit_entries_action_at", "action", "at"),
    )

    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    actor_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    actor_email: Mapped[str | None] = mapped_column(String(EMAIL_LENGTH))
    # The personal API token the actor acted through (API.md 14); None: a session.
    actor_token_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    action: Mapped[str] = mapped_column(String(ACTION_LENGTH))
    target_type: Mapped[str] = mapped_column(String(16))
    target_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    target_slug: Mapped[str | None] = mapped_column(String(SLUG_LENGTH))
    location_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    location_slug: Mapped[str | None] = mapped_column(String(SLUG_LENGTH))
    # Field → [old, new], personal data of votes and passwords as "[redacted]".
    changes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    request_id: Mapped[str | None] = mapped_column(String(128))
    ip: Mapped[str | None] = mapped_column(String(45))  # an IPv6 address at its longest

    @property
    def actor(self) -> dict[str, Any] | None:
        if self.actor_id is None:
            return None
        actor = {"id": self.actor_id, "email": self.actor_email}
        if self.actor_token_id is not None:
            actor["token_id"] = self.actor_token_id
        return actor

    @property
    def target(self) -> dict[str, Any]:
        return {"type": self.target_type, "id": self.target_id, "slug": self.target_slug}


class AuditCount(db.Model):
    """How many audit entries there are, by location (None: entries of no location), so a
    list's total is a sum of a few rows, never a count of millions (API.md 1: exact totals).

    The database keeps it: triggers on `audit_entries` (migration 0023) add a row of +n or
    -n for every statement that inserts, deletes or moves entries, whoever runs it
    (requests, retention, an operator's psql). Adding rows takes no lock another
    transaction waits for, and each row commits or rolls back with its entries, so a sum
    read in one snapshot is exact. `audit.compact_counts` folds the rows into one per
    location (the worker's housekeeping, hourly).
    """

    __tablename__ = "audit_counts"
    __table_args__ = (Index("ix_audit_counts_location", "location_id", "entries"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    location_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    entries: Mapped[int] = mapped_column(BigInteger)
