"""Field types and the base schema every request and response schema builds on."""

import copy
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

from email_validator import EmailNotValidError, validate_email
from marshmallow import RAISE, Schema, ValidationError, fields, missing, validate
from werkzeug.routing import BaseConverter

from ..models.base import (
    EMAIL_LENGTH,
    NAME_LENGTH,
    PHONE_LENGTH,
    SLUG_LENGTH,
    TEXT_LENGTH,
    URL_LENGTH,
)
from .dump import SHORTCUTS, PlannedDump

SLUG_REGEX = r"[a-z0-9]+(?:-[a-z0-9]+)*"
SLUG_PATTERN = f"^{SLUG_REGEX}$"
# Control characters other than tab and line breaks (NUL included) are never text.
CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f"
CONTROL_CHARACTERS = re.compile(f"[{CONTROL}]")
# What str.strip() trims, as the body of a regex character class that reads the same in
# Python and in JSON Schema (whose \s is not Python's): for the OpenAPI document.
WHITESPACE = "".join(f"\\u{code:04x}" for code in range(0x10000) if chr(code).isspace())
PHONE_REGEX = r"\+?[0-9][0-9 ()./-]*"


class SlugConverter(BaseConverter):
    """`<slug:…>` in a route: anything that is not a slug is a 404 before any query."""

    regex = SLUG_REGEX


class BaseSchema(Schema):
    class Meta:
        unknown = RAISE  # a typo never passes silently


class Text(fields.String):
    """A trimmed string with a maximum length; empty after trimming counts as missing.

    Optional text may be sent as null or "" to clear it. One-line text refuses line breaks
    (they would let a value inject headers into mail).
    """

    default_error_messages = {  # noqa: RUF012
        "too_long": "Longer than {max} characters.",
        "line_break": "Must be a single line.",
        "empty": "May not be empty.",
        "control": "Contains control characters.",
    }

    def __init__(self, *, max_length: int = NAME_LENGTH, multiline: bool = False, **kwargs: Any):
        if not kwargs.get("required"):
            kwargs.setdefault("allow_none", True)
        super().__init__(**kwargs)
        self.max_length = max_length
        self.multiline = multiline

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        if not text:
            if self.required:
                raise self.make_error("required")
            if not self.allow_none:
                raise self.make_error("empty")
            return None
        if len(text) > self.max_length:
            raise self.make_error("too_long", max=self.max_length)
        if CONTROL_CHARACTERS.search(text):
            raise self.make_error("control")
        # Every line break Python knows (\n, \r, NEL, U+2028, U+2029 …), not only \n and \r.
        if not self.multiline and len(text.splitlines()) > 1:
            raise self.make_error("line_break")
        return self.clean(text)

    def clean(self, text: str) -> str:
        return text


class LongText(Text):
    def __init__(self, **kwargs: Any):
        super().__init__(max_length=TEXT_LENGTH, multiline=True, **kwargs)


class Slug(Text):
    def __init__(self, **kwargs: Any):
        kwargs.setdefault("allow_none", False)  # a slug is never cleared, only replaced
        super().__init__(max_length=SLUG_LENGTH, **kwargs)

    def clean(self, text: str) -> str:
        validate.Regexp(SLUG_PATTERN, error="Lower-case letters, digits and single hyphens only.")(
            text
        )
        return text


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text.strip()).casefold()


def normalize_email(text: str) -> str:
    """One spelling per address (NFKC, case-folded, the domain decoded from IDNA):
    "ＡＮＮ@Example.com" is ann@example.com, ann@xn--bcher-kva.de is ann@bücher.de.

    The stored form of every address; e-mail uniqueness, sign-in look-ups and every
    per-address rate-limit key use it. Text that is no address is only folded.
    """
    try:
        return _canonical(text)
    except EmailNotValidError:
        return _fold(text)


def _canonical(text: str) -> str:
    """The normalised address; EmailNotValidError when `text` is not one."""
    result = validate_email(_fold(text), check_deliverability=False)
    # The validator may re-normalise the domain (IDNA): fold again, so it is idempotent.
    return _fold(result.normalized)


class Email(Text):
    """A syntactically valid address, stored normalised (addresses are case-insensitive)."""

    def __init__(self, **kwargs: Any):
        super().__init__(max_length=EMAIL_LENGTH, **kwargs)

    def clean(self, text: str) -> str:
        try:
            return _canonical(text)
        except EmailNotValidError as error:
            raise ValidationError("Not a valid email address.") from error


class Phone(Text):
    """Digits with the usual separators and an optional leading +."""

    def __init__(self, **kwargs: Any):
        super().__init__(max_length=PHONE_LENGTH, **kwargs)

    def clean(self, text: str) -> str:
        validate.Regexp(f"^{PHONE_REGEX}$", error="Digits, spaces and + ( ) . / - only.")(text)
        return text


class Url(Text):
    def __init__(self, **kwargs: Any):
        super().__init__(max_length=URL_LENGTH, **kwargs)

    def clean(self, text: str) -> str:
        validate.URL(schemes={"http", "https"}, error="Not a valid http(s) URL.")(text)
        return text


class Bool(fields.Boolean):
    """A JSON boolean, nothing else (no "yes", no 1)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


class QueryBool(fields.Boolean):
    """A boolean query parameter: true/false/1/0."""

    truthy = frozenset({"true", "1"})
    falsy = frozenset({"false", "0"})


def timestamp_text(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with millisecond precision and a Z suffix."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Timestamp(fields.Field):
    """Output only: ISO 8601 in UTC with a Z suffix."""

    def _serialize(self, value: datetime | None, attr: Any, obj: Any, **kwargs: Any) -> Any:
        return timestamp_text(value)


SHORTCUTS[Timestamp] = timestamp_text


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
