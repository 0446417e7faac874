"""User accounts. Roles live in Membership rows and the is_super flag."""

import secrets
from datetime import datetime

from flask_login import UserMixin
from sqlalchemy import Boolean, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..extensions import db
from .base import EMAIL_LENGTH, NAME_LENGTH, PHONE_LENGTH, IdMixin, TimestampMixin, UTCDateTime
from .location import Membership


def new_session_token() -> str:
    return secrets.token_urlsafe(32)


class User(UserMixin, IdMixin, TimestampMixin, db.Model):
    __tablename__ = "users"

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

    @property
    def status(self) -> str:
        return "active" if self.password_hash else "invited"

    def get_id(self) -> str:
        return self.session_token

    def rotate_session_token(self) -> None:
        self.session_token = new_session_token()
