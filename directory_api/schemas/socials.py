from marshmallow import fields

from .base import BaseSchema, Resource, TargetSchema, all_optional
from .fields import Slug, Text, Url


class SocialIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)
    url = Url()


class SocialUpdate(all_optional(SocialIn, "SocialChanges"), TargetSchema):
    """`id` names the target (then `slug` renames it), or `slug` alone names it."""


class SocialOut(Resource):
    slug = fields.String()
    name = fields.String()
    url = fields.String(allow_none=True)
