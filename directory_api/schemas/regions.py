from marshmallow import fields

from .base import BaseSchema, Resource, all_optional
from .fields import Slug, Text


class RegionIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)


RegionUpdate = all_optional(RegionIn, "RegionUpdate")


class RegionOut(Resource):
    slug = fields.String()
    name = fields.String()
