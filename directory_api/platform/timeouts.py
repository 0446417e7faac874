"""Bounded waits on every backing service, so a stalled dependency is a quick 503, not a hang.

PostgreSQL: libpq's `connect_timeout` bounds connecting (TCP and the start-up exchange);
`statement_timeout` makes the server give up on a slow statement; and the client gives up
on any round trip that gets no answer within the statement timeout plus a margin. Only the
last one helps when the server (or the network to it) accepts and then never answers: the
server-side timeout never fires there, and TCP keeps acknowledging. The pool's ping on
checkout (only of a connection idle for `DATABASE_PING_AFTER` s: a busy pool's connections
were just used) waits no longer than a connect would, and the pool's checkout timeout
bounds the wait for a free connection when every one is busy. Worst case for a request
that meets a frozen server: ping + reconnect, or one unanswered statement, 6 s with the
defaults.

Redis (sessions and rate limits): socket connect and read timeouts, and one immediate retry
instead of redis-py's default three with backoff (which turned a frozen Redis into 5–12 s
per request).

SMTP has its own timeout in `outbox.py`; requests never talk to SMTP.

Behind PgBouncer in transaction pooling (`DATABASE_POOL_MODE=transaction`) a connection
is the pooler's, not one server session: its start-up parameters never reach PostgreSQL
(PgBouncer refuses `options`) and a prepared statement may meet another server connection.
So psycopg prepares nothing and the statement timeout is left to the pooler's
`connect_query` (deploy/pgbouncer.ini) or the role; the first connection checks it and
warns when it differs. The client's bound on every round trip holds in both modes.
"""

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from flask import Flask
from psycopg.errors import _WaitTimeout
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import Connection, Engine, event, exc

# Added to the statement timeout before the client stops waiting for an answer, so that a
# merely slow statement is cancelled by the server (a clean error) rather than cut off.
CLIENT_MARGIN_SECONDS = 1.0

log = logging.getLogger(__name__)


class NoAnswer(psycopg.OperationalError):
    """A round trip that got no answer in time (the connection is closed with it)."""


class BoundedConnection(psycopg.Connection):
    """A psycopg connection whose every round trip waits at most `round_trip_timeout`."""

    round_trip_timeout: float | None = None

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is None:
            timeout = self.round_trip_timeout
        try:
            return super().wait(gen, interval, timeout)
        except _WaitTimeout as error:
            # Mid-exchange, the connection can never be used again: closing it makes
            # SQLAlchemy see a disconnect and drop it from the pool.
            self.close()
            raise NoAnswer(
                f"no answer from the database within {self.round_trip_timeout:g} s"
            ) from error


def database_engine_options(config: dict[str, Any], url: str) -> dict[str, Any]:
    """Engine options for `url`: the configured ones over the timeouts' defaults."""
    options: dict[str, Any] = {}
    if url.startswith("postgresql"):
        options["pool_timeout"] = config["DATABASE_POOL_TIMEOUT"]
        options["connect_args"] = {"connect_timeout": config["DATABASE_CONNECT_TIMEOUT"]}
        if config.get("DATABASE_POOL_MODE") == "transaction":
            # A statement prepared on one server connection is unknown to the next.
            options["connect_args"]["prepare_threshold"] = None
    return {**options, **(config.get("SQLALCHEMY_ENGINE_OPTIONS") or {})}


def bound_postgresql(app: Flask, engine: Engine) -> None:
    """Connect through BoundedConnection, with the server's statement timeout set at start-up
    (the `options` start-up parameter: no extra round trip per connection), or, behind a
    transaction pooler, checked once against the pooler's."""
    statement_timeout = float(app.config["DATABASE_STATEMENT_TIMEOUT"])
    round_trip = statement_timeout + CLIENT_MARGIN_SECONDS if statement_timeout > 0 else None
    pooled = app.config.get("DATABASE_POOL_MODE") == "transaction"
    if pooled:
        event.listen(engine, "connect", _check_statement_timeout(statement_timeout), once=True)

    @event.listens_for(engine, "do_connect")
    def connect(_dialect: Any, _record: Any, cargs: tuple, cparams: dict) -> BoundedConnection:
        if statement_timeout > 0 and not pooled:
            setting = f"-c statement_timeout={int(statement_timeout * 1000)}"
            cparams["options"] = f"{cparams.get('options', '')} {setting}".strip()
        connection = BoundedConnection.connect(*cargs, **cparams)
        connection.round_trip_timeout = round_trip
        return connection

    # The pool's liveness check on checkout: a server that cannot answer a ping as fast as
    # it would accept a connection is treated as gone (then the reconnect is bounded too).
    ping = engine.dialect.do_ping
    ping_timeout = float(app.config["DATABASE_CONNECT_TIMEOUT"])

    def bounded_ping(dbapi_connection: BoundedConnection) -> bool:
        usual = dbapi_connection.round_trip_timeout
        dbapi_connection.round_trip_timeout = ping_timeout
        try:
            return ping(dbapi_connection)
        finally:
            dbapi_connection.round_trip_timeout = usual

    engine.dialect.do_ping = bounded_ping  # type: ignore[method-assign]
    ping_when_idle(engine, float(app.config["DATABASE_PING_AFTER"]))


def _check_statement_timeout(wanted: float) -> Any:
    """A `connect` listener warning when the server's statement timeout (set by a transaction
    pooler or the role, not by the app) is not `wanted` seconds."""

    def check(dbapi_connection: psycopg.Connection, _record: Any) -> None:
        row = dbapi_connection.execute(
            "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'"
        ).fetchone()
        if not dbapi_connection.autocommit:
            dbapi_connection.rollback()
        found = int(row[0]) if row else 0
        if found != int(wanted * 1000):
            log.warning(
                "DATABASE_POOL_MODE=transaction: the server's statement_timeout is %d ms where "
                "DATABASE_STATEMENT_TIMEOUT asks for %d ms; set it in PgBouncer's connect_query "
                "(deploy/pgbouncer.ini) or with ALTER ROLE … SET statement_timeout",
                found,
                int(wanted * 1000),
            )

    return check


def ping_when_idle(engine: Engine, ping_after: float) -> None:
    """Check a pooled connection before lending it only if it sat idle `ping_after` s."""
    ping = engine.dialect.do_ping

    @event.listens_for(engine, "checkin")
    def returned(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def lent(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned_at = record.info.get("returned_at")
        if returned_at is None or time.monotonic() - returned_at < ping_after:
            return  # new (just connected), or used a moment ago
        try:
            alive = ping(dbapi_connection)
        except Exception as error:  # the pool takes any failure as a dead connection
            raise exc.InvalidatePoolError(str(error)) from error
        if not alive:
            raise exc.InvalidatePoolError("the connection did not answer its ping")


@contextmanager
def unbounded(connection: Connection) -> Iterator[None]:
    """Lift the statement bounds for maintenance on `connection` (migrations, bulk loads,
    recounts), until its transaction ends: the bounds are for serving requests."""
    dbapi_connection = connection.connection.dbapi_connection
    if not isinstance(dbapi_connection, BoundedConnection):
        yield
        return
    connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
    usual = dbapi_connection.round_trip_timeout
    dbapi_connection.round_trip_timeout = None
    try:
        yield
    finally:
        dbapi_connection.round_trip_timeout = usual


def redis_options(config: dict[str, Any]) -> dict[str, Any]:
    """Client options for every Redis the app talks to (sessions, rate limits)."""
    return {
        "socket_connect_timeout": config["REDIS_CONNECT_TIMEOUT"],
        "socket_timeout": config["REDIS_TIMEOUT"],
        "retry": Retry(NoBackoff(), retries=1),
    }
