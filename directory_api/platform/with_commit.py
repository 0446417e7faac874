"""Writes that travel with the COMMIT (PostgreSQL): one round trip for a transaction's
writes, however many statements they are.

A write whose result nobody reads need not be sent the moment it is made: an INSERT
without RETURNING (the ORM's inserts, whose keys are made here), or an UPDATE or upsert
marked `WAITS` (the stored counts a flush keeps; an ORM update is never held, since the
ORM reads how many rows it matched). Once a transaction calls `send_with_commit`, such
writes wait, each with its values written into its SQL by psycopg (as its `ClientCursor`
quotes them), and go to the server in one message with the COMMIT: PostgreSQL runs a
message of several statements in turn and stops at the first that fails, so the
transaction keeps all of them or none.

- Any other statement (a read, an ORM update, a savepoint) sends the waiting writes first,
  in their own round trip: what it reads or changes sees them, and their order holds.
- A write that fails is known at the commit, not at the flush: the commit raises the
  database's error as SQLAlchemy names it (an IntegrityError is a 409 as ever, and
  `Idempotency-Key`'s race is caught where it always was). Its statement reads
  `-- writes sent with COMMIT`: the SQL, which holds the values, never reaches a log.
- A rollback drops the writes, never sent. The waiting list lives with the connection only
  until its transaction ends (and is dropped when the pool takes the connection back).
- Opt-in, per transaction: code that catches a write's error at its flush (a unique slug
  taken) must not use it. SQLite is left as it is (in-process: no round trip to save).
"""

from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, event, exc
from sqlalchemy.engine.interfaces import ExecutionContext
from sqlalchemy.orm import Session

WAITING = "writes_sent_with_commit"
# The execution option that lets an UPDATE (or an upsert) wait for the commit: its
# result (how many rows) is read by no one.
WAITS = {"waits_for_commit": True}
SENT = "-- writes sent with COMMIT"


def send_with_commit(session: Session) -> None:
    """Hold this transaction's writes that may wait until its commit, then send them with it
    (on PostgreSQL; elsewhere nothing changes)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.info.setdefault(WAITING, [])


def may_wait(context: ExecutionContext) -> bool:
    compiled = context.compiled
    if compiled is None or compiled.effective_returning:
        return False
    return bool(compiled.isinsert or context.execution_options.get("waits_for_commit"))


def _execute(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    return _held(cursor, statement, (parameters,), context)


def _executemany(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    return _held(cursor, statement, parameters, context)


def _execute_no_params(cursor: Any, statement: str, context: Any) -> bool:
    return _held(cursor, statement, (None,), context)


def _held(cursor: Any, statement: str, parameter_sets: Any, context: Any) -> bool:
    """Whether the statement was held to wait for the commit (else it runs now, after the
    writes that waited)."""
    if context is None:
        return False
    connection = context.root_connection
    waiting = _waiting(connection)
    if waiting is None:
        return False
    if may_wait(context):
        quote = psycopg.ClientCursor(cursor.connection).mogrify
        waiting.extend(quote(statement, parameters) for parameters in parameter_sets)
        return True
    if waiting:
        _send(connection, waiting, commit=False)
    return False


def _waiting(connection: Connection, *, take: bool = False) -> list[str] | None:
    """The connection's waiting writes (taken away with `take`); None when it holds none."""
    if connection.invalidated:  # lost: its entry's list went with it
        return None
    try:
        info = connection.info
    except NotImplementedError:  # the dialect's first look at a new connection: no pool entry
        return None
    return info.pop(WAITING, None) if take else info.get(WAITING)


def _send(connection: Connection, waiting: list[str], *, commit: bool) -> None:
    """Run the waiting writes (and the COMMIT) in one round trip."""
    statements = [*waiting, "COMMIT"] if commit else list(waiting)
    waiting.clear()
    dbapi_connection = connection.connection.dbapi_connection
    try:
        dbapi_connection.execute(";\n".join(statements))
    except psycopg.Error as error:
        invalidated = connection.dialect.is_disconnect(error, dbapi_connection, None)
        if invalidated:
            connection.invalidate(error)
        else:
            dbapi_connection.rollback()  # the transaction failed: end it here
        raise exc.DBAPIError.instance(
            SENT,
            None,
            error,
            psycopg.Error,
            connection_invalidated=invalidated,
            dialect=connection.dialect,
        ) from error


def _commit(connection: Connection) -> None:
    """Before the COMMIT: the waiting writes go with it (psycopg's own COMMIT then finds
    the transaction ended and sends nothing)."""
    waiting = _waiting(connection, take=True)
    if waiting:
        _send(connection, waiting, commit=True)


def _rollback(connection: Connection) -> None:
    _waiting(connection, take=True)


def _checkin(_dbapi_connection: Any, record: Any) -> None:
    record.info.pop(WAITING, None)


def hold_writes_for_commit(engine: Engine) -> None:
    """Let `engine`'s transactions send their writes with the commit (`send_with_commit`)."""
    event.listen(engine, "do_execute", _execute, retval=True)
    event.listen(engine, "do_executemany", _executemany, retval=True)
    event.listen(engine, "do_execute_no_params", _execute_no_params, retval=True)
    event.listen(engine, "commit", _commit)
    event.listen(engine, "rollback", _rollback)
    event.listen(engine, "checkin", _checkin)
