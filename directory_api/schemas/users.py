"""Users as the API shows them, and the sign-in body."""

from marshmallow import fields

from ..models.base import EMAIL_LENGTH
from .base import BaseSchema, Bool, Resource, Text, Timestamp


class UserOut(Resource):
    email = fields.String()
    name = fields.String()
    phone = fields.String()
    is_super = fields.Boolean(data_key="isSuper")
    status = fields.String()
    roles = fields.Method("get_roles")
    last_login_at = Timestamp(data_key="lastLoginAt")

    class Meta:
        exclude = ("updated_at",)

    def get_roles(self, user) -> list[dict[str, str]]:
        memberships = sorted(user.memberships, key=lambda m: m.location.slug)
        return [{"location": m.location.slug, "role": m.role.value} for m in memberships]


class LoginIn(BaseSchema):
    # Not checked as an address: a malformed one fails like any wrong one (401).
    email = Text(required=True, max_length=EMAIL_LENGTH)
    password = fields.String(required=True)
    remember = Bool(load_default=False)
