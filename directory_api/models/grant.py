"""Roles offered to existing accounts, held back until their user accepts (API.md 9)."""

import enum
import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from ..types import UTCDateTime, string_enum, utcnow
from .base import IdMixin, foreign_id


class GrantedRole(enum.StrEnum):
    SUPER = "super"
    OWNER = "owner"
    ADMIN = "admin"


class RoleGrant(IdMixin, db.Model):
    """A pending grant: the role is the user's only once they accept it with the mailed token.

    It is not a role: nothing that decides access or lists members reads these rows. Like
    the other one-time tokens, the token is kept only as a hash and works once, until
    `expires_at`. A super grant has no location; an owner or admin grant always has one.
    """

    __tablename__ = "role_grants"
    __table_args__ = (
        CheckConstraint(
            "(role = 'super' AND location_id IS NULL)"
            " OR (role <> 'super' AND location_id IS NOT NULL)",
            name="location_unless_super",
        ),
    )

    user_id: Mapped[uuid.UUID] = foreign_id("users", ondelete="CASCADE", index=True)
    location_id: Mapped[uuid.UUID | None] = foreign_id("locations", ondelete="CASCADE", index=True)
    role: Mapped[GrantedRole] = mapped_column(string_enum(GrantedRole, "granted_role"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
