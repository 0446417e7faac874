"""Webhook subscriptions (API.md 16): where the directory tells other systems what changed."""

import uuid
from datetime import datetime

from sqlalchemy import JSON, Boolean, Index, String, true
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..platform.extensions import db
from ..platform.types import EncryptedText, IdMixin, UTCDateTime
from .base import ROW_COLUMNS, URL_LENGTH, Audit, TimestampMixin, foreign_id
from .location import Location

DESCRIPTION_LENGTH = 200
PER_LOCATION = 10  # subscriptions a location may have (409 beyond)

# What a location's subscription may ask for, and what only a global one (a super's) may.
LOCATION_EVENTS = (
    "vote.submitted",
    "vote.confirmed",
    "vote.updated",
    "vote.deleted",
    "vote.withdrawn",
    "reply.created",
    "reply.updated",
    "reply.deleted",
    "business.created",
    "business.updated",
    "business.deleted",
    "employer.created",
    "employer.updated",
    "employer.deleted",
    "location.updated",
    "webhook.test",
)
GLOBAL_EVENTS = (
    *LOCATION_EVENTS,
    *(
        f"{kind}.{verb}"
        for kind in ("region", "category", "social")
        for verb in ("created", "updated", "deleted")
    ),
    "location.created",
    "location.deleted",
)


class WebhookSubscription(IdMixin, TimestampMixin, db.Model):
    """A receiver's URL and the events it wants: of one location, or (no location) of
    every location and of the reference lists. Its signing secret is kept encrypted
    (it must be read to sign), and the one it replaced signs too for 24 hours."""

    __tablename__ = "webhook_subscriptions"
    __table_args__ = (
        Index("ix_webhook_subscriptions_location_created", "location_id", "created_at"),
    )
    __audit__ = Audit(
        ("url", "events", "description", "enabled", "secret"),
        unaudited=(
            *ROW_COLUMNS,
            "location_id",
            "previous_secret",
            "previous_secret_until",
            "disabled_reason",
            "failing_since",
        ),
        personal=frozenset({"secret"}),  # an entry says it changed, never what it is
        type="webhook",
        located=True,
        verbs=(("secret", "rotate"),),
    )

    location_id: Mapped[uuid.UUID | None] = foreign_id("locations", ondelete="CASCADE")
    url: Mapped[str] = mapped_column(String(URL_LENGTH))
    events: Mapped[list[str]] = mapped_column(JSON)
    description: Mapped[str | None] = mapped_column(String(DESCRIPTION_LENGTH))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # Why it was disabled by the service (a 410, five days of failures); None when by staff.
    disabled_reason: Mapped[str | None] = mapped_column(String(DESCRIPTION_LENGTH))
    secret: Mapped[str] = mapped_column(EncryptedText)
    previous_secret: Mapped[str | None] = mapped_column(EncryptedText)
    previous_secret_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Since when every delivery failed (None: the last one succeeded, or none was made).
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime)

    location: Mapped[Location | None] = relationship()
