"""A write's statements in one round trip (PostgreSQL): its BEGIN and its writes travel
together, then its COMMIT.

A write whose result nobody reads need not be sent the moment it is made: an INSERT
without RETURNING (the ORM's inserts, whose keys are made here), or an UPDATE or upsert
marked `WAITS` (the stored counts a flush keeps; an ORM update is never held, since the
ORM reads how many rows it matched). Once a transaction calls `send_with_commit`, such
writes wait, as they were to be executed (the statement and its parameters), and at the
commit go to the server in one psycopg pipeline: BEGIN, then each write with its values
as parameters (never written into the SQL: a failing statement in PostgreSQL's log shows
`$1`, not a voter's address), one Sync, one round trip. The COMMIT follows on its own.

- Until the first write the connection is in autocommit (psycopg's own setting: nothing is
  sent to switch it), so the reads that come first are sent alone. Under READ COMMITTED,
  PostgreSQL's default, every statement of a transaction sees its own snapshot anyway,
  and a plain read takes no lock a transaction would keep: the answers are the same
  (platform/reads.py does the same for GET). Under another isolation level set for the
  connection the transaction begins as ever (a role's or database's own default is not
  seen here: this assumes PostgreSQL's).
- Any other statement (a read after a held write, a locking read, an ORM update, a
  savepoint) begins the transaction if need be and sends the waiting writes first, in one
  round trip: what it reads or changes sees them, and their order holds.
- A write that fails is known at the commit (or at the statement that sent it), not at
  the flush: the database's error as SQLAlchemy names it (an IntegrityError is a 409 as
  ever, and `Idempotency-Key`'s race is caught where it always was), its statement shown
  as `SENT` and no values. The failure sticks: any later statement of the transaction,
  and its commit, raise it again (the server's transaction is aborted, or holds some
  writes and not others: it must not commit), and a commit that fails ends the server's
  transaction itself, so no connection goes back to the pool mid-transaction.
- The COMMIT is never in the writes' round trip. A client that gives up on that round
  trip (the server or the network stalled, or the writes waited on locks past the client's
  bound: `DATABASE_STATEMENT_TIMEOUT` + 1 s for the whole round trip) closes the
  connection, and the server rolls the writes back: a 503 keeps nothing, as before. Only
  the COMMIT's own answer, if lost, leaves a client unsure, as ever.
- A savepoint ends the holding: the writes waiting go before it, and every write after it
  is sent as it comes, so that code rolling back to the savepoint meets the error where
  it expects it.
- A rollback drops the writes, never sent. The waiting list lives with the connection only
  until its transaction ends (and is dropped when the pool takes the connection back).
- A held write keeps its parameters as SQLAlchemy made them until the commit: a value
  changed in place meanwhile (a JSON list) would be sent changed. Nothing here does that.
- Listeners of `before_cursor_execute` (echo, recorded queries) see a held write when it
  is held, not when it runs.
- Opt-in, per transaction: code that catches a write's error at its flush (a unique slug
  taken) must not use it. SQLite is left as it is (in-process: no round trip to save).
"""

import weakref
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Connection, Engine, Select, event, exc
from sqlalchemy.engine.interfaces import ExecutionContext
from sqlalchemy.orm import Session

HELD = "writes_sent_with_commit"
# Set on a connection put in autocommit here: it goes back when its transaction ends.
SWITCHED = "autocommit_until_the_first_write"
# The execution option that lets an UPDATE (or an upsert) wait for the commit: its
# result (how many rows) is read by no one.
WAITS = {"waits_for_commit": True}
SENT = "-- writes sent together (platform/with_commit.py)"
READ_COMMITTED = (None, psycopg.IsolationLevel.READ_COMMITTED)  # None: the server's default
# The engines whose listeners hold writes: elsewhere (SQLite, a libpq without pipeline
# mode) a transaction that opts in is left as it is.
HOLDING: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@dataclass
class Held:
    """A transaction's writes waiting for its commit, and whether the server has begun it."""

    begun: bool
    # False once a savepoint is taken: from then on every write is sent as it comes, so
    # that its error is met at its flush, where a rollback to the savepoint expects it.
    holding: bool = True
    # Each as it was to be executed: the statement, its parameters, and whether many sets.
    writes: list[tuple[str, Any, bool]] = field(default_factory=list)
    # Why sending failed: nothing more may run in the transaction, nor may it commit.
    failed: BaseException | None = None


def send_with_commit(session: Session) -> None:
    """Hold this transaction's writes that may wait until its commit, then send them, with
    its BEGIN, in one round trip (on an engine of `hold_writes_for_commit`; elsewhere
    nothing changes). Call it before the transaction's first statement, to spare its
    BEGIN too."""
    connection = session.connection()
    if connection.engine not in HOLDING or HELD in connection.info:
        return
    dbapi_connection = connection.connection.dbapi_connection
    unbegun = (
        dbapi_connection.pgconn.transaction_status == TransactionStatus.IDLE
        and dbapi_connection.isolation_level in READ_COMMITTED
    )
    if unbegun:
        dbapi_connection.autocommit = True
        connection.info[SWITCHED] = True
    connection.info[HELD] = Held(begun=not unbegun)


def may_wait(context: ExecutionContext) -> bool:
    compiled = context.compiled
    if compiled is None or compiled.effective_returning:
        return False
    return bool(compiled.isinsert or context.execution_options.get("waits_for_commit"))


def plain_read(context: ExecutionContext) -> bool:
    """A SELECT that locks nothing: it may run before the transaction begins."""
    statement = getattr(context.compiled, "statement", None)
    return isinstance(statement, Select) and statement._for_update_arg is None


def _execute(_cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    return _held(statement, parameters, context, many=False)


def _executemany(_cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    return _held(statement, parameters, context, many=True)


def _execute_no_params(_cursor: Any, statement: str, context: Any) -> bool:
    return _held(statement, None, context, many=False)


def _held(statement: str, parameters: Any, context: Any, *, many: bool) -> bool:
    """Whether the statement was held to wait for the commit (else it runs now: alone, as
    a read before the transaction begins, or after the BEGIN and the writes that waited)."""
    if context is None:
        return False
    connection = context.root_connection
    held = _held_by(connection)
    if held is None:
        return False
    if held.failed is not None:
        raise _again(held.failed)
    if held.holding and may_wait(context):
        held.writes.append((statement, parameters, many))
        return True
    if held.writes or not (held.begun or plain_read(context)):
        _send(connection, held)
    return False


def _info(connection: Connection) -> dict[str, Any] | None:
    """The connection's pool entry's info; None for a lost connection (its entry's info
    went with it) and on the dialect's first look at a new one (no pool entry yet)."""
    if connection.invalidated:
        return None
    try:
        return connection.info
    except NotImplementedError:
        return None


def _held_by(connection: Connection, *, take: bool = False) -> Held | None:
    """The connection's held writes (taken away with `take`); None when it holds none."""
    info = _info(connection)
    if info is None:
        return None
    return info.pop(HELD, None) if take else info.get(HELD)


def _send(connection: Connection, held: Held) -> None:
    """Begin the transaction if need be and run the waiting writes: one pipeline, one Sync,
    one round trip. A failure sticks: the transaction runs nothing more and cannot commit
    (the server's is aborted, or holds some writes and not others)."""
    writes, begin = list(held.writes), not held.begun
    held.writes.clear()
    held.begun = True
    dbapi_connection = connection.connection.dbapi_connection
    try:
        try:
            with dbapi_connection.pipeline(), dbapi_connection.cursor() as cursor:
                if begin:
                    cursor.execute("BEGIN")
                for statement, parameters, many in writes:
                    if many:
                        cursor.executemany(statement, parameters)
                    else:
                        cursor.execute(statement, parameters)
        except psycopg.Error as error:
            invalidated = connection.dialect.is_disconnect(error, dbapi_connection, None)
            if invalidated:
                connection.invalidate(error)
            raise exc.DBAPIError.instance(
                SENT,
                None,
                error,
                psycopg.Error,
                connection_invalidated=invalidated,
                dialect=connection.dialect,
            ) from error
    except BaseException as failure:  # a value psycopg cannot send fails it as surely
        held.failed = failure
        raise


def _again(failure: BaseException) -> BaseException:
    """The failure of an earlier send, raised again for what came after it."""
    if isinstance(failure, exc.DBAPIError):
        return exc.DBAPIError.instance(SENT, None, failure.orig, psycopg.Error, dialect=None)
    return failure


def _end(connection: Connection) -> None:
    """A commit that cannot happen: end the server's transaction here, since SQLAlchemy,
    whose transaction is already inactive, sends no ROLLBACK (a session closed without one
    would hand the pool a connection mid-transaction)."""
    if connection.invalidated:
        return
    dbapi_connection = connection.connection.dbapi_connection
    try:
        dbapi_connection.rollback()
    except psycopg.Error as error:
        connection.invalidate(error)
        return
    _switch_back(dbapi_connection, connection.info)


def _switch_back(dbapi_connection: Any, info: dict[str, Any]) -> None:
    """Out of autocommit again once no transaction is open (psycopg refuses it in one)."""
    idle = dbapi_connection.pgconn.transaction_status == TransactionStatus.IDLE
    if idle and info.pop(SWITCHED, False):
        dbapi_connection.autocommit = False


def _commit(connection: Connection) -> None:
    """Before the COMMIT (psycopg's, in a round trip of its own): the waiting writes."""
    held = _held_by(connection, take=True)
    if held is None:
        return
    try:
        if held.failed is not None:
            raise _again(held.failed)
        if held.writes:
            _send(connection, held)
    except BaseException:
        _end(connection)
        raise
    _switch_back(connection.connection.dbapi_connection, connection.info)


def _savepoint(connection: Connection, _name: str) -> None:
    held = _held_by(connection)
    if held is not None:
        held.holding = False


def _rollback(connection: Connection) -> None:
    # Before SQLAlchemy's ROLLBACK: a transaction still open switches back at the next
    # begin or at checkin (`_begin`, `_checkin`).
    if _held_by(connection, take=True) is not None:
        _switch_back(connection.connection.dbapi_connection, connection.info)


def _begin(connection: Connection) -> None:
    """A later transaction on a connection still lent (a session bound to one connection):
    out of autocommit, unless it opts in again."""
    info = _info(connection)
    if info is not None and HELD not in info and info.get(SWITCHED):
        _switch_back(connection.connection.dbapi_connection, info)


def _checkin(dbapi_connection: Any, record: Any) -> None:
    record.info.pop(HELD, None)
    if dbapi_connection is not None:  # None: it was lost, and is gone with its settings
        _switch_back(dbapi_connection, record.info)  # a transaction psycopg ended


def hold_writes_for_commit(engine: Engine) -> None:
    """Let `engine`'s transactions send their writes with the commit (`send_with_commit`);
    nothing is held where libpq has no pipeline mode (before 14)."""
    if not psycopg.Pipeline.is_supported():
        return
    HOLDING.add(engine)
    event.listen(engine, "begin", _begin)
    event.listen(engine, "do_execute", _execute, retval=True)
    event.listen(engine, "do_executemany", _executemany, retval=True)
    event.listen(engine, "do_execute_no_params", _execute_no_params, retval=True)
    event.listen(engine, "commit", _commit)
    event.listen(engine, "rollback", _rollback)
    event.listen(engine, "savepoint", _savepoint)
    event.listen(engine, "checkin", _checkin)
