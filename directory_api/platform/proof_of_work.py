"""Proof of work for public forms: the ALTCHA protocol (v1), so its stock widget drops in.

A challenge is `{"algorithm": "SHA-256", "challenge", "maxnumber", "salt", "signature"}`:
`challenge` is the hex SHA-256 of `salt` followed by a secret number from 0 to
`maxnumber`, `signature` the hex HMAC-SHA256 of `challenge` under the service's key. The
salt carries parameters as a query (`<random>?location=x&expires=<unix>&`), so the
signature covers them; its closing `&` keeps a solver from moving digits of the number into
the last parameter. The client finds the number by trying them all and sends back
base64 of the JSON `{"algorithm", "challenge", "number", "salt", "signature"}`.

Checking a solution costs one SHA-256 and one HMAC, compared in constant time. Whether it
was used before is the caller's to know (platform/single_use.py). The `altcha` package
(the protocol's reference library) solves and checks these in the tests.
"""

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode

ALGORITHM = "SHA-256"
LIFETIME = timedelta(minutes=10)
MAX_PAYLOAD = 2048  # characters of base64: a solution is about 300
MAX_NUMBER = 10**12  # beyond any challenge's: the number's text stays short
HEX_DIGEST = re.compile("[0-9a-f]{64}")
MAX_SALT = 512
FIELDS = {"algorithm": str, "challenge": str, "number": int, "salt": str, "signature": str}


class Refused(Exception):
    """Not a solution this service accepts; `reason` says why, in words for the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Solution:
    challenge: str  # unique per challenge issued: what single use is kept on
    params: dict[str, str]  # the salt's parameters, covered by the signature
    expires: datetime

    @property
    def issued(self) -> datetime:
        return self.expires - LIFETIME


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _signature(key: bytes, challenge: str) -> str:
    return hmac.new(key, challenge.encode(), hashlib.sha256).hexdigest()


def create_challenge(
    key: bytes, params: dict[str, str], max_number: int, now: datetime | None = None
) -> dict[str, Any]:
    """A new challenge carrying `params`, valid for LIFETIME."""
    expires = int(((now or datetime.now(UTC)) + LIFETIME).timestamp())
    salt = f"{secrets.token_hex(12)}?{urlencode({**params, 'expires': expires})}&"
    challenge = _sha256(salt + str(secrets.randbelow(max_number + 1)))
    return {
        "algorithm": ALGORITHM,
        "challenge": challenge,
        "maxnumber": max_number,
        "salt": salt,
        "signature": _signature(key, challenge),
    }


def verify(payload: Any, keys: list[bytes], now: datetime | None = None) -> Solution:
    """The solution `payload` (the widget's base64 text) proves, signed under one of `keys`
    (the current one, then earlier ones still accepted); `Refused` otherwise."""
    if not isinstance(payload, str) or not payload or len(payload) > MAX_PAYLOAD:
        raise Refused("Not a solution: send the widget's value as it is.")
    try:
        data = json.loads(base64.b64decode(payload, validate=True))
    except (binascii.Error, ValueError, RecursionError) as error:  # nested a thousand deep
        raise Refused("Not a solution: send the widget's value as it is.") from error
    if not isinstance(data, dict) or any(
        type(data.get(name)) is not kind for name, kind in FIELDS.items()
    ):
        raise Refused("Not a solution: send the widget's value as it is.")
    challenge, salt, number = data["challenge"], data["salt"], data["number"]
    # What this service issues is ASCII (hex digests, a hex salt with its query): anything
    # else is no solution of its, and would not even hash or compare as text.
    if not all(HEX_DIGEST.fullmatch(data[name]) for name in ("challenge", "signature")) or not (
        salt.isascii() and len(salt) <= MAX_SALT
    ):
        raise Refused("Not a solution of a challenge of this service.")
    if (
        data["algorithm"] != ALGORITHM
        or not 0 <= number <= MAX_NUMBER
        or not any(
            hmac.compare_digest(_signature(key, challenge), data["signature"]) for key in keys
        )
        or not hmac.compare_digest(_sha256(salt + str(number)), challenge)
        or not salt.endswith("&")
    ):
        raise Refused("Not a solution of a challenge of this service.")
    query = salt.partition("?")[2][:-1]
    params = parse_qs(query, keep_blank_values=True)
    if any(len(values) != 1 for values in params.values()) or "expires" not in params:
        raise Refused("Not a solution of a challenge of this service.")
    try:
        expires = datetime.fromtimestamp(int(params["expires"][0]), UTC)
    except (ValueError, OverflowError, OSError) as error:
        raise Refused("Not a solution of a challenge of this service.") from error
    if expires <= (now or datetime.now(UTC)):
        raise Refused("The challenge expired: solve a new one.")
    return Solution(challenge, {name: values[0] for name, values in params.items()}, expires)
