"""Answers kept for `Idempotency-Key` retries: hashes and the answer, never the request."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from ..types import UTCDateTime, utcnow
from .base import IdMixin

SCOPE_LENGTH = 255
SHA256_HEX = 64


class IdempotencyRecord(IdMixin, db.Model):
    """The first answer to a request under one key, written with the rows it answers for."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        UniqueConstraint("scope", "key_hash"),
        Index("ix_idempotency_keys_created_at", "created_at"),  # the purge of expired keys
    )

    # Method and path (`POST /locations/harbour/votes/submit/employer`): a key belongs to one.
    scope: Mapped[str] = mapped_column(String(SCOPE_LENGTH))
    key_hash: Mapped[str] = mapped_column(String(SHA256_HEX))  # SHA-256 of the key
    # SHA-256 of key, method, path and canonical body: tells "the same request" apart.
    fingerprint: Mapped[str] = mapped_column(String(SHA256_HEX))
    status: Mapped[int] = mapped_column(Integer)
    body: Mapped[Any] = mapped_column(JSON)  # the answer's JSON (no personal data in these)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
