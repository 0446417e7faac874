from marshmallow import fields

from .base import BaseSchema, Resource, Slug, Text


class RegionIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)


class RegionOut(Resource):
    slug = fields.String()
    name = fields.String()
