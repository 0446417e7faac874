"""How rows become an answer's output: one way, whatever the rows are.

`dumped(rows, schema)` is the output of a list (a page, a CSV export): rows the database
wrote as JSON already (`Encoded`, from `sql.json_of`) pass as they are; objects are dumped
by the schema. Every schema is instantiated once (`schema_instance`), and dumps through
a plan compiled once per schema instance:

marshmallow's `dump` does per-value bookkeeping (accessor lookups, missing checks, hooks)
that costs more than the rest of a list request once rows are loaded. A plan reads each
field's attribute and converts it the way the field would; fields it has no shortcut for
(Function, Method, Dict, …) still go through their own `serialize`; a project field
registers its converter in `SHORTCUTS`. The result is the same as `Schema.dump`;
tests/test_dump.py holds it to that for every output schema.
"""

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any, NamedTuple

import orjson
from marshmallow import Schema, fields, missing

Plan = Callable[[Any], dict[str, Any]]


def _text(value: Any) -> Any:
    return value if value is None or type(value) is str else str(value)


def _integer(value: Any) -> Any:
    return value if value is None else int(value)


def _same(value: Any) -> Any:
    return value


# Exact types only: a subclass may serialize differently, and then takes the general path.
SHORTCUTS: dict[type, Callable[[Any], Any]] = {
    fields.String: _text,
    fields.UUID: _text,
    fields.Integer: _integer,
    fields.Boolean: _same,  # marshmallow 4 dumps a Boolean's value as it is
}


def _read(obj: Any, attribute: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(attribute, missing)
    return getattr(obj, attribute, missing)


def _nested(field: fields.Nested) -> Callable[[Any], Any]:
    plan = compile_plan(field.schema)
    if field.many:
        return lambda value: None if value is None else [plan(item) for item in value]
    return lambda value: None if value is None else plan(value)


def _step(schema: Schema, name: str, field: fields.Field) -> Callable[[Any], Any]:
    """A function from the object to the field's output (or `missing` to leave it out)."""
    attribute = field.attribute or name
    convert = SHORTCUTS.get(type(field))
    if convert is None and type(field) is fields.Nested:
        convert = _nested(field)
    if (
        convert is None
        and type(field) is fields.List
        and type(field.inner) is fields.Nested
        and not field.inner.many
    ):
        inner = _nested(field.inner)
        convert = lambda value: None if value is None else [inner(item) for item in value]  # noqa: E731
    if (
        convert is None
        or field.dump_default is not missing
        or "." in attribute  # a dotted path: marshmallow's accessor follows it
        or getattr(field, "as_string", False)
    ):

        def general(obj: Any) -> Any:
            return field.serialize(name, obj, accessor=schema.get_attribute)

        return general

    def shortcut(obj: Any) -> Any:
        value = _read(obj, attribute)
        return missing if value is missing else convert(value)

    return shortcut


def compile_plan(schema: Schema) -> Plan:
    """The dump of one object by `schema`, as a plain function."""
    if any(schema._hooks[hook] for hook in ("pre_dump", "post_dump")):
        return lambda obj: Schema.dump(schema, obj, many=False)
    steps = [
        (field.data_key or name, _step(schema, name, field))
        for name, field in schema.dump_fields.items()
    ]

    def plan(obj: Any) -> dict[str, Any]:
        out = {}
        for key, step in steps:
            value = step(obj)
            if value is not missing:
                out[key] = value
        return out

    return plan


class PlannedDump(Schema):
    """A schema whose `dump` runs its compiled plan."""

    _plan: Plan | None = None

    def dump(self, obj: Any, *, many: bool | None = None) -> Any:
        plan = self._plan
        if plan is None:
            plan = self._plan = compile_plan(self)
        if self.many if many is None else many:
            return [plan(item) for item in obj]
        return plan(obj)


@cache
def schema_instance(schema: type[Schema], many: bool = False) -> Schema:
    """One instance per schema class (making one deep-copies every field)."""
    return schema(many=many)


class Encoded(list):
    """A page's rows whose first column is each item's output already, as JSON text
    written by the database (`sql.json_of`): answered as it is, without a dump."""


class Written(NamedTuple):
    """One object's output as JSON text written by the database (`sql.json_of`): answered
    as it is, without a dump."""

    text: str


def dumped(items: Sequence[Any], schema: Schema, *, encode: bool = True) -> list[Any]:
    """Rows as output, dumped with `schema`; encoded rows as they are (JSON fragments, or
    with `encode=False` as the values they hold)."""
    if isinstance(items, Encoded):
        if encode:
            return [orjson.Fragment(row[0]) for row in items]
        return [orjson.loads(row[0]) for row in items]
    return schema.dump(items, many=True)


def timestamp_text(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with millisecond precision and a Z suffix."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Timestamp(fields.String):
    """Output only: ISO 8601 in UTC with a Z suffix (a string of `format: date-time`)."""

    def _serialize(self, value: datetime | None, attr: Any, obj: Any, **kwargs: Any) -> Any:
        return timestamp_text(value)

    def json_schema(self) -> dict[str, Any]:
        return {"format": "date-time"}


SHORTCUTS[Timestamp] = timestamp_text
