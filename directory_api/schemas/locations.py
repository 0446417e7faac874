from marshmallow import fields

from ..platform.pagination import ListArgs
from .base import BaseSchema, Resource, all_optional
from .fields import Bool, Email, LongText, Phone, QueryBool, Slug, SlugOf, Text, Url

# What an owner may change at their own location; the rest is for supers.
OWNER_FIELDS = frozenset({"name", "description", "email", "phone", "address", "website"})


class LocationIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)
    region = Slug(allow_none=True)
    directory_location = Bool(data_key="directoryLocation")
    description = LongText()
    email = Email()
    phone = Phone()
    address = Text()
    website = Url()


LocationUpdate = all_optional(LocationIn, "LocationUpdate")


class LocationOut(Resource):
    slug = fields.String()
    name = fields.String()
    region = SlugOf()
    directory_location = fields.Boolean(data_key="directoryLocation")
    description = fields.String(allow_none=True)
    email = fields.String(allow_none=True)
    phone = fields.String(allow_none=True)
    address = fields.String(allow_none=True)
    website = fields.String(allow_none=True)


class LocationListArgs(ListArgs):
    directory_location = QueryBool(data_key="directoryLocation")
    region = Slug()
