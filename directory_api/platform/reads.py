"""Round trips to PostgreSQL: a read pays for its statements only.

Reads (GET and HEAD: no view of either writes) run on PostgreSQL without a transaction,
on an engine of their own whose connections are in autocommit: psycopg sends no BEGIN
before the first statement and nothing is rolled back when the connection is returned, so
a list page is its statements alone instead of BEGIN, the statements and ROLLBACK. Under
READ COMMITTED, PostgreSQL's default, every statement already saw its own snapshot inside
the transaction, so the answers are the same. A flush during a read is refused (it would
not be atomic): a GET that writes is a bug the tests catch. An export, whose rows stream
from a server-side cursor, keeps its transaction (`read_in_transaction`).

Writes keep their transaction. SQLite is left as it is: its driver sends no BEGIN before a
read anyway. A request uses one connection of one pool, but each pool keeps its own idle
connections (README, Deploying: `threads + 5` per worker).

The pool pings a connection only after it sat idle (timeouts.py). When the server
restarted since, the first statement to meet a lost connection makes the pool replace
every connection it held; a read then runs that statement again on a new one, and a write
answers 503 (nothing of it was kept: the client retries).

A read's Core statements (`rows`, `first`, `scalar`) need no ORM session at all: they run
on the request's own connection, on either database (below).
"""

from collections.abc import Callable, Sequence
from typing import Any

from flask import Flask, has_request_context, request
from flask.globals import _cv_request  # the request context: has_request_context() asks it
from flask_sqlalchemy import record_queries
from flask_sqlalchemy.session import Session
from sqlalchemy import Engine, Result, Row, engine_from_config, event, exc

from .application import View, say_of_view, view_says
from .current import current_application, current_request
from .timeouts import NoAnswer, bound_postgresql

READ_METHODS = frozenset({"GET", "HEAD"})
TWIN = "_for_reads"  # where an engine keeps its twin for reads
READ_CONNECTION = "read_connection"  # the request context's attribute that holds it (below)


def add_read_engine(app: Flask, engine: Engine) -> None:
    """Give PostgreSQL's `engine` a twin for reads: the same database and settings, its
    connections in autocommit from the start. Its own pool, so no connection switches
    between the two modes (psycopg's switch, and the switch back when the connection is
    returned, cost more than the BEGIN and ROLLBACK they save); nothing to roll back when
    one is returned. It is disposed with `engine`."""
    # Built as Flask-SQLAlchemy builds its engine (the same options, string values read,
    # echo and recorded queries as configured), with its own two settings on top.
    echo = app.config.get("SQLALCHEMY_ECHO", False)
    options = {"echo": echo, "echo_pool": echo, **app.config["SQLALCHEMY_ENGINE_OPTIONS"]}
    options |= {"url": engine.url, "isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None}
    reads = engine_from_config(options, prefix="")
    if app.config.get("SQLALCHEMY_RECORD_QUERIES"):
        record_queries._listen(reads)  # what Flask-SQLAlchemy does for its own engine
    bound_postgresql(app, reads)
    engine.__dict__[TWIN] = reads

    @event.listens_for(engine, "engine_disposed")
    def dispose_reads(_engine: Engine) -> None:
        reads.dispose()


def autocommit_engine(engine: Engine) -> Engine:
    """The engine for reads: `engine`'s twin on PostgreSQL, else `engine` itself."""
    return engine.__dict__.get(TWIN, engine)


IN_TRANSACTION = "reads_in_transaction"  # a view's flag (`read_in_transaction`)


def reading() -> bool:
    """Whether the session serves a read without a transaction: a GET or HEAD whose view
    does not read in one."""
    return (
        has_request_context()
        and current_request().method in READ_METHODS
        and not view_says(IN_TRANSACTION)
    )


def read_in_transaction(view: View) -> View:
    """Mark `view`: its reads keep a transaction (a server-side cursor, as an export's,
    lives in one). Known from the request's URL, so every statement of its requests goes
    to the same engine from the first on, whoever makes it (the caller's lookup, before the
    view runs): one connection, not one of each pool."""
    return say_of_view(view, IN_TRANSACTION)


class ReadAwareSession(Session):
    """Flask-SQLAlchemy's session, on the autocommit engine while serving a read."""

    def get_bind(self, mapper: Any = None, clause: Any = None, bind: Any = None, **kwargs: Any):
        engine = super().get_bind(mapper, clause=clause, bind=bind, **kwargs)
        return_read_connection()  # the session takes over, if a Core read went first
        reads = engine.__dict__.get(TWIN)  # asked first: SQLite has none
        return reads if reads is not None and reading() else engine

    def _execute_internal(self, *args: Any, **kwargs: Any) -> Any:
        """Every statement of the ORM passes here (execute, scalar(s), get, loads). A read
        that finds its connection lost (the server restarted since the connection was last
        pinged) runs again once on a new one: in autocommit nothing else was lost with it.
        A write is not retried (its transaction is gone: a 503 the client may retry), nor a
        round trip that got no answer (that waits out another timeout)."""
        try:
            return super()._execute_internal(*args, **kwargs)
        except exc.DBAPIError as error:
            if not (reading() and lost_meanwhile(error)):
                raise
            self.rollback()
            return super()._execute_internal(*args, **kwargs)


# Core statements of a read, without the ORM session -------------------------------------
#
# A read's Core statements (rows, not ORM objects: the path's location, a page's rows and
# count) need no ORM session, whose making, transaction and closing cost more than the
# statements themselves (0.25 M instructions a request, callgrind, against 0.18 M for one
# statement through it). They run on a connection of the request's own, checked out at
# the first and returned when the request ends; if the session is used afterwards, the
# connection goes back first (`ReadAwareSession.get_bind`), so a request holds one
# connection at a time. Their results are fetched at once, never left on a cursor.
# Outside a read, or once the session holds a connection, they run through the session.
# The connection is kept on the request's context (Flask's own object for one request) and
# returned at its end (a teardown).


def rows(statement: Any, params: Any = None) -> Sequence[Row]:
    return _run(statement, params, Result.all)


def first(statement: Any, params: Any = None) -> Row | None:
    return _run(statement, params, Result.first)


def scalar(statement: Any, params: Any = None) -> Any:
    return _run(statement, params, Result.scalar)


def _run(statement: Any, params: Any, fetch: Callable[[Result], Any]) -> Any:
    db = current_application().extensions["sqlalchemy"]  # extensions.db (it imports this module)
    sessions = db.session.registry  # asked without making one
    if (sessions.has() and sessions().in_transaction()) or not reading():
        return fetch(db.session.execute(statement, params))
    context = _cv_request.get()  # this request's own (a request within it has another)
    connection = getattr(context, READ_CONNECTION, None)
    if connection is None:
        connection = autocommit_engine(db.engine).connect()
        setattr(context, READ_CONNECTION, connection)
    try:
        return fetch(connection.execute(statement, params))
    except exc.DBAPIError as error:
        if not lost_meanwhile(error):  # as the session's reads (above)
            raise
        connection.rollback()
        return fetch(connection.execute(statement, params))


def return_read_connection(_error: BaseException | None = None) -> None:
    """The request's connection for Core reads back to the pool (at the request's end)."""
    context = _cv_request.get(None)
    connection = getattr(context, READ_CONNECTION, None)
    if connection is not None:
        setattr(context, READ_CONNECTION, None)
        connection.close()


def lost_meanwhile(error: exc.DBAPIError) -> bool:
    """Whether a read's statement met a connection lost since it was last used (run it once
    more on a new one), rather than one that got no answer (that would wait again)."""
    return error.connection_invalidated and not isinstance(error.orig, NoAnswer)


def refuse_writes_in_reads(session: Any, _context: Any, _instances: Any) -> None:
    if reading() and (session.new or session.dirty or session.deleted):
        raise RuntimeError(f"{request.method} {request.path} tried to write: reads are not atomic")


# Registered by create_app (events.py).
LISTENERS = ((ReadAwareSession, "before_flush", refuse_writes_in_reads, {}),)
