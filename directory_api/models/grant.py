"""Roles offered to existing accounts, held back until their user accepts (API.md 9)."""

import enum
import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, ColumnElement, Index, String, and_, or_, select
from sqlalchemy.orm import Mapped, mapped_column

from ..platform.extensions import db
from ..platform.types import IdMixin, UTCDateTime, string_enum, utcnow
from .base import foreign_id
from .location import Membership, Role
from .user import User


class GrantedRole(enum.StrEnum):
    SUPER = "super"
    OWNER = "owner"
    ADMIN = "admin"


class RoleGrant(IdMixin, db.Model):
    """A pending grant: the role is the user's only once they accept it with the mailed token.

    It is not a role: nothing that decides access or lists members reads these rows. Like
    the other one-time tokens, the token is kept only as a hash and works once, until
    `expires_at`. A super grant has no location; an owner or admin grant always has one.

    It records who made it (`offered_by`), and works only while they could still make it
    (`maker_entitled`): an offer does not outlive its maker's right. An offer stored
    before migration 0014 names no maker and works until it expires.
    """

    __tablename__ = "role_grants"
    __table_args__ = (
        CheckConstraint(
            "(role = 'super' AND location_id IS NULL)"
            " OR (role <> 'super' AND location_id IS NOT NULL)",
            name="location_unless_super",
        ),
        # Retention deletes spent offers: expired, or used.
        Index("ix_role_grants_expires_at", "expires_at"),
        Index("ix_role_grants_used_at", "used_at"),
    )

    user_id: Mapped[uuid.UUID] = foreign_id("users", ondelete="CASCADE", index=True)
    location_id: Mapped[uuid.UUID | None] = foreign_id("locations", ondelete="CASCADE", index=True)
    role: Mapped[GrantedRole] = mapped_column(string_enum(GrantedRole, "granted_role"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Not SET NULL: a maker's offers go with their account, where a null would read as an
    # offer from before makers were recorded, which still works.
    offered_by: Mapped[uuid.UUID | None] = foreign_id("users", ondelete="CASCADE", index=True)

    @classmethod
    def maker_entitled(cls) -> ColumnElement[bool]:
        """Whether the offer's maker still holds the right to make it, as SQL (API.md 18):
        a super for super and owner offers; a super or an owner of its location for an
        admin offer. True for an offer with no recorded maker (made before 0014; it
        expires within 7 days of the deploy)."""
        # Correlated to the offer alone: a statement may join the offered user's row.
        maker_is_super = (
            select(User.id)
            .where(User.id == cls.offered_by, User.is_super.is_(True))
            .correlate_except(User)
            .exists()
        )
        maker_owns_its_location = (
            select(Membership.user_id)
            .where(
                Membership.user_id == cls.offered_by,
                Membership.location_id == cls.location_id,
                Membership.role == Role.OWNER,
            )
            .correlate_except(Membership)
            .exists()
        )
        return or_(
            cls.offered_by.is_(None),
            maker_is_super,
            and_(cls.role == GrantedRole.ADMIN, maker_owns_its_location),
        )
