"""`Idempotency-Key`: a retried POST gets its first answer again and changes nothing more.

A client that lost the answer (a dropped connection, a worker that died after its commit)
retries with the same key. The first answer, its status and JSON body, is written in the
same transaction as the rows it answers for, so either both exist or neither does. Within
24 hours, a request with the same key and scope (method and path) and the same body gets
that answer again; another body is a 422. An older record counts for nothing and is
replaced. Two requests racing with one key both insert the record: the unique index makes
the second wait for the first, fail, roll back its own rows and answer the first's record.

The key is kept only as its SHA-256, the request only as a fingerprint: the SHA-256 of the
key, method, path and body in a canonical form (JSON with sorted keys). Form fields and a
JSON object with the same string fields are one body, since the view reads them alike.

A view adopts it with `@endpoint(idempotent=True)`: the view adds its rows to the session
and returns its answer without committing; `idempotent` commits (with the record when a key
was sent).
"""

import contextlib
import hashlib
import logging
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from typing import Any

import orjson
from flask import Response, make_response, request
from flask_login import current_user
from sqlalchemy import JSON, Index, Integer, String, UniqueConstraint, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from .bodies import FORM_MIMETYPES
from .errors import abort
from .extensions import db
from .types import IdMixin, UTCDateTime, utcnow

log = logging.getLogger(__name__)

SCOPE_LENGTH = 255
SHA256_HEX = 64


class IdempotencyRecord(IdMixin, db.Model):
    """The first answer to a request under one key, written with the rows it answers for."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        UniqueConstraint("scope", "key_hash"),
        Index("ix_idempotency_keys_created_at", "created_at"),  # the purge of expired keys
    )

    # Method and path (`POST /locations/harbour/votes/submit/employer`), and the caller's
    # account when signed in: a key belongs to one.
    scope: Mapped[str] = mapped_column(String(SCOPE_LENGTH))
    key_hash: Mapped[str] = mapped_column(String(SHA256_HEX))  # SHA-256 of the key
    # SHA-256 of key, method, path and canonical body: tells "the same request" apart.
    fingerprint: Mapped[str] = mapped_column(String(SHA256_HEX))
    status: Mapped[int] = mapped_column(Integer)
    body: Mapped[Any] = mapped_column(JSON)  # the answer's JSON (no personal data in these)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


HEADER = "Idempotency-Key"
MIN_LENGTH = 8
MAX_LENGTH = 128
VALID_KEY = re.compile(f"[!-~]{{{MIN_LENGTH},{MAX_LENGTH}}}")  # visible ASCII, no space
LIFETIME = timedelta(hours=24)

# The header as the OpenAPI document (openapi.py) describes it on every view that takes it.
HEADER_PARAMETER = {
    "name": HEADER,
    "in": "header",
    "required": False,
    "description": (
        "A key you choose for this request (8 to 128 visible ASCII characters, e.g. a "
        "UUID). Repeated within 24 hours with the same body, it answers the first answer "
        "again and stores or sends nothing new; with another body, 422."
    ),
    "schema": {
        "type": "string",
        "minLength": MIN_LENGTH,
        "maxLength": MAX_LENGTH,
        "pattern": f"^[!-~]{{{MIN_LENGTH},{MAX_LENGTH}}}$",
    },
}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def request_key() -> str | None:
    """The request's key; None without the header, 422 when it is not a valid key."""
    key = request.headers.get(HEADER)
    if key is not None and not VALID_KEY.fullmatch(key):
        abort(
            422,
            f"The {HEADER} header is invalid.",
            errors={HEADER: [f"Must be {MIN_LENGTH} to {MAX_LENGTH} visible ASCII characters."]},
        )
    return key


def request_scope() -> str:
    """Method and path, one per endpoint and target (a trailing slash makes no difference),
    and for a signed-in caller their account: two moderators who chose one key each get
    their own answer (as keys are per account at Stripe)."""
    # The account's id (never `get_id()`: Flask-Login's id here is the session token).
    caller = f" as {current_user.id}" if current_user.is_authenticated else ""
    scope = f"{request.method} {request.path.rstrip('/') or '/'}{caller}"
    if len(scope) > SCOPE_LENGTH:
        return f"{request.method} sha256:{sha256(request.path + caller)}"
    return scope


def canonical_body() -> bytes:
    """The body as the view reads it, in one spelling: form fields (a repeated one as a list)
    or JSON, with sorted keys. A body that is not readable so (broken JSON, or too deeply
    nested to encode again; the view refuses both) stands for its own bytes."""
    if request.mimetype in FORM_MIMETYPES:
        data: Any = {
            name: values[0] if len(values) == 1 else values for name, values in request.form.lists()
        }
    else:
        data = request.get_json(silent=True)
    if data is not None:
        with contextlib.suppress(orjson.JSONEncodeError):
            return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    return b"bytes:" + request.get_data()


def fingerprint(key: str, scope: str) -> str:
    """SHA-256 of key, scope and body: the same request, without keeping any of it."""
    digest = hashlib.sha256()
    for part in (key.encode(), scope.encode(), canonical_body()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def expiry(now: datetime | None = None) -> datetime:
    """Records created before this have expired."""
    return (now or utcnow()) - LIFETIME


def find_record(scope: str, key_hash: str) -> IdempotencyRecord | None:
    return db.session.scalar(
        select(IdempotencyRecord).where(
            IdempotencyRecord.scope == scope, IdempotencyRecord.key_hash == key_hash
        )
    )


def replay(record: IdempotencyRecord, request_fingerprint: str) -> Response:
    """The recorded answer, if the request is the one it answered; else 422."""
    if record.fingerprint != request_fingerprint:
        abort(
            422,
            f"This {HEADER} was used for another request within the last 24 hours.",
            errors={HEADER: ["Already used with another body; choose a new key."]},
        )
    log.info("idempotent repeat of %s: the first answer (%s) again", record.scope, record.status)
    return make_response((record.body, record.status))


def idempotent(view: Callable[..., Any]) -> Callable[..., Any]:
    """Honour `Idempotency-Key` on a view that returns JSON; the decorator commits for it."""

    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = request_key()
        if key is None:
            response = make_response(view(*args, **kwargs))
            db.session.commit()
            return response

        scope, key_hash = request_scope(), sha256(key)
        request_fingerprint = fingerprint(key, scope)
        earlier = find_record(scope, key_hash)
        if earlier is not None:
            if earlier.created_at >= expiry():
                return replay(earlier, request_fingerprint)
            db.session.execute(
                delete(IdempotencyRecord).where(
                    IdempotencyRecord.id == earlier.id, IdempotencyRecord.created_at < expiry()
                )
            )

        response = make_response(view(*args, **kwargs))
        db.session.add(
            IdempotencyRecord(
                scope=scope,
                key_hash=key_hash,
                fingerprint=request_fingerprint,
                status=response.status_code,
                body=response.get_json(silent=True),
            )
        )
        try:
            db.session.commit()
        except IntegrityError:
            # Another request with this key committed first (PostgreSQL made this insert wait
            # for it): keep nothing of ours and answer as it did.
            db.session.rollback()
            winner = find_record(scope, key_hash)
            if winner is None or winner.created_at < expiry():
                raise  # some other constraint: the usual 409
            return replay(winner, request_fingerprint)
        return response

    return wrapper


def purge_expired_idempotency_keys(now: datetime | None = None) -> int:
    """Delete records older than 24 hours (they answer nothing any more); the count deleted."""
    deleted = db.session.execute(
        delete(IdempotencyRecord).where(IdempotencyRecord.created_at < expiry(now))
    ).rowcount
    db.session.commit()
    return deleted
