"""Round trips to PostgreSQL: a read pays for its statements only.

Reads (GET and HEAD: no view of either writes) run on PostgreSQL without a transaction:
psycopg in autocommit sends no BEGIN before the first statement, and the pool's rollback
when the connection is returned is then a no-op, so a list page is its statements alone
instead of BEGIN, the statements and ROLLBACK. Under READ COMMITTED, PostgreSQL's default,
every statement already saw its own snapshot inside the transaction, so the answers are
the same. A flush during a read is refused (it would not be atomic): a GET that writes is a
bug the tests catch. An export, whose rows stream from a server-side cursor, keeps its
transaction (`read_in_transaction`).

Writes keep their transaction. SQLite is left as it is: its driver sends no BEGIN before a
read, and switching its isolation on every checkout would cost a PRAGMA.

The pool checks a connection before lending it (a round trip) only when it has been idle
for `DATABASE_PING_AFTER` seconds: a busy pool's connections were just used. A connection
that dies between two close requests fails the one request that meets it (a 503, like any
lost connection), and the pool then replaces every connection it held.
"""

import time
from typing import Any
from weakref import WeakKeyDictionary

from flask import g, has_request_context, request
from flask_sqlalchemy.session import Session
from sqlalchemy import Engine, event, exc

READ_METHODS = frozenset({"GET", "HEAD"})
_autocommit: WeakKeyDictionary[Engine, Engine] = WeakKeyDictionary()


def autocommit_engine(engine: Engine) -> Engine:
    """`engine` for reads: the same pool, in autocommit on PostgreSQL (made once)."""
    found = _autocommit.get(engine)
    if found is None:
        found = engine
        if engine.dialect.name == "postgresql":
            found = engine.execution_options(isolation_level="AUTOCOMMIT")
        _autocommit[engine] = found
    return found


def reading() -> bool:
    """Whether the session serves a read without a transaction."""
    return (
        has_request_context()
        and request.method in READ_METHODS
        and not g.get("read_in_transaction")
    )


def read_in_transaction() -> None:
    """Serve this read in a transaction after all (a server-side cursor, as an export's,
    lives in one). Call it before the request's first statement."""
    g.read_in_transaction = True


class ReadAwareSession(Session):
    """Flask-SQLAlchemy's session, on the autocommit engine while serving a read."""

    def get_bind(self, mapper: Any = None, clause: Any = None, bind: Any = None, **kwargs: Any):
        engine = super().get_bind(mapper, clause=clause, bind=bind, **kwargs)
        return autocommit_engine(engine) if reading() else engine


def refuse_writes_in_reads(session: Any, _context: Any, _instances: Any) -> None:
    if reading() and (session.new or session.dirty or session.deleted):
        raise RuntimeError(f"{request.method} {request.path} tried to write: reads are not atomic")


event.listen(ReadAwareSession, "before_flush", refuse_writes_in_reads)


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
            raise exc.DisconnectionError(str(error)) from error
        if not alive:
            raise exc.DisconnectionError("the connection did not answer its ping")
