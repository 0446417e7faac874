"""Webhook subscriptions (API.md 16)."""

from marshmallow import Schema, fields, validate

from ..models.webhook import DESCRIPTION_LENGTH, GLOBAL_EVENTS, DeliveryStatus
from ..platform.output import PlannedDump, Timestamp
from ..platform.pagination import ListArgs
from .base import BaseSchema, Resource, all_optional
from .fields import Bool, SlugOf, Text, Url


class WebhookIn(BaseSchema):
    url = Url(
        required=True,
        metadata={
            "description": "https (http only where WEBHOOK_ALLOW_HTTP); its host must "
            "resolve to public addresses only (WEBHOOK_ALLOWED_NETWORKS opens private "
            "ones); no user:password@."
        },
    )
    events = fields.List(
        fields.String(validate=validate.OneOf(GLOBAL_EVENTS)),
        required=True,
        validate=validate.Length(min=1, max=len(GLOBAL_EVENTS)),
        metadata={
            "description": "A location's events; a global subscription's add those of "
            "the reference lists and of locations themselves."
        },
    )
    description = Text(max_length=DESCRIPTION_LENGTH, allow_none=True)


class WebhookUpdate(all_optional(WebhookIn, "WebhookChanges")):
    enabled = Bool()


class WebhookOut(Resource):
    url = fields.String(required=True)
    events = fields.List(fields.String(), required=True)
    description = fields.String(required=True, allow_none=True)
    enabled = fields.Boolean(required=True)
    disabled_reason = fields.String(
        required=True,
        allow_none=True,
        data_key="disabledReason",
        metadata={"description": "Why the service disabled it (null: enabled, or by staff)."},
    )
    location = SlugOf(required=True, metadata={"description": "null: global."})


class NewWebhookOut(WebhookOut):
    secret = fields.String(
        required=True,
        metadata={"description": "whsec_ + base64 of 32 bytes: shown here only."},
    )


class WebhookSecretOut(Schema):
    secret = fields.String(required=True)
    previous_valid_until = Timestamp(
        required=True,
        data_key="previousValidUntil",
        metadata={"description": "Until then deliveries carry both signatures."},
    )


STATUSES = [status.value for status in DeliveryStatus]


class DeliveryOut(PlannedDump):
    """One event for one subscription, and how its last attempt went."""

    id = fields.UUID(required=True)
    event_id = fields.UUID(
        required=True,
        data_key="eventId",
        metadata={"description": "The `webhook-id` header: the same on every attempt."},
    )
    type = fields.String(required=True)
    attempt = fields.Integer(
        required=True, attribute="attempts", metadata={"description": "Attempts made."}
    )
    status = fields.Function(
        lambda delivery: delivery.status.value, required=True, metadata={"enum": STATUSES}
    )
    response_status = fields.Integer(required=True, allow_none=True, data_key="responseStatus")
    duration_ms = fields.Integer(required=True, allow_none=True, data_key="durationMs")
    error = fields.String(required=True, allow_none=True)
    response = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "The first 1 KiB of the receiver's answer."},
    )
    at = Timestamp(
        required=True, metadata={"description": "Its last attempt, else when it was written."}
    )
    next_attempt_at = Timestamp(
        required=True,
        allow_none=True,
        attribute="due_at",
        data_key="nextAttemptAt",
        metadata={"description": "When it is tried next; null once delivered or failed."},
    )


class DeliveryArgs(ListArgs):
    status = fields.String(validate=validate.OneOf(STATUSES))
