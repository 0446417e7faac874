"""Behind PgBouncer in transaction pooling (`DATABASE_POOL_MODE=transaction`, API.md 18).

A pooled connection is PgBouncer's, not one server session: no statement prepared on the
server, no start-up parameter (PgBouncer refuses `options`), the statement timeout left to
the pooler and checked. CI runs the whole suite once through a PgBouncer in transaction
pooling (.ci/run, deploy/pgbouncer.ini); these tests pin what the setting changes, on
PostgreSQL directly or through that pooler.
"""

import logging

import pytest
from sqlalchemy import select

from config import TestingConfig
from directory_api.models import Region
from directory_api.platform.extensions import db

from .conftest import PG_URL

pytestmark = pytest.mark.skipif(
    not PG_URL, reason="needs TEST_DATABASE_URL (CI's PostgreSQL passes run it)"
)
POOLED = TestingConfig.DATABASE_POOL_MODE == "transaction"


def driver_connection():
    return db.session.connection().connection.driver_connection


def test_transaction_pooling_prepares_nothing_and_checks_the_poolers_timeout(app_factory, caplog):
    app = app_factory(DATABASE_POOL_MODE="transaction", DATABASE_STATEMENT_TIMEOUT=7.5)
    with app.app_context(), caplog.at_level(logging.WARNING):
        # More runs of one statement than psycopg's threshold for preparing it.
        for _ in range(8):
            assert db.session.scalars(select(Region.id).where(Region.slug == "x")).all() == []
        connection = driver_connection()
        assert connection.prepare_threshold is None
        assert "statement_timeout" not in connection.info.dsn
        prepared = db.session.scalar(db.text("SELECT count(*) FROM pg_prepared_statements"))
        assert prepared == 0
        db.session.rollback()
    # The server's timeout is not the one configured (no pooler sets 7.5 s): said once.
    warnings = [r.getMessage() for r in caplog.records if "statement_timeout" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "7500 ms" in warnings[0] and "connect_query" in warnings[0]


@pytest.mark.skipif(POOLED, reason="session mode sends `options`, which PgBouncer refuses")
def test_session_mode_sets_the_timeout_at_start_up_and_lets_psycopg_prepare(app_factory, caplog):
    app = app_factory(DATABASE_POOL_MODE="session", DATABASE_STATEMENT_TIMEOUT=7.5)
    with app.app_context(), caplog.at_level(logging.WARNING):
        for _ in range(8):
            db.session.scalars(select(Region.id).where(Region.slug == "x")).all()
        connection = driver_connection()
        assert connection.prepare_threshold == 5
        assert db.session.scalar(select(db.text("current_setting('statement_timeout')"))) in (
            "7500ms",
            "7.5s",
        )
        db.session.rollback()
    assert not [r for r in caplog.records if "statement_timeout" in r.getMessage()]


@pytest.mark.skipif(not POOLED, reason="needs a PgBouncer in front (CI's third pass)")
def test_through_the_pooler_the_timeout_is_its_own_and_maintenance_lifts_it_for_itself(app):
    """deploy/pgbouncer.ini's connect_query sets 5 s, the default DATABASE_STATEMENT_TIMEOUT
    (so no warning); `unbounded` (migrations, recounts) lifts it with SET LOCAL, which ends
    with its transaction and never reaches the next client of that server connection."""
    from directory_api.platform.timeouts import unbounded

    def timeout() -> str:
        return db.session.scalar(db.text("SELECT current_setting('statement_timeout')"))

    assert timeout() == "5s"
    db.session.rollback()
    with unbounded(db.session.connection()):
        assert timeout() == "0"
    db.session.commit()
    for _ in range(5):  # whichever server connection the pooler lends next
        assert timeout() == "5s"
        db.session.rollback()
