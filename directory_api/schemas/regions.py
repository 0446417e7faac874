from marshmallow import fields

from .base import BaseSchema, Resource, Slug, Text, all_optional


class RegionIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)


RegionUpdate = all_optional(RegionIn, "RegionUpdate")


class RegionOut(Resource):
    slug = fields.String()
    name = fields.String()
