"""Users as the API shows them, and the bodies of sign-in and the account endpoints."""

from typing import Any

from marshmallow import ValidationError, fields, pre_load

from ..models import Role, UserStatus
from ..platform.email_addresses import EMAIL_LENGTH
from ..platform.output import PlannedDump, Timestamp
from .base import BaseSchema, Resource
from .fields import Bool, Email, Phone, Text
from .passwords import Password


class UserOut(Resource):
    """A user. Seen through one location (owners, admins: api/members.py `AtLocation`), only
    that location's role shows."""

    email = fields.String()
    name = fields.String(allow_none=True)
    phone = fields.String(allow_none=True)
    is_super = fields.Boolean(data_key="isSuper")
    status = fields.String(metadata={"enum": [status.value for status in UserStatus]})
    roles = fields.Method(
        "get_roles",
        metadata={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "role": {"enum": [role.value for role in Role]},
                },
                "required": ["location", "role"],
            },
        },
    )
    last_login_at = Timestamp(data_key="lastLoginAt", allow_none=True)

    class Meta:
        exclude = ("updated_at",)

    def get_roles(self, user) -> list[dict[str, str]]:
        roles = user.roles_read  # read with the user who asks (access.with_roles), or:
        if roles is None:
            roles = sorted((m.location.slug, m.role) for m in user.memberships)
        return [{"location": slug, "role": role.value} for slug, role in roles]


class ExistingUserOut(PlannedDump):
    """An invited account that existed before: no more than the inviter already knew, and
    whether it is registered (API.md 9)."""

    id = fields.UUID(required=True)
    email = fields.String(required=True)
    status = fields.String(
        required=True, metadata={"enum": [status.value for status in UserStatus]}
    )


class PendingOfferOut(PlannedDump):
    """A live role offer (API.md 18), by the user it is offered to: no more than the
    inviter knew, and when it was made and stops working. Written by the database
    (api/members.py `OFFERS_OUTPUT`)."""

    id = fields.UUID(required=True, attribute="user_id", metadata={"description": "The user's id."})
    email = fields.String(required=True)
    offered_at = Timestamp(required=True, data_key="offeredAt", attribute="created_at")
    expires_at = Timestamp(required=True, data_key="expiresAt")


class LoginIn(BaseSchema):
    # Not checked as an address: a malformed one fails like any wrong one (401).
    email = Text(required=True, max_length=EMAIL_LENGTH)
    password = fields.String(required=True)
    remember = Bool(load_default=False)


class InviteIn(BaseSchema):
    email = Email(required=True)
    name = Text()


# Fields a user may not change through PUT …/id/:id, and where to change them instead.
CHANGED_ELSEWHERE = {
    "email": "Change the e-mail address with POST /me/email-update.",
    "password": "Change the password with POST /me/password-update.",
    "isSuper": "Supers are invited with POST /supers/ and revoked with DELETE /supers/id/:id.",
    "roles": "Roles are given and taken at /locations/:slug/owners/ and …/admins/.",
    "status": "The status changes when the user registers.",
}


class UserUpdate(BaseSchema):
    """Personal details: name and phone only."""

    name = Text()
    phone = Phone()

    @pre_load
    def point_elsewhere(self, data: Any, **_: Any) -> Any:
        if isinstance(data, dict):
            errors = {key: [message] for key, message in CHANGED_ELSEWHERE.items() if key in data}
            if errors:
                raise ValidationError(errors)
        return data


class RegisterIn(BaseSchema):
    token = fields.String(required=True)
    password = Password(required=True)
    name = Text()


class PasswordResetStartIn(BaseSchema):
    email = Email(required=True)


class PasswordResetIn(BaseSchema):
    password = Password(required=True)


class PasswordUpdateIn(BaseSchema):
    current_password = fields.String(required=True, data_key="currentPassword")
    new_password = Password(required=True, data_key="newPassword")


class EmailUpdateIn(BaseSchema):
    email = Email(required=True)
    password = fields.String(required=True)
