"""Personal API tokens as the API shows them (never their secret but once, at creation),
and the bodies and filters of their endpoints (API.md 14)."""

from marshmallow import fields, validate

from ..models.api_token import TOKEN_NAME_LENGTH, Scope
from ..platform.output import Timestamp
from ..platform.pagination import ListArgs
from .base import BaseSchema, Resource
from .fields import Instant, Slug, Text

TOKEN_STATES = ("active", "expired", "revoked")
MAX_TOKEN_LENGTH = 200  # a token is 41 characters; a body field is refused well past that


class TokenIn(BaseSchema):
    name = Text(required=True, max_length=TOKEN_NAME_LENGTH)
    # Asked again: a stolen session cookie cannot mint a long-lived credential.
    password = fields.String(required=True, validate=validate.Length(max=1024))
    scopes = fields.List(
        fields.String(validate=validate.OneOf([scope.value for scope in Scope])),
        required=True,
        validate=validate.Length(min=1, max=len(Scope)),
    )
    locations = fields.List(
        Slug(),
        validate=validate.Length(min=1, max=100),
        metadata={"description": "Limit the token to these locations (default: not limited)."},
    )
    expires_in_days = fields.Integer(
        data_key="expiresInDays", load_default=90, validate=validate.Range(min=1, max=366)
    )


class TokenOut(Resource):
    """A token as its lists show it: never its secret, only its first 12 characters."""

    name = fields.String()
    scopes = fields.List(fields.String())
    locations = fields.List(
        fields.String(),
        attribute="location_slugs",
        allow_none=True,
        metadata={"description": "The locations it is limited to; null: not limited."},
    )
    prefix = fields.String()
    state = fields.String(metadata={"enum": list(TOKEN_STATES)})
    expires_at = Timestamp(data_key="expiresAt")
    revoked_at = Timestamp(data_key="revokedAt", allow_none=True)
    last_used_at = Timestamp(data_key="lastUsedAt", allow_none=True)
    last_used_ip = fields.String(data_key="lastUsedIp", allow_none=True)

    class Meta:
        exclude = ("updated_at",)


class NewTokenOut(TokenOut):
    """A token just created: its secret, shown in this answer only."""

    token = fields.String(attribute="secret")


class SuperTokenOut(TokenOut):
    """A token in the supers' list: whose it is."""

    user = fields.UUID(attribute="user_id")


class TokenArgs(ListArgs):
    state = fields.String(validate=validate.OneOf(TOKEN_STATES))


class SuperTokenArgs(TokenArgs):
    user = fields.UUID(metadata={"description": "The owning user's id."})
    last_used_before = Instant(
        data_key="lastUsedBefore",
        metadata={"description": "Not used since this moment (never used included)."},
    )


class TokenRevokeIn(BaseSchema):
    token = fields.String(required=True, validate=validate.Length(min=1, max=MAX_TOKEN_LENGTH))
