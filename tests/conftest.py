"""Fixtures: one migrated database per run, a fresh app per test, signed-in clients.

TEST_DATABASE_URL switches the whole suite to PostgreSQL; TEST_REDIS_URL moves sessions
and rate limits to Redis. Without them everything runs on SQLite, files and memory.
"""

import asyncio
import contextvars
import email
import email.message
import email.policy
import os
import re
import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy
from aiosmtpd.controller import Controller
from flask import Flask, has_app_context
from flask.testing import FlaskClient
from flask_migrate import upgrade

from config import TestingConfig
from directory_api import create_app
from directory_api.extensions import db

from .factories import PASSWORD, make_user

PG_URL = TestingConfig.SQLALCHEMY_DATABASE_URI
PROBLEM = "application/problem+json"


def assert_problem(response, status: int) -> dict:
    """An RFC 9457 problem answer with `status` (API.md 1); returns its body."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    body = response.get_json()
    assert body["status"] == status
    assert body["type"] == "about:blank"
    assert body["title"]
    return body


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
        # A streamed body (CSV) is read inside the request's context, as a server would.
        kwargs.setdefault("buffered", True)
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


class MailCatcher:
    """An SMTP handler that keeps what it is sent (optionally slowly, to overlap workers)."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.delay = 0.0
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        if self.delay:
            await asyncio.sleep(self.delay)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.lock:
            self.messages.append(message)
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 Message accepted"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        return [m for m in self.messages if address in m["To"]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def smtp_server() -> Iterator[tuple[MailCatcher, int]]:
    """A real SMTP server on loopback."""
    catcher = MailCatcher()
    port = free_port()
    controller = Controller(catcher, hostname="127.0.0.1", port=port)
    controller.start()
    yield catcher, port
    controller.stop()


def smtp_settings(port: int) -> dict:
    # Flask-Mail suppresses sending under TESTING unless told otherwise.
    return {"MAIL_SERVER": "127.0.0.1", "MAIL_PORT": port, "MAIL_SUPPRESS_SEND": False}


@pytest.fixture
def mail_app(app_factory, smtp_server) -> Iterator[Flask]:
    """An app whose outbox delivers to the loopback SMTP server."""
    app = app_factory(**smtp_settings(smtp_server[1]))
    with app.app_context():
        yield app


@pytest.fixture
def mailbox(smtp_server) -> MailCatcher:
    return smtp_server[0]


def send_outbox(app: Flask) -> str:
    """Run `flask outbox send` once, as an operator or the worker would."""
    result = app.test_cli_runner().invoke(args=["outbox", "send"])
    assert result.exit_code == 0, result.output
    return result.output


def queued_mail(to: str | None = None, template: str | None = None) -> list:
    """The outbox, oldest first: every message, or those to `to` / from `template`."""
    from directory_api.models import OutboxMessage

    db.session.rollback()
    rows = db.session.scalars(sqlalchemy.select(OutboxMessage).order_by(OutboxMessage.created_at))
    return [
        row
        for row in rows
        if (to is None or to in row.recipients) and (template is None or row.template == template)
    ]


def link_in(text: str, path: str) -> str:
    """The part of the first link containing `path` that follows it (a token or id/?token=)."""
    match = re.search(re.escape(path) + r"(\S+)", text)
    assert match, f"no link with {path!r} in:\n{text}"
    return match.group(1)
