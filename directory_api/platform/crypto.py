"""Keys derived from the service's secrets, and the two things they protect.

- Outbox bodies at rest (they carry reset, invitation and e-mail-change links while
  pending): Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`) under a key derived
  from `OUTBOX_KEY`, else `SECRET_KEY`. Earlier secrets listed in `OUTBOX_OLD_KEYS` still
  decrypt, so a key can be rotated without losing queued mail (`flask outbox rekey`).
- A keyed hash of a voter's normalised address (HMAC-SHA256 under a key derived from
  `SECRET_KEY`), the one trace of the address that outlives retention: duplicate checks and
  `flask privacy erase` still find a redacted vote, and a database dump alone cannot be
  matched against a list of addresses.

Each key is derived with HKDF and its own label, so no key is the secret itself or usable
for another purpose.
"""

import base64
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import Flask, current_app

from .email_addresses import normalize_email


def derive_key(secret: str, purpose: str) -> bytes:
    """32 bytes for `purpose`, from any secret string (HKDF-SHA256)."""
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=f"directory-api {purpose}".encode()
    ).derive(secret.encode())


def _fernet(secret: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(derive_key(secret, "outbox body")))


def init_keys(app: Flask) -> None:
    secret = app.config.get("SECRET_KEY")
    current = app.config.get("OUTBOX_KEY") or secret
    if not current:
        raise RuntimeError("SECRET_KEY (or OUTBOX_KEY) is required to keep the outbox encrypted.")
    older = list(app.config.get("OUTBOX_OLD_KEYS") or [])
    if app.config.get("OUTBOX_KEY") and secret:
        older.append(secret)  # bodies queued before OUTBOX_KEY was set
    app.extensions["outbox_cipher"] = MultiFernet([_fernet(current), *map(_fernet, older)])
    app.extensions["email_hash_key"] = derive_key(secret or current, "vote email hash")


def _cipher() -> MultiFernet:
    return current_app.extensions["outbox_cipher"]


def encrypt(text: str) -> str:
    return _cipher().encrypt(text.encode()).decode("ascii")


def decrypt(token: str) -> str | None:
    """The text, or None when no configured key opens it (the key changed without
    OUTBOX_OLD_KEYS): the message then fails delivery, naming the cause, instead of
    stopping the queue."""
    try:
        return _cipher().decrypt(token.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        return None


def reencrypt(token: str) -> str | None:
    """The same text under the current key; None when no configured key opens it."""
    try:
        return _cipher().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError):
        return None


def email_hash(email: str) -> str:
    key = current_app.extensions["email_hash_key"]
    return hmac.new(key, normalize_email(email).encode(), hashlib.sha256).hexdigest()
