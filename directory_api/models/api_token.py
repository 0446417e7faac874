"""Personal API tokens (API.md 14): a script's narrow, expiring credential, kept only as a
SHA-256 hash (platform/bearer.py makes and reads them)."""

import enum
import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import JSON, Index, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..platform.bearer import SHOWN_LENGTH
from ..platform.extensions import db
from ..platform.types import IdMixin, UTCDateTime, utcnow
from .base import Audit, foreign_id

if TYPE_CHECKING:
    from .user import User

TOKEN_NAME_LENGTH = 100
IP_LENGTH = 45  # an IPv6 address written out in full, with an IPv4 tail


class Scope(enum.StrEnum):
    """What a token may reach (API.md 14); `:write` and `:moderate` include `:read`."""

    DIRECTORY_READ = "directory:read"
    DIRECTORY_WRITE = "directory:write"
    VOTES_READ = "votes:read"
    VOTES_MODERATE = "votes:moderate"
    MEMBERS_READ = "members:read"
    MEMBERS_WRITE = "members:write"
    AUDIT_READ = "audit:read"
    WEBHOOKS_MANAGE = "webhooks:manage"


INCLUDED = {
    Scope.DIRECTORY_WRITE: Scope.DIRECTORY_READ,
    Scope.VOTES_MODERATE: Scope.VOTES_READ,
    Scope.MEMBERS_WRITE: Scope.MEMBERS_READ,
}


class ApiToken(IdMixin, db.Model):
    __tablename__ = "api_tokens"
    __table_args__ = (
        Index("ix_api_tokens_user_created", "user_id", "created_at"),
        Index("ix_api_tokens_expires_at", "expires_at"),  # the expiry notices
    )
    __audit__ = Audit(
        ("name", "scopes", "location_ids", "expires_at", "revoked_at"),
        unaudited=(
            "id",
            "created_at",
            "user_id",
            "token_hash",
            "prefix",
            "last_used_at",
            "last_used_ip",
            "expiry_noticed_at",
        ),
        type="token",
        verbs=(("revoked_at", "revoke"),),
    )

    user_id: Mapped[uuid.UUID] = foreign_id("users", ondelete="CASCADE")
    name: Mapped[str] = mapped_column(String(TOKEN_NAME_LENGTH))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(SHOWN_LENGTH))
    scopes: Mapped[list[str]] = mapped_column(JSON)
    # The ids of the locations it is limited to (as text); None: not limited. A deleted
    # location stays in the list and matches nothing, so a limit never widens.
    location_ids: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_ip: Mapped[str | None] = mapped_column(String(IP_LENGTH))
    expiry_noticed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user: Mapped["User"] = relationship(lazy="raise")

    def live(self, now: datetime | None = None) -> bool:
        return self.revoked_at is None and self.expires_at > (now or utcnow())

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.live() else "expired"
