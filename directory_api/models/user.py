"""User accounts. Roles live in Membership rows and the is_super flag."""

import enum
import secrets
from datetime import datetime
from typing import Any

from flask_login import UserMixin
from sqlalchemy import Boolean, ColumnElement, String, case
from sqlalchemy.ext.hybrid import Comparator, hybrid_property
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..platform.email_addresses import EMAIL_LENGTH
from ..platform.extensions import db
from ..platform.types import IdMixin, UTCDateTime
from .base import NAME_LENGTH, PHONE_LENGTH, ROW_COLUMNS, Audit, TimestampMixin
from .location import Membership


def new_session_token() -> str:
    return secrets.token_urlsafe(32)


class UserStatus(enum.StrEnum):
    """An invited account has no password yet; registering (setting one) makes it active."""

    INVITED = "invited"
    ACTIVE = "active"


class StatusComparator(Comparator[str]):
    """`User.status` in SQL. Compared with a status it is a test of `password_hash IS [NOT]
    NULL`, which the planner can use as it is; selected, it is a CASE giving the value."""

    def __init__(self, password_hash: Any):
        super().__init__(
            case((password_hash.is_(None), UserStatus.INVITED.value), else_=UserStatus.ACTIVE.value)
        )
        self.password_hash = password_hash

    def __eq__(self, other: object) -> ColumnElement[bool]:  # type: ignore[override]
        if UserStatus(other) is UserStatus.ACTIVE:
            return self.password_hash.is_not(None)
        return self.password_hash.is_(None)

    def __ne__(self, other: object) -> ColumnElement[bool]:  # type: ignore[override]
        if UserStatus(other) is UserStatus.ACTIVE:
            return self.password_hash.is_(None)
        return self.password_hash.is_not(None)


class User(UserMixin, IdMixin, TimestampMixin, db.Model):
    __tablename__ = "users"
    # Super rights are role entries (`super.grant`, `super.remove`), not field changes;
    # the session token and the last sign-in change with every sign-in and password.
    __audit__ = Audit(
        ("email", "name", "phone", "password_hash"),
        personal=frozenset({"password_hash"}),
        unaudited=(*ROW_COLUMNS, "is_super", "session_token", "last_login_at"),
        type="user",
    )

    # Stored lower-cased: addresses are unique regardless of case.
    email: Mapped[str] = mapped_column(String(EMAIL_LENGTH), unique=True)
    name: Mapped[str | None] = mapped_column(String(NAME_LENGTH), index=True)
    phone: Mapped[str | None] = mapped_column(String(PHONE_LENGTH))
    password_hash: Mapped[str | None] = mapped_column(String(255))
    is_super: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    # Flask-Login's "alternative id": replacing it ends every session of this user.
    session_token: Mapped[str] = mapped_column(String(64), unique=True, default=new_session_token)
    last_login_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    memberships: Mapped[list[Membership]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True
    )
    # The roles of the user who asks, as (location slug, role) in slug order, where the
    # statement that found the user read them beside it (access.with_roles: /me and
    # sign-in, views that change no role): plain values, no collection of ORM objects to
    # build, and not refreshed by the ORM. None: `memberships` has them.
    roles_read = None  # list[tuple[str, Role]] when read; not a column (no annotation)

    @hybrid_property
    def status(self) -> UserStatus:
        return UserStatus.INVITED if self.password_hash is None else UserStatus.ACTIVE

    @status.inplace.comparator
    @classmethod
    def _status_comparator(cls) -> StatusComparator:
        return StatusComparator(cls.password_hash)

    def get_id(self) -> str:
        return self.session_token

    def rotate_session_token(self) -> None:
        self.session_token = new_session_token()
