"""The password rules of API.md: 10–128 characters, not the e-mail, no composition rules."""

from typing import Any

from marshmallow import ValidationError, fields

MIN_PASSWORD = 10
MAX_PASSWORD = 128


def password_problems(password: str, email: str | None = None) -> list[str]:
    problems = []
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        problems.append(f"Must be {MIN_PASSWORD} to {MAX_PASSWORD} characters long.")
    if email and password.strip().lower() == email.strip().lower():
        problems.append("Must not be the e-mail address.")
    return problems


class Password(fields.String):
    """A new password (kept exactly as typed: no trimming)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        password = super()._deserialize(value, attr, data, **kwargs)
        problems = password_problems(password)
        if problems:
            raise ValidationError(problems)
        return password
