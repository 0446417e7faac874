"""Personal API tokens as strings: their format, their hash, and reading one from a request.

A token is `<prefix>` + 30 random base62 characters + the base62 CRC32 of those (6
characters, zero-padded): the fixed prefix and the checksum let secret scanners recognise a
leaked token offline, and let this service refuse a mistyped or made-up one before any
database read. Only its SHA-256 is stored; its first 12 characters are kept for display.
"""

import hashlib
import secrets
import string
import zlib

from flask import Request

from .errors import abort

ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase  # base62
RANDOM_LENGTH = 30  # 30 × log2(62) ≈ 178 bits
CHECKSUM_LENGTH = 6  # 62**6 > 2**32: a CRC32 fits
SHOWN_LENGTH = 12  # what lists show of a token, to tell tokens apart
MAX_HEADER = 200  # an Authorization header longer than any token could be is refused unread


def base62(number: int, width: int) -> str:
    digits = []
    for _ in range(width):
        number, digit = divmod(number, 62)
        digits.append(ALPHABET[digit])
    return "".join(reversed(digits))


def checksum(random_part: str) -> str:
    return base62(zlib.crc32(random_part.encode()), CHECKSUM_LENGTH)


def new_token(prefix: str) -> str:
    random_part = "".join(secrets.choice(ALPHABET) for _ in range(RANDOM_LENGTH))
    return prefix + random_part + checksum(random_part)


def well_formed(token: str, prefix: str) -> bool:
    """Whether `token` has the format and its checksum holds (no database read)."""
    if len(token) != len(prefix) + RANDOM_LENGTH + CHECKSUM_LENGTH or not token.startswith(prefix):
        return False
    body = token[len(prefix) :]
    if any(character not in ALPHABET for character in body):
        return False
    random_part, check = body[:RANDOM_LENGTH], body[RANDOM_LENGTH:]
    return secrets.compare_digest(checksum(random_part), check)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def shown_part(token: str) -> str:
    return token[:SHOWN_LENGTH]


def bearer_of(request: Request) -> str | None:
    """The token of an `Authorization: Bearer` header; None without one (another scheme,
    such as the Basic of a staging site's proxy, is not a token and is left alone). A
    Bearer header no token could fill is a 401 (never a fall back to a cookie); a token in
    the query string is a 400 (it would land in logs and browser histories)."""
    if b"access_token" in request.query_string and "access_token" in request.args:
        abort(400, "Send a token in the Authorization header, never in the URL.")
    header = request.environ.get("HTTP_AUTHORIZATION")  # request.headers: a KeyError when none
    if header is None:
        return None
    scheme, token = [*header.split(None, 1), "", ""][:2]  # a space or a tab between
    if scheme.lower() != "bearer":
        return None
    if not token.strip() or len(header) > MAX_HEADER:
        abort(
            401,
            "The Authorization header must be `Bearer <token>`.",
            headers={"WWW-Authenticate": 'Bearer error="invalid_request"'},
        )
    return token.strip()
