"""Things that may be used once across every process and instance: `use_once(key, until)`.

With `REDIS_URL` the marks are Redis keys (`SET NX` with their expiry: one round trip, and
they go by themselves). Without it they are rows of the database (`used_once`, an insert
that does nothing when the key is there), in the request's transaction; `purge_used_once`
deletes the expired ones (the outbox worker's housekeeping). Either way two requests racing
with one key: one wins, and a request whose transaction does not commit (refused for
another field, failed) leaves its keys unused: the row goes with the rollback, the Redis
key is deleted when the transaction ends (`LISTENERS`), so the client may send them again.
A Redis that does not answer raises `StoreUnavailable` (a 503, unless the caller can do
without the check).
"""

import contextlib
import functools
from datetime import datetime
from typing import Any

import redis
from flask import Flask, current_app
from sqlalchemy import String, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, SessionTransaction, mapped_column

from .extensions import db
from .timeouts import redis_options
from .types import UTCDateTime, utcnow

KEY_LENGTH = 64
# The Redis keys marked in a session's transaction that has not committed yet.
MARKED = "single_use_marked"
StoreUnavailable = redis.RedisError


class UsedOnce(db.Model):
    """A key used once, kept until it could no longer be used anyway."""

    __tablename__ = "used_once"

    key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


INSERTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def init_single_use(app: Flask) -> None:
    url = app.config.get("REDIS_URL")
    client = redis.Redis.from_url(url, **redis_options(app.config)) if url else None
    app.extensions["single_use_redis"] = client


def use_once(key: str, until: datetime) -> bool:
    """True the first time `key` (at most KEY_LENGTH characters) is used before `until`;
    False every time after."""
    if len(key) > KEY_LENGTH:  # the column's size: refused here on every database
        raise ValueError(f"a single-use key has at most {KEY_LENGTH} characters")
    client = current_app.extensions["single_use_redis"]
    if client is not None:
        seconds = max(int((until - utcnow()).total_seconds()) + 1, 1)
        name = f"{current_app.config['RATELIMIT_KEY_PREFIX']}:used-once:{key}"
        if not client.set(name, 1, nx=True, ex=seconds):
            return False
        db.session().info.setdefault(MARKED, []).append((client, name))
        return True
    connection = db.session.connection()
    marked = connection.execute(_mark(connection.dialect.name), {"key": key, "expires_at": until})
    return marked.first() is not None  # a row back: ours; none: the key was there


@functools.cache
def _mark(dialect: str) -> Any:
    """The insert of a mark that does nothing when the key is there, built once per
    database (building it and its cache key costs more than running it)."""
    table = UsedOnce.__table__
    # RETURNING, not the row count: drivers may not count an insert's rows (psycopg: -1).
    return INSERTS[dialect](table).on_conflict_do_nothing().returning(table.c.key)


def purge_used_once(now: datetime | None = None) -> int:
    """Delete the marks that expired (they guard nothing any more); how many."""
    return db.session.execute(
        delete(UsedOnce).where(UsedOnce.expires_at < (now or utcnow()))
    ).rowcount


def _committed(session: Session) -> None:
    """The transaction that used them committed: the Redis marks stay."""
    session.info.pop(MARKED, None)


def _ended(session: Session, transaction: SessionTransaction) -> None:
    """A transaction that ended without committing: its Redis marks are deleted, as a
    rollback deletes the rows (best effort: a Redis gone since keeps them, which refuses a
    retry, never admits a second use)."""
    if transaction.parent is not None:
        return
    for client, name in session.info.pop(MARKED, ()):
        with contextlib.suppress(redis.RedisError):
            client.delete(name)


# Registered by create_app (events.py).
LISTENERS = (
    (Session, "after_commit", _committed, {}),
    (Session, "after_transaction_end", _ended, {}),
)
