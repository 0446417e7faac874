"""Password hashing (Argon2id) and one-time token material."""

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from flask import Flask, current_app


def init_password_hasher(app: Flask) -> None:
    hasher = PasswordHasher(
        time_cost=app.config["ARGON2_TIME_COST"],
        memory_cost=app.config["ARGON2_MEMORY_COST"],
        parallelism=app.config["ARGON2_PARALLELISM"],
    )
    app.extensions["password_hasher"] = hasher
    # Checked against when the account is unknown, so a miss costs as much as a hit.
    app.extensions["dummy_password_hash"] = hasher.hash(secrets.token_urlsafe(16))


def _hasher() -> PasswordHasher:
    return current_app.extensions["password_hasher"]


def hash_password(password: str) -> str:
    return _hasher().hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when `password` matches; with no hash, still spends one verification."""
    try:
        return (
            _hasher().verify(
                password_hash or current_app.extensions["dummy_password_hash"], password
            )
            and password_hash is not None
        )
    except (VerificationError, InvalidHashError):
        return False


def password_needs_rehash(password_hash: str) -> bool:
    return _hasher().check_needs_rehash(password_hash)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A 256-bit URL-safe token and the hash that is stored in its place."""
    token = secrets.token_urlsafe(32)
    return token, hash_token(token)
