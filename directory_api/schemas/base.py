"""The base classes every request and response schema builds on."""

import copy

from marshmallow import RAISE, Schema, fields, missing

from ..platform.output import PlannedDump, Timestamp
from .fields import Slug


class BaseSchema(Schema):
    class Meta:
        unknown = RAISE  # a typo never passes silently


def all_but(schema: type[Schema], shown: tuple[str, ...]) -> tuple[str, ...]:
    """What to exclude from `schema` so that it shows `shown` alone (attribute names): an
    allow-list, so that a field added to `schema` later stays out until it is listed."""
    declared = schema._declared_fields
    if unknown := set(shown) - set(declared):
        raise TypeError(f"{schema.__name__} has no field {', '.join(sorted(unknown))}")
    return tuple(name for name in declared if name not in shown)


def all_optional(schema: type[Schema], name: str) -> type[Schema]:
    """`schema` for a partial update: every field optional and without a default, so only
    what is sent changes. Validation and the OpenAPI document both use the result."""
    overrides: dict[str, fields.Field] = {}
    for field_name, field in schema._declared_fields.items():
        if field.required or field.load_default is not missing:
            clone = copy.copy(field)
            clone.required = False
            clone.load_default = missing
            overrides[field_name] = clone
    return type(name, (schema,), overrides)


class Resource(PlannedDump):
    """Output: the fields every stored resource shows (dumped through a compiled plan)."""

    id = fields.UUID(dump_only=True)
    created_at = Timestamp(data_key="createdAt", dump_only=True)
    updated_at = Timestamp(data_key="updatedAt", dump_only=True)


class TargetSchema(BaseSchema):
    """The body of a DELETE that names its target by `id` or current `slug`."""

    id = fields.UUID()
    slug = Slug()
