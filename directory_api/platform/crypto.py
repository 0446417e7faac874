"""Keys derived from the service's secrets, and the two things they protect.

- Outbox bodies at rest (they carry reset, invitation and e-mail-change links while
  pending): Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`) under a key derived
  from `OUTBOX_KEY`, else `SECRET_KEY`. Earlier secrets listed in `OUTBOX_OLD_KEYS` still
  decrypt, so a key can be rotated without losing queued mail (`flask outbox rekey`).
- A keyed hash of a voter's normalised address (HMAC-SHA256 under a key derived from
  `PII_HASH_KEY`, else `SECRET_KEY`), the one trace of the address that outlives
  retention: duplicate checks and `flask privacy erase` still find a redacted vote, and a
  database dump alone cannot be matched against a list of addresses.

`SECRET_KEY_FALLBACKS` (Flask's setting) lists earlier secret keys while one is rotated:
what was made under them (bodies, hashes; sessions and challenges elsewhere, through
`keys_for`) is still accepted.

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


def secrets_of(app: Flask) -> list[str]:
    """SECRET_KEY, then the earlier ones still accepted (SECRET_KEY_FALLBACKS)."""
    found = [app.config.get("SECRET_KEY"), *(app.config.get("SECRET_KEY_FALLBACKS") or [])]
    return list(dict.fromkeys(secret for secret in found if secret))


def keys_for(app: Flask, purpose: str) -> list[bytes]:
    """The keys for `purpose`: the current one first, then those derived from the
    fallback secrets (what was made under them is still accepted)."""
    return [derive_key(secret, purpose) for secret in secrets_of(app)]


def init_keys(app: Flask) -> None:
    secrets = secrets_of(app)
    current = app.config.get("OUTBOX_KEY") or (secrets[0] if secrets else None)
    if not current:
        raise RuntimeError("SECRET_KEY (or OUTBOX_KEY) is required to keep the outbox encrypted.")
    # Bodies queued under an earlier key: OUTBOX_OLD_KEYS, the secret keys (before
    # OUTBOX_KEY was set, or before SECRET_KEY was rotated).
    older = [*(app.config.get("OUTBOX_OLD_KEYS") or []), *secrets]
    older = [key for key in dict.fromkeys(older) if key != current]
    app.extensions["outbox_cipher"] = MultiFernet([_fernet(current), *map(_fernet, older)])
    # Voters' address hashes: under PII_HASH_KEY when set, else SECRET_KEY. Those made
    # under PII_HASH_OLD_KEYS and the secret keys (before PII_HASH_KEY, or before a
    # rotation) still match, the latter until PII_HASH_MATCH_SECRET_KEYS is turned off.
    own = app.config.get("PII_HASH_KEY")
    hashing = [own or secrets[0], *(app.config.get("PII_HASH_OLD_KEYS") or [])]
    if not own or app.config.get("PII_HASH_MATCH_SECRET_KEYS", True):
        hashing += secrets
    app.extensions["email_hash_keys"] = [
        derive_key(secret, "vote email hash") for secret in dict.fromkeys(hashing) if secret
    ]


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
    """The keyed hash a vote keeps of its address, under the current key."""
    key = current_app.extensions["email_hash_keys"][0]
    return hmac.new(key, normalize_email(email).encode(), hashlib.sha256).hexdigest()


def email_hashes(email: str) -> list[str]:
    """Every hash an address's votes may hold: under the current key first, then under
    the earlier ones still accepted (one, when no key was rotated)."""
    address = normalize_email(email).encode()
    return [
        hmac.new(key, address, hashlib.sha256).hexdigest()
        for key in current_app.extensions["email_hash_keys"]
    ]
