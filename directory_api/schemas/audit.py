"""The audit log (API.md 10): entries as staff read them, and the filters of their lists."""

from marshmallow import Schema, fields

from ..models.audit import ACTION_LENGTH
from ..platform.output import PlannedDump, Timestamp
from ..platform.pagination import ListArgs
from .fields import Instant, Slug, Text


class AuditActor(Schema):
    id = fields.UUID(required=True)
    email = fields.String(required=True)
    token_id = fields.UUID(
        data_key="tokenId",
        metadata={"description": "The API token acted through; absent for a session."},
    )


class AuditTarget(Schema):
    type = fields.String(
        required=True,
        metadata={
            "enum": [
                "region",
                "category",
                "social",
                "location",
                "business",
                "employer",
                "vote",
                "user",
                "token",
                "webhook",
                "mail",
            ]
        },
    )
    id = fields.UUID(
        required=True,
        allow_none=True,
        metadata={"description": "Null for a failed sign-in with an address no one has."},
    )
    slug = fields.String(
        required=True, allow_none=True, metadata={"description": "Users have none."}
    )


class AuditEntryOut(PlannedDump):
    id = fields.UUID(required=True)
    at = Timestamp(required=True)
    actor = fields.Nested(
        AuditActor,
        required=True,
        allow_none=True,
        metadata={"description": "Null for a failed sign-in."},
    )
    action = fields.String(
        required=True,
        metadata={
            "description": "`<type>.create|update|delete`, `super|owner|admin.grant|"
            "accept|withdraw|remove`, `user.password_change|email_change`, "
            "`auth.login|login_failed|logout`, `token.create|revoke`."
        },
    )
    target = fields.Nested(AuditTarget, required=True)
    location = fields.String(required=True, allow_none=True, attribute="location_slug")
    changes = fields.Dict(
        keys=fields.String(),
        values=fields.List(fields.Raw(allow_none=True)),
        required=True,
        metadata={
            "description": "Field → [old, new]; a vote's personal data and passwords show "
            '"[redacted]".'
        },
    )
    request_id = fields.String(required=True, allow_none=True, data_key="requestId")
    ip = fields.String(required=True, allow_none=True)


class AuditListArgs(ListArgs):
    actor = fields.UUID(metadata={"description": "The acting user's id."})
    action = Text(max_length=ACTION_LENGTH, allow_none=False)
    location = Slug()
    since = Instant(metadata={"description": "From this moment on (inclusive)."})
    until = Instant(
        inclusive_end=True,
        metadata={
            "description": "Up to this moment, inclusive at the precision given (a date: "
            "that whole day; a timestamp as entries show it: that millisecond)."
        },
    )
