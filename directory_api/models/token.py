"""One-time tokens (invitation, password reset, e-mail change), kept only as a hash."""

import enum
import uuid
from datetime import datetime

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.email_addresses import EMAIL_LENGTH
from ..platform.extensions import db
from ..platform.types import IdMixin, UTCDateTime, string_enum, utcnow
from .base import foreign_id


class TokenPurpose(enum.StrEnum):
    INVITATION = "invitation"
    PASSWORD_RESET = "password_reset"  # noqa: S105
    EMAIL_UPDATE = "email_update"


class Token(IdMixin, db.Model):
    __tablename__ = "tokens"
    __table_args__ = (
        Index("ix_tokens_user_purpose", "user_id", "purpose"),
        # Retention deletes spent tokens: expired, or used.
        Index("ix_tokens_expires_at", "expires_at"),
        Index("ix_tokens_used_at", "used_at"),
    )

    user_id: Mapped[uuid.UUID] = foreign_id("users", ondelete="CASCADE")
    purpose: Mapped[TokenPurpose] = mapped_column(
        string_enum(TokenPurpose, "token_purpose", length=32)
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The address the token is bound to (the invited or the new address).
    email: Mapped[str | None] = mapped_column(String(EMAIL_LENGTH))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
