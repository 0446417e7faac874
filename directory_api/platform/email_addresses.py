"""One spelling per e-mail address: the stored form of every address, and the check that
text is one.

E-mail uniqueness, sign-in look-ups, every per-address rate-limit key and the keyed hash of
a voter's address use `normalize_email`; the `Email` field (schemas/fields.py) stores what
`canonical_email` returns.
"""

import unicodedata

from email_validator import EmailNotValidError, validate_email
from flask import has_request_context

from .current import current_request

EMAIL_LENGTH = 254  # RFC 5321's limit on a path, less its angle brackets
MEMO = "directory_api.canonical_emails"  # the request's environ: its addresses, checked


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text.strip()).casefold()


def normalize_email(text: str) -> str:
    """One spelling per address (NFKC, case-folded, the domain decoded from IDNA):
    "ＡＮＮ@Example.com" is ann@example.com, ann@xn--bcher-kva.de is ann@bücher.de.

    Text that is no address is only folded.
    """
    try:
        return canonical_email(text)
    except EmailNotValidError:
        return _fold(text)


def canonical_email(text: str) -> str:
    """The normalised address; EmailNotValidError when `text` is not one.

    Kept for the rest of the request (a vote's address is read by its schema, its rate
    limit, its duplicate check and its receipt: the validator once, not four times), and
    no longer: a process keeps no address past the request that brought it."""
    memo = current_request().environ.setdefault(MEMO, {}) if has_request_context() else {}
    found = memo.get(text)
    if found is None:
        result = validate_email(_fold(text), check_deliverability=False)
        # The validator may re-normalise the domain (IDNA): fold again, so it is idempotent.
        found = memo[text] = _fold(result.normalized)
        memo[found] = found  # idempotent: the stored form, read again, is itself
    return found
