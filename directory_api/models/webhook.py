"""Webhook subscriptions (API.md 16): where the directory tells other systems what changed."""

import enum
import uuid
from datetime import datetime

from sqlalchemy import JSON, Boolean, Index, Integer, String, Text, Uuid, exists, or_, true
from sqlalchemy.orm import Mapped, column_property, mapped_column, relationship

from ..platform.extensions import db
from ..platform.types import EncryptedText, IdMixin, UTCDateTime, string_enum, utcnow
from .base import ROW_COLUMNS, URL_LENGTH, Audit, TimestampMixin, foreign_id
from .location import Location

DESCRIPTION_LENGTH = 200
EVENT_LENGTH = 40
ERROR_LENGTH = 500
RESPONSE_KEPT = 1024  # bytes of a receiver's answer the delivery log keeps
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


# Whether an enabled subscription (the location's own, or a global one) may want the
# location's events: loaded with the path's location by a write (access.py), so a change
# that nobody listens to writes no delivery statement (webhooks/events.py). Deferred:
# nothing else loads it.
Location.listened = column_property(
    exists().where(
        WebhookSubscription.enabled,
        or_(
            WebhookSubscription.location_id == Location.id,
            WebhookSubscription.location_id.is_(None),
        ),
    ),
    deferred=True,
)


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"  # due at next_attempt_at (or being attempted: claimed, leased)
    DELIVERED = "delivered"
    FAILED = "failed"  # every attempt failed, or the subscription answered 410


class WebhookDelivery(IdMixin, db.Model):
    """One event for one subscription: written in the transaction of the change it tells
    of (webhooks/events.py), delivered by the outbox worker (webhooks/delivery.py). Its
    body is kept as sent, byte for byte (it is what is signed); it holds no personal data.
    A redelivery is a new delivery of the same event (the same `event_id`, the
    receiver's `webhook-id`)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        # The worker's claim of what is due, and each subscription's log, newest first.
        Index("ix_webhook_deliveries_status_next_attempt", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_subscription_created", "subscription_id", "created_at"),
    )

    subscription_id: Mapped[uuid.UUID] = foreign_id("webhook_subscriptions", ondelete="CASCADE")
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    type: Mapped[str] = mapped_column(String(EVENT_LENGTH))
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[DeliveryStatus] = mapped_column(
        string_enum(DeliveryStatus, "webhook_delivery_status"), default=DeliveryStatus.PENDING
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # made (or begun: claimed)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    attempted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    response_status: Mapped[int | None] = mapped_column(Integer)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(ERROR_LENGTH))
    response: Mapped[str | None] = mapped_column(Text)  # its first RESPONSE_KEPT bytes
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)

    subscription: Mapped[WebhookSubscription] = relationship()

    @property
    def at(self) -> datetime:
        """When it was last attempted, else when it was written."""
        return self.attempted_at or self.created_at

    @property
    def due_at(self) -> datetime | None:
        """When it is tried next (None once it is over)."""
        return self.next_attempt_at if self.status is DeliveryStatus.PENDING else None
