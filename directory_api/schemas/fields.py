"""The API's own field types: text (trimmed, bounded, one line unless long), slugs,
e-mail addresses, phone numbers, URLs, strict booleans, and timestamps as output.

Each text field also states what it accepts as JSON Schema (`json_schema`), which the OpenAPI
document shows: the rule and its description are written once, side by side.
"""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from email_validator import EmailNotValidError
from marshmallow import ValidationError, fields, validate

from ..models.base import NAME_LENGTH, PHONE_LENGTH, TEXT_LENGTH, URL_LENGTH
from ..platform.email_addresses import EMAIL_LENGTH, canonical_email
from ..platform.output import SHORTCUTS
from ..platform.slugs import SLUG_LENGTH, SLUG_REGEX

# Control characters other than tab and line breaks (NUL included) are never text.
CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f"
CONTROL_CHARACTERS = re.compile(f"[{CONTROL}]")
# The rest are regex fragments that read the same in Python and in JSON Schema (whose \s is
# not Python's), for the OpenAPI document. What str.strip() trims, as a character class body:
WHITESPACE = "".join(f"\\u{code:04x}" for code in range(0x10000) if chr(code).isspace())
# Every line break str.splitlines() knows beyond those in CONTROL.
LINE_BREAKS = r"\n\r\x85\u2028\u2029"
PHONE_REGEX = r"\+?[0-9][0-9 ()./-]*"
# A subset of what marshmallow's URL validator takes (http(s), a host name with a TLD).
URL_REGEX = (
    r"https?://(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,6}(?::[0-9]{1,5})?"
    r"(?:/|[/?#][!-~]+)?"
)
# An ISO 8601 date, or date and time (to the minute, second or microsecond), with an
# optional offset: what `Instant` takes. Years from 1000 on; impossible days (Feb 30) are
# refused by the parser.
INSTANT_REGEX = (
    r"[1-9][0-9]{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"(?:T(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?)?"
)
INSTANT = re.compile(INSTANT_REGEX)
# The time of such a text: minutes, seconds and a fraction if given.
TIME_PART = re.compile(r"T[0-9]{2}:[0-9]{2}(:[0-9]{2})?(?:\.([0-9]+))?")


def precision_of(text: str) -> timedelta:
    """The unit of the last figure of an ISO 8601 date or date and time: a day, a minute,
    a second, or a fraction of one."""
    found = TIME_PART.search(text)
    if found is None:
        return timedelta(days=1)
    seconds, fraction = found.groups()
    if fraction:
        return timedelta(microseconds=10 ** (6 - len(fraction)))
    return timedelta(seconds=1 if seconds else 60)


SPECIAL_USE_DOMAINS = (
    "Special-use domains (RFC 6761: .test, .localhost, .invalid, .local, .onion, .arpa …) "
    "are refused."
)


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

    @property
    def refuses_blank(self) -> bool:
        """Blank text is refused where it is required or may not be cleared; else it means null."""
        return self.required or not self.allow_none

    def json_schema(self) -> dict[str, Any]:
        """What the field accepts, as JSON Schema keywords (for the OpenAPI document). They
        describe the trimmed value; surrounding whitespace is tolerated on input as well."""
        keywords: dict[str, Any] = {"maxLength": self.max_length}
        if self.refuses_blank:
            keywords["minLength"] = 1
        return keywords | self.value_schema()

    def value_schema(self) -> dict[str, Any]:
        """The keywords beyond the length: no control characters (nor line breaks, on one
        line), and something besides whitespace where blank is refused."""
        refused = CONTROL if self.multiline else CONTROL + LINE_BREAKS
        some = f"[^{refused}]*"
        if self.refuses_blank:
            return {"pattern": f"^{some}[^{WHITESPACE}{CONTROL}]{some}$"}
        return {"pattern": f"^{some}$"}


class FormattedText(Text):
    """Text in a format that `regex` states: it validates the value and documents it."""

    regex: str
    error: str

    def clean(self, text: str) -> str:
        validate.Regexp(f"^{self.regex}$", error=self.error)(text)
        return text

    def value_schema(self) -> dict[str, Any]:
        return {"pattern": f"^{self.regex}$" if self.refuses_blank else f"^(?:{self.regex})?$"}


class LongText(Text):
    def __init__(self, **kwargs: Any):
        super().__init__(max_length=TEXT_LENGTH, multiline=True, **kwargs)


class Slug(FormattedText):
    regex = SLUG_REGEX
    error = "Lower-case letters, digits and single hyphens only."

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("allow_none", False)  # a slug is never cleared, only replaced
        super().__init__(max_length=SLUG_LENGTH, **kwargs)


class Email(Text):
    """A syntactically valid address, stored normalised (addresses are case-insensitive)."""

    def __init__(self, **kwargs: Any):
        super().__init__(max_length=EMAIL_LENGTH, **kwargs)

    def clean(self, text: str) -> str:
        try:
            return canonical_email(text)
        except EmailNotValidError as error:
            raise ValidationError("Not a valid email address.") from error

    def value_schema(self) -> dict[str, Any]:
        if self.refuses_blank:
            return {"format": "email", "description": SPECIAL_USE_DOMAINS}
        # "" clears an optional address, and "format" cannot say so.
        return {
            "description": SPECIAL_USE_DOMAINS,
            "anyOf": [{"format": "email"}, {"maxLength": 0}],
        }


class Phone(FormattedText):
    """Digits with the usual separators and an optional leading +."""

    regex = PHONE_REGEX
    error = "Digits, spaces and + ( ) . / - only."

    def __init__(self, **kwargs: Any):
        super().__init__(max_length=PHONE_LENGTH, **kwargs)


class Url(FormattedText):
    """An http(s) URL. marshmallow's URL validator decides; the documented `regex` is the
    part of what it takes that a client can check by pattern."""

    regex = URL_REGEX
    error = "Not a valid http(s) URL."

    def __init__(self, **kwargs: Any):
        super().__init__(max_length=URL_LENGTH, **kwargs)

    def clean(self, text: str) -> str:
        validate.URL(schemes={"http", "https"}, error=self.error)(text)
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


class Instant(fields.Field):
    """A point in time in a query (`since`, `until`): ISO 8601, `2026-11-23T10:00:00Z` or
    with an offset (UTC when it has none), or a date alone (that day in UTC).

    With `inclusive_end`, it is the last moment of what the text names, so that an upper
    bound includes it: `2026-11-23` the whole day, `10:00` the whole minute, a timestamp
    as the API writes them (milliseconds) the whole millisecond.
    """

    default_error_messages = {  # noqa: RUF012
        "invalid": "Not an ISO 8601 date or date and time (2026-11-23T10:00:00Z).",
        "no_such_day": "There is no such day.",
    }
    MAX_LENGTH = 40

    def __init__(self, *, inclusive_end: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.inclusive_end = inclusive_end

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        text = value.strip() if isinstance(value, str) else ""
        if len(text) > self.MAX_LENGTH or not INSTANT.fullmatch(text):
            raise self.make_error("invalid")
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as error:  # February 30th
            raise self.make_error("no_such_day") from error
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        try:
            if self.inclusive_end:
                moment += precision_of(text) - timedelta(microseconds=1)
            return moment.astimezone(UTC)
        except OverflowError:  # the end of year 9999, west of UTC: after every entry
            return datetime.max.replace(tzinfo=UTC)

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "string",
            "pattern": f"^{INSTANT_REGEX}$",
            "maxLength": self.MAX_LENGTH,
            "examples": ["2026-11-23T10:00:00Z", "2026-11-23"],
        }


def slug_of(resource: Any) -> str | None:
    return None if resource is None else resource.slug


class SlugOf(fields.String):
    """Output only: the slug of the related resource in the attribute (a location's region,
    a category's parent …), or null when there is none."""

    def __init__(self, **kwargs: Any):
        super().__init__(dump_only=True, allow_none=True, **kwargs)

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> str | None:
        return slug_of(value)


SHORTCUTS[SlugOf] = slug_of
