"""Votes (testimonials) submitted by the public about a location's businesses and employers."""

import enum
import uuid

from sqlalchemy import Boolean, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..extensions import db
from ..types import string_enum
from .base import EMAIL_LENGTH, NAME_LENGTH, PHONE_LENGTH, IdMixin, TimestampMixin
from .listing import Employer


class VoteType(enum.StrEnum):
    BTOB = "btob"
    BTOC = "btoc"
    EMPLOYER = "employer"


class Vote(IdMixin, TimestampMixin, db.Model):
    __tablename__ = "votes"
    __table_args__ = (
        Index("ix_votes_location_created", "location_id", "created_at", "id"),
        Index("ix_votes_location_active", "location_id", "active"),
    )

    location_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("locations.id", ondelete="RESTRICT"))
    type: Mapped[VoteType] = mapped_column(string_enum(VoteType, "vote_type"))
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    employer_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("listings.id", ondelete="RESTRICT"), index=True
    )
    your_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    your_email: Mapped[str] = mapped_column(String(EMAIL_LENGTH))
    your_phone: Mapped[str | None] = mapped_column(String(PHONE_LENGTH))
    business_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    business_branch: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    vote_body: Mapped[str] = mapped_column(Text)
    your_business: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    your_position: Mapped[str | None] = mapped_column(String(NAME_LENGTH))

    employer: Mapped[Employer | None] = relationship()
