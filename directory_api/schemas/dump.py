"""Output schemas dumped through a plan compiled once per schema instance.

marshmallow's `dump` does per-value bookkeeping (accessor lookups, missing checks, hooks)
that costs more than the rest of a list request once rows are loaded. A plan reads each
field's attribute and converts it the way the field would; fields it has no shortcut for
(Function, Method, Dict, …) still go through their own `serialize`; a project field
registers its converter in `SHORTCUTS`. The result is the same as `Schema.dump`;
tests/test_dump.py holds it to that for every output schema.
"""

from collections.abc import Callable
from typing import Any

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
