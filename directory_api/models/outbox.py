"""The mail outbox: every message is a row, written with the change that causes it."""

import enum
from datetime import datetime

from sqlalchemy import JSON, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from ..types import EncryptedText, UTCDateTime, string_enum, utcnow
from .base import EMAIL_LENGTH, IdMixin


class OutboxStatus(enum.StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class OutboxMessage(IdMixin, db.Model):
    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_status_next_attempt", "status", "next_attempt_at"),)

    recipients: Mapped[list[str]] = mapped_column(JSON)
    template: Mapped[str] = mapped_column(String(64), server_default="")
    subject: Mapped[str] = mapped_column(String(998))
    # Encrypted while pending (API.md 9); emptied once delivered. None: no key opens it.
    body: Mapped[str | None] = mapped_column(EncryptedText, nullable=False)
    reply_to: Mapped[str | None] = mapped_column(String(EMAIL_LENGTH))
    status: Mapped[OutboxStatus] = mapped_column(
        string_enum(OutboxStatus, "outbox_status"),
        default=OutboxStatus.PENDING,
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What the message is about when that can be deleted ("vote:<id>"): its messages, which
    # hold the same person's address, go with it (`outbox.forget_messages_about`).
    about: Mapped[str | None] = mapped_column(String(64), index=True)
