"""Writes held for the commit (platform/with_commit.py): what is kept, in which order, and
what a failure looks like, on PostgreSQL (elsewhere nothing is held)."""

import logging

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from directory_api.models import OutboxMessage, Region
from directory_api.platform.extensions import db
from directory_api.platform.with_commit import SENT, WAITS, send_with_commit

from .conftest import PG_URL, statements_run

needs_postgresql = pytest.mark.skipif(
    not PG_URL, reason="holds writes on PostgreSQL only (CI's PostgreSQL pass runs it)"
)
# Quotes, a backslash, a percent sign, a placeholder's look, line breaks and characters
# past ASCII: each sent as a parameter, read back as it was.
AWKWARD = 'O\'Brien \\ 100% %(name)s %s "q" \n\r\t – ß 漢字 \u2028 😀'


def regions() -> dict[str, str]:
    return {slug: name for slug, name in db.session.execute(select(Region.slug, Region.name))}


def held() -> list[str]:
    """The SQL of the writes held (each with its parameters, apart)."""
    held = db.session.connection().info.get("writes_sent_with_commit")
    return [statement for statement, _, _ in held.writes] if held else []


@needs_postgresql
def test_held_writes_go_with_the_commit_and_are_kept_as_written(app):
    send_with_commit(db.session)
    db.session.add_all([Region(slug="lakes", name=AWKWARD), Region(slug="fells", name="Fells")])
    db.session.flush()
    db.session.execute(
        update(Region)
        .where(Region.slug == "fells")
        .values(name="High Fells")
        .execution_options(**WAITS)
    )
    # Nothing sent yet: the two rows' INSERT (one statement) and the UPDATE wait.
    assert [sql.split()[0] for sql in held()] == ["INSERT", "UPDATE"]
    db.session.commit()

    assert regions() == {"lakes": AWKWARD, "fells": "High Fells"}
    assert held() == []  # the next transaction holds nothing


@needs_postgresql
def test_a_read_sees_the_writes_held_before_it(app):
    send_with_commit(db.session)
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.flush()
    assert len(held()) == 1
    # A read (or anything not held) sends what waits first, in order.
    assert db.session.scalar(select(func.count()).select_from(Region)) == 1
    assert held() == []
    db.session.add(Region(slug="fells", name="Fells"))
    db.session.commit()
    assert set(regions()) == {"lakes", "fells"}


@needs_postgresql
def test_an_update_of_the_orm_is_never_held(app):
    """The ORM reads how many rows its update matched: that update runs at once."""
    lakes = Region(slug="lakes", name="Lakes")
    db.session.add(lakes)
    db.session.commit()
    assert lakes.name == "Lakes"  # loaded again after the commit
    send_with_commit(db.session)
    lakes.name = "The Lakes"
    with statements_run() as run:
        db.session.flush()
    assert [executed.sql.split()[0] for executed in run] == ["UPDATE"]
    assert held() == []
    db.session.commit()
    assert regions() == {"lakes": "The Lakes"}


@needs_postgresql
def test_a_rollback_drops_the_held_writes(app):
    send_with_commit(db.session)
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.flush()
    db.session.rollback()
    assert regions() == {}
    db.session.add(Region(slug="fells", name="Fells"))  # a later transaction: sent as ever
    db.session.commit()
    assert regions() == {"fells": "Fells"}


@needs_postgresql
def test_a_held_write_that_fails_fails_the_commit_and_keeps_nothing(app, caplog):
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.commit()
    send_with_commit(db.session)
    db.session.add(Region(slug="fells", name="Fells secret@example.com"))
    db.session.add(Region(slug="lakes", name="Lakes again"))  # the slug is taken
    db.session.flush()  # no error yet: nothing was sent

    with pytest.raises(IntegrityError) as raised, caplog.at_level(logging.DEBUG):
        db.session.commit()
    # Which constraint, as SQLAlchemy names it; never the SQL with its values.
    assert raised.value.statement == SENT
    assert "secret@example.com" not in str(raised.value)
    assert "secret@example.com" not in caplog.text
    db.session.rollback()
    assert regions() == {"lakes": "Lakes"}  # the other write went with it
    assert db.session.execute(text("SELECT 1")).scalar() == 1  # the connection is usable


@pytest.mark.skipif(bool(PG_URL), reason="SQLite's case (the SQLite pass runs it)")
def test_elsewhere_nothing_is_held(app):
    send_with_commit(db.session)
    db.session.add(Region(slug="lakes", name="Lakes"))
    with statements_run() as run:
        db.session.flush()
    assert [executed.sql.split()[0] for executed in run] == ["INSERT"]
    assert held() == []
    db.session.commit()
    assert regions() == {"lakes": "Lakes"}


def server_side() -> tuple[str, bool]:
    """The connection's transaction status (psycopg's name) and autocommit."""
    dbapi_connection = db.session.connection().connection.dbapi_connection
    status = TransactionStatus(dbapi_connection.pgconn.transaction_status)
    return status.name, dbapi_connection.autocommit


@needs_postgresql
def test_reads_before_the_first_write_begin_nothing_and_the_begin_goes_with_the_writes(app):
    send_with_commit(db.session)
    dbapi_connection = db.session.connection().connection.dbapi_connection
    assert regions() == {}
    assert server_side() == ("IDLE", True)  # no BEGIN was sent for the read
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.flush()
    assert server_side() == ("IDLE", True)  # held: nothing sent yet
    db.session.commit()  # BEGIN, the INSERT, COMMIT: one round trip

    assert regions() == {"lakes": "Lakes"}
    assert dbapi_connection.autocommit is False  # as the pool lent it


@needs_postgresql
def test_a_read_after_a_held_write_begins_the_transaction(app):
    send_with_commit(db.session)
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.flush()
    assert db.session.scalar(select(func.count()).select_from(Region)) == 1  # it sees it
    assert server_side() == ("INTRANS", True)
    db.session.rollback()  # and the write goes with the transaction
    assert regions() == {}


@needs_postgresql
def test_a_locking_read_begins_the_transaction_and_keeps_its_lock(app):
    lakes = Region(slug="lakes", name="Lakes")
    db.session.add(lakes)
    db.session.flush()
    lakes_id = lakes.id  # read before the commit (after it, reading it would begin one)
    db.session.commit()
    send_with_commit(db.session)
    db.session.scalars(select(Region).where(Region.id == lakes_id).with_for_update()).one()
    assert server_side() == ("INTRANS", True)
    with db.engine.connect() as other, pytest.raises(OperationalError, match="could not obtain"):
        other.execute(select(Region.id).where(Region.id == lakes_id).with_for_update(nowait=True))
    db.session.commit()


@needs_postgresql
def test_under_another_isolation_level_the_transaction_begins_as_ever(app_factory):
    app = app_factory(SQLALCHEMY_ENGINE_OPTIONS={"isolation_level": "REPEATABLE READ"})
    with app.app_context():
        send_with_commit(db.session)
        assert regions() == {}
        assert server_side() == ("INTRANS", False)  # one snapshot for all its statements
        db.session.add(Region(slug="lakes", name="Lakes"))
        db.session.commit()
        assert regions() == {"lakes": "Lakes"}


@needs_postgresql
def test_a_savepoint_ends_the_holding_so_its_rollback_meets_the_error(app, taken):
    """Code that rolls back to a savepoint expects a write's error at its flush: from the
    savepoint on, writes go as they come, and the transaction goes on as without holding."""
    send_with_commit(db.session)
    db.session.add(Region(slug="first", name="First"))
    db.session.flush()  # held
    with pytest.raises(IntegrityError), db.session.begin_nested():
        taken_again()  # sent at once: the error is met at its flush
    db.session.add(Region(slug="third", name="Third"))
    db.session.commit()
    assert set(regions()) == {"taken", "first", "third"}


@pytest.fixture
def taken(app) -> None:
    """A region whose slug a held write will take again."""
    db.session.add(Region(slug="taken", name="Taken"))
    db.session.commit()


def taken_again() -> None:
    """A held write that will fail: the slug `taken` exists."""
    db.session.add(Region(slug="taken", name="Again"))
    db.session.flush()


@needs_postgresql
def test_a_failed_send_sticks_so_a_caught_error_cannot_commit_what_is_left(app, taken):
    """The held write fails where the savepoint sends it, inside a block that catches its
    own errors: the commit after it must not report success (PostgreSQL would answer
    the aborted transaction's COMMIT with a ROLLBACK, and no error)."""
    send_with_commit(db.session)
    db.session.add(Region(slug="first", name="First"))
    taken_again()
    with pytest.raises(IntegrityError), db.session.begin_nested():
        db.session.execute(text("SELECT 1"))  # its SAVEPOINT first, which sends what waits
    with pytest.raises(IntegrityError):
        db.session.commit()
    db.session.rollback()
    assert regions() == {"taken": "Taken"}


@needs_postgresql
def test_a_value_psycopg_cannot_send_fails_the_commit_and_keeps_nothing(app):
    send_with_commit(db.session)
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.add(
        OutboxMessage(recipients={"a set": "of"}.keys(), subject="s", body="b", template="t")
    )
    db.session.flush()  # held: the JSON is dumped when sent
    with pytest.raises(TypeError):
        db.session.commit()
    db.session.rollback()
    assert regions() == {}


@needs_postgresql
def test_a_commit_that_fails_leaves_its_connection_clean_even_unrolled_back(app, taken):
    """A session closed without its rollback hands the pool back its connection: idle,
    out of autocommit, ready for a transaction that did not opt in."""
    send_with_commit(db.session)
    lent = db.session.connection().connection.dbapi_connection
    taken_again()
    with pytest.raises(IntegrityError):
        db.session.commit()
    db.session.close()
    status = TransactionStatus(lent.pgconn.transaction_status)
    assert (status.name, lent.autocommit) == ("IDLE", False)
    db.session.add(Region(slug="lakes", name="Lakes"))
    db.session.commit()
    assert set(regions()) == {"taken", "lakes"}


@needs_postgresql
def test_the_next_transaction_on_a_connection_still_lent_is_out_of_autocommit(app):
    with db.engine.connect() as connection, Session(bind=connection) as session:
        send_with_commit(session)
        session.add(Region(slug="lakes", name="Lakes"))
        session.commit()
        session.add(Region(slug="fells", name="Fells"))
        session.flush()  # not held: this transaction did not opt in
        session.rollback()
    assert regions() == {"lakes": "Lakes"}


@needs_postgresql
def test_without_pipeline_mode_nothing_is_held_and_nothing_switched(app_factory, monkeypatch):
    """A libpq before 14 has no pipeline: its engine holds nothing, and a transaction that
    opts in is a transaction as ever."""
    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    app = app_factory()
    with app.app_context():
        send_with_commit(db.session)
        assert regions() == {}
        assert server_side() == ("INTRANS", False)
        db.session.add(Region(slug="lakes", name="Lakes"))
        with statements_run() as run:
            db.session.flush()
        assert [executed.sql.split()[0] for executed in run] == ["INSERT"]
        assert held() == []
        db.session.rollback()
        assert regions() == {}
