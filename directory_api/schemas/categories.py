from marshmallow import fields

from ..platform.pagination import ListArgs
from .base import BaseSchema, Resource, TargetSchema, all_optional
from .fields import QueryBool, Slug, SlugOf, Text


class CategoryIn(BaseSchema):
    slug = Slug()
    name = Text(required=True)
    parent = Slug(allow_none=True)  # null makes it a top-level category


class CategoryUpdate(all_optional(CategoryIn, "CategoryChanges"), TargetSchema):
    """`id` names the target (then `slug` renames it), or `slug` alone names it."""


class CategoryOut(Resource):
    slug = fields.String()
    name = fields.String()
    parent = SlugOf()


class CategoryListArgs(ListArgs):
    parent = Slug()
    top_level = QueryBool(data_key="topLevel")
