"""Fixtures: one migrated database per run, a fresh app per test, signed-in clients.

TEST_DATABASE_URL switches the whole suite to PostgreSQL; TEST_REDIS_URL moves sessions
and rate limits to Redis. Without them everything runs on SQLite, files and memory.
"""

import contextvars
import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy
from flask import Flask, has_app_context
from flask.testing import FlaskClient
from flask_migrate import upgrade

from config import TestingConfig
from directory_api import create_app
from directory_api.extensions import db

from .factories import PASSWORD, make_user

PG_URL = TestingConfig.SQLALCHEMY_DATABASE_URI


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    if PG_URL:
        return PG_URL
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'test.sqlite3'}"


def empty_all_tables(database_url: str) -> None:
    engine = sqlalchemy.create_engine(database_url)
    with engine.begin() as connection:
        for table in reversed(db.metadata.sorted_tables):
            for key in table.foreign_keys:
                if key.column.table is table:  # categories point at categories
                    connection.execute(table.update().values({key.parent.name: None}))
            connection.execute(table.delete())
    engine.dispose()


@pytest.fixture(scope="session")
def migrated_database(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The schema comes from the migrations, exactly as production gets it."""
    app = create_app(
        "testing",
        SQLALCHEMY_DATABASE_URI=database_url,
        SESSION_FILE_DIR=str(tmp_path_factory.mktemp("sessions")),
    )
    with app.app_context():
        upgrade()
        db.engine.dispose()
    empty_all_tables(database_url)  # a run that was cut short may have left rows behind
    return database_url


class IsolatedClient(FlaskClient):
    """Each request runs in its own app context, as it would in production.

    Flask would otherwise reuse the test's app context, and with it `g` (where Flask-Login
    caches the signed-in user) across clients. The test's own session ends its transaction
    first, so what the test reads afterwards includes what the request wrote.
    """

    def open(self, *args, **kwargs):
        if has_app_context():
            db.session.rollback()
        return contextvars.Context().run(super().open, *args, **kwargs)


def build_app(database_url: str, tmp_path, **overrides) -> Flask:
    run = uuid.uuid4().hex[:12]
    settings = {
        "SQLALCHEMY_DATABASE_URI": database_url,
        "SESSION_FILE_DIR": str(tmp_path / "sessions"),
        # Separate keys per test, so Redis-backed sessions and limits never leak between tests.
        "SESSION_KEY_PREFIX": f"test-session-{run}:",
        # (Flask-Limiter keeps the first app's RATELIMIT_KEY_PREFIX; storage options are per app.)
        "RATELIMIT_STORAGE_OPTIONS": {"key_prefix": f"test-limits-{run}"},
    }
    settings.update(overrides)
    app = create_app("testing", **settings)
    app.test_client_class = IsolatedClient
    return app


@pytest.fixture
def app_factory(migrated_database: str, tmp_path) -> Iterator:
    """Builds apps with per-test settings; all share the test database."""
    built: list[Flask] = []

    def factory(**overrides) -> Flask:
        app = build_app(migrated_database, tmp_path, **overrides)
        built.append(app)
        return app

    yield factory
    for app in built:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()
    if built:
        empty_all_tables(migrated_database)


@pytest.fixture
def app(app_factory) -> Iterator[Flask]:
    app = app_factory()
    with app.app_context():
        yield app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def signed_in(app: Flask, email: str, password: str = PASSWORD) -> FlaskClient:
    client = app.test_client()
    response = client.post("/auth/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.get_json()
    return client


@pytest.fixture
def super_user(app: Flask):
    return make_user("super@example.com", is_super=True)


@pytest.fixture
def plain_user(app: Flask):
    return make_user("plain@example.com")


@pytest.fixture
def super_client(app: Flask, super_user) -> FlaskClient:
    return signed_in(app, super_user.email)


@pytest.fixture
def user_client(app: Flask, plain_user) -> FlaskClient:
    """Signed in, holding no role anywhere."""
    return signed_in(app, plain_user.email)


def pytest_report_header() -> list[str]:
    redis = "Redis (TEST_REDIS_URL)" if os.environ.get("TEST_REDIS_URL") else "files and memory"
    return [
        f"database: {'PostgreSQL (TEST_DATABASE_URL)' if PG_URL else 'SQLite'}",
        f"sessions and rate limits: {redis}",
    ]
