"""Businesses and employers: one shape."""

from marshmallow import fields, validate

from ..platform.pagination import ListArgs
from .base import BaseSchema, Resource, TargetSchema, all_optional
from .fields import Email, LongText, Phone, Slug, Text, Url

MAX_SOCIALS = 20


class SocialLinkIn(BaseSchema):
    social = Slug(required=True)
    url = Url(required=True)


class ListingIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)
    subcategory = Slug(allow_none=True)
    description = LongText()
    branch = Text()
    email = Email()
    phone = Phone()
    address = Text()
    website = Url()
    socials = fields.List(
        fields.Nested(SocialLinkIn),
        validate=validate.Length(max=MAX_SOCIALS),
        allow_none=True,
    )


class ListingUpdate(all_optional(ListingIn, "ListingChanges"), TargetSchema):
    """`id` names the target (then `slug` renames it), or `slug` alone names it."""


# Output reads plain attributes, so a page can be dumped from ORM objects or from rows
# (the list and search pages load rows straight from SQL: api/listings.py).
class SocialLinkOut(BaseSchema):
    social = fields.String(attribute="social_slug")
    url = fields.String()


class ListingOut(Resource):
    slug = fields.String()
    name = fields.String()
    subcategory = fields.String(attribute="subcategory_slug", allow_none=True)
    description = fields.String(allow_none=True)
    branch = fields.String(allow_none=True)
    email = fields.String(allow_none=True)
    phone = fields.String(allow_none=True)
    address = fields.String(allow_none=True)
    website = fields.String(allow_none=True)
    socials = fields.List(fields.Nested(SocialLinkOut))


class ListingListArgs(ListArgs):
    subcategory = Slug()
