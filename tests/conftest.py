"""Fixtures: one migrated database and one app per run, emptied after every test.

`app` is that shared app, handed to each test as a new one would be: no rows, no rate-limit
counts, no stored sessions, the configuration it was built with. A test that needs other
settings builds its own with `app_factory(**overrides)` (same database, same clean-up).

TEST_DATABASE_URL switches the whole suite to PostgreSQL; TEST_REDIS_URL moves sessions
and rate limits to Redis. Without them everything runs on SQLite, files and memory.
"""

import asyncio
import contextvars
import copy
import email
import email.message
import email.policy
import os
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import pytest
import sqlalchemy
from aiosmtpd.controller import Controller
from flask import Flask, has_app_context
from flask.testing import FlaskClient
from flask_migrate import upgrade
from sqlalchemy import event
from sqlalchemy.engine import Engine

from config import TestingConfig
from directory_api import create_app
from directory_api.models import AuditCount, Location, Membership, Role, User, utcnow
from directory_api.platform import caching
from directory_api.platform.extensions import db, limiter
from directory_api.platform.sessions import RedisSessions
from directory_api.platform.timeouts import unbounded

from .factories import PASSWORD, make_location, make_user

PG_URL = TestingConfig.SQLALCHEMY_DATABASE_URI
# `transaction` when TEST_DATABASE_URL goes through PgBouncer (CI's third pass): the
# servers the tests start in processes of their own take it too.
POOL_MODE = TestingConfig.DATABASE_POOL_MODE
PROBLEM = "application/problem+json"
NEW_PASSWORD = "a brand new passphrase"


class Executed(NamedTuple):
    sql: str
    parameters: Any


def forget_answers() -> None:
    """Forget what the process kept of the answers it gave (caching.py): as a process that
    has not answered those pages yet, the next read of one does its work."""
    caching.KNOWN_TAGS.entries.clear()
    caching.KNOWN_ANSWERS.entries.clear()
    caching.ANSWERED_URLS.entries.clear()


@pytest.fixture(autouse=True)
def one_cache_period(monkeypatch) -> None:
    """A streamed answer's ETag changes with each stretch of PUBLIC_MAX_AGE seconds
    (caching.period): a test that crossed such a boundary between two requests would see a
    tag change no write made (once in a few hundred runs). Here the clock of tags stands
    still; the tests of that change move it themselves."""
    monkeypatch.setattr(caching, "period", lambda: 1)


@contextmanager
def statements_run() -> Iterator[list[Executed]]:
    """The SQL statements run while the block runs, on every engine (on PostgreSQL reads
    have their own: directory_api/platform/reads.py), in order."""
    run: list[Executed] = []

    def record(_conn, _cursor, statement, parameters, *_rest) -> None:
        run.append(Executed(statement, parameters))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield run
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def query_plan(statement: str, parameters: Any) -> str:
    """The plan the database makes for a statement `statements_run` saw, one line a row:
    SQLite's EXPLAIN QUERY PLAN, PostgreSQL's EXPLAIN, in the test's session."""
    sqlite = db.engine.dialect.name == "sqlite"
    explain = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
    plan = db.session.connection().exec_driver_sql(explain + statement, parameters)
    return "\n".join(map(str, plan))


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


def empty_all_tables(engine: Engine) -> None:
    """One transaction of DELETEs, children first.

    Not TRUNCATE on PostgreSQL: for tables of a few rows it measured 50-300 ms a test
    (it replaces every table's files), the DELETEs under 10 ms.
    """
    with engine.begin() as connection, unbounded(connection):
        # Not bounded by the app's statement timeout, nor by the client's wait for an answer
        # (unbounded lifts both): a module's 30,000 listings with their links (test_server.py)
        # clear their stored outputs row by row (migration 0025's triggers), past 6 s on a
        # slow machine (a CI run's teardown failed so with only the server's bound lifted).
        if engine.dialect.name == "sqlite":
            # The search index in two statements, not a trigger's two per listing.
            connection.exec_driver_sql("DELETE FROM listings_fts")
            connection.exec_driver_sql("DELETE FROM listings_fts_rows")
        for table in reversed(db.metadata.sorted_tables):
            for key in table.foreign_keys:
                if key.column.table is table:  # categories point at categories (RESTRICT)
                    column = table.c[key.parent.name]
                    connection.execute(table.delete().where(column.is_not(None)))
            connection.execute(table.delete())
        # Emptying the audit log counted its rows out again (its triggers): start from none.
        connection.execute(AuditCount.__table__.delete())


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
        empty_all_tables(db.engine)  # a run that was cut short may have left rows behind
        db.engine.dispose()
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
        context = contextvars.Context()
        response = context.run(super().open, *args, **kwargs)
        if not kwargs["buffered"]:
            # Left unread (a slow client): read on and closed later, in that context too.
            response.response = InContext(response.response, context)
        return response


class InContext:
    """A response's body read and closed in the context its request ran in."""

    def __init__(self, body, context: contextvars.Context) -> None:
        self.body = iter(body)
        self.close_body = getattr(body, "close", None)
        self.context = context

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        return self.context.run(next, self.body)

    def close(self) -> None:
        if self.close_body is not None:
            self.context.run(self.close_body)


def build_app(database_url: str, tmp_path, **overrides) -> Flask:
    run = uuid.uuid4().hex[:12]
    settings = {
        "SQLALCHEMY_DATABASE_URI": database_url,
        "SESSION_FILE_DIR": str(tmp_path / "sessions"),
        # Separate keys per app, so Redis-backed sessions and limits never leak between apps.
        "SESSION_KEY_PREFIX": f"test-session-{run}:",
        # (Flask-Limiter keeps the first app's RATELIMIT_KEY_PREFIX; storage options are per app.)
        "RATELIMIT_STORAGE_OPTIONS": {"key_prefix": f"test-limits-{run}"},
    }
    settings.update(overrides)
    app = create_app("testing", **settings)
    app.test_client_class = IsolatedClient
    return app


class SharedApp:
    """The app most tests use, and what it takes to make it look new again."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        with app.app_context():
            self.engine = db.engine
        self.config = copy.deepcopy(dict(app.config))
        self.limiter_storage = limiter.storage

    def take_back_the_limiter(self) -> None:
        """Flask-Limiter is one object with one storage: the last app built set it. Its meta
        limits too, which init_app keeps once set (a process serves one app; this one
        builds many): cleared, they are the shared app's again (it sets none)."""
        if limiter.storage is not self.limiter_storage or not limiter.enabled:
            limiter._meta_limits = []
            limiter.init_app(self.app)
            self.limiter_storage = limiter.storage

    def restore_config(self) -> None:
        if dict(self.app.config) != self.config:
            self.app.config.clear()
            self.app.config.update(copy.deepcopy(self.config))

    def forget_sessions(self) -> None:
        interface = self.app.session_interface
        if isinstance(interface, RedisSessions):
            keys = list(interface.client.scan_iter(f"{interface.key_prefix}*", count=10_000))
            if keys:
                interface.client.delete(*keys)
        else:
            interface.cache.clear()

    def reset(self) -> None:
        empty_all_tables(self.engine)
        self.take_back_the_limiter()
        limiter.reset()
        self.forget_sessions()
        self.restore_config()


@pytest.fixture(scope="session")
def shared_app(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    shared = SharedApp(build_app(migrated_database, tmp_path_factory.mktemp("app")))
    yield shared
    shared.engine.dispose()


@pytest.fixture
def clean_slate(shared_app: SharedApp) -> Iterator[None]:
    """Whatever the test wrote (rows, limit counts, sessions, settings) is gone after it,
    and it starts as a process that has answered nothing yet (the URLs it answered
    outlive any revision: caching.ANSWERED_URLS)."""
    shared_app.take_back_the_limiter()
    forget_answers()
    yield
    shared_app.reset()


@pytest.fixture
def app_factory(clean_slate, migrated_database: str, tmp_path) -> Iterator:
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


@pytest.fixture
def app(clean_slate, shared_app: SharedApp) -> Iterator[Flask]:
    with shared_app.app.app_context():
        yield shared_app.app
        db.session.remove()


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


@pytest.fixture
def locations(app: Flask) -> dict[str, Location]:
    """Where `world` happens: harbour first, then one other place.

    A module whose tests need other details (a region, another second place) overrides this.
    """
    return {
        "harbour": make_location("harbour", email="votes@harbour.example"),
        "hill": make_location("hill", email="votes@hill.example"),
    }


@pytest.fixture
def world(locations: dict[str, Location], super_user, plain_user) -> dict:
    """`locations` and who is who there, by name.

    owner@ and admin@example.com hold those roles at harbour; at the other place (say bay)
    other_owner and other_admin are bay-owner@ and bay-admin@example.com. "super" and
    "plain" hold no role anywhere.
    """
    here, there = list(locations.values())[:2]
    people: dict[str, User] = {"super": super_user, "plain": plain_user}
    staff = [
        ("owner", "owner@example.com", here, Role.OWNER),
        ("admin", "admin@example.com", here, Role.ADMIN),
        ("other_owner", f"{there.slug}-owner@example.com", there, Role.OWNER),
        ("other_admin", f"{there.slug}-admin@example.com", there, Role.ADMIN),
    ]
    # One transaction (and one hash): most tests of several modules start here.
    password_hash = plain_user.password_hash
    for name, address, _, _ in staff:
        people[name] = User(email=address, password_hash=password_hash)
    db.session.add_all(people.values())
    db.session.flush()
    db.session.add_all(
        Membership(user_id=people[name].id, location_id=location.id, role=role)
        for name, _, location, role in staff
    )
    db.session.commit()
    return {**locations, **people}


class Clients(dict):
    """A client per identity of `world`, signed in the first time it is asked for."""

    def __init__(self, app: Flask, emails: dict[str, str]) -> None:
        super().__init__()
        self.app = app
        self.emails = emails

    def __missing__(self, who: str) -> FlaskClient:
        if who == "anonymous":
            client = self.app.test_client()
        else:
            client = signed_in(self.app, self.emails[who])
        self[who] = client
        return client


@pytest.fixture
def clients(app: Flask, world: dict) -> Clients:
    """`clients["owner"]`, `clients["anonymous"]`…: one client per identity, by name."""
    return Clients(app, {name: it.email for name, it in world.items() if isinstance(it, User)})


class Clock:
    """A stand-in for the project's `utcnow`, stopped now and moved by hand.

    Patch it in where the code under test reads the time:
    `monkeypatch.setattr(credentials, "utcnow", clock)`.
    """

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


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


def database_rows() -> dict[str, list[str]]:
    """Every row of every table, to show that a refused request changed nothing."""
    db.session.rollback()
    return {
        table.name: sorted(repr(tuple(row)) for row in db.session.execute(sqlalchemy.select(table)))
        for table in db.metadata.sorted_tables
    }


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


def invite(super_client: FlaskClient, email: str, location: str = "harbour") -> tuple[str, str]:
    """Invite `email` as an owner of `location`; the user id and the token from the mail."""
    response = super_client.post(f"/locations/{location}/owners/", json={"email": email})
    assert response.status_code == 201, response.get_json()
    [mail] = [m for m in queued_mail(email) if "/register/" in m.body][-1:]
    return response.get_json()["id"], link_in(mail.body, "?token=")


def register(client: FlaskClient, user_id, token: str, password: str = NEW_PASSWORD, **extra):
    return client.post(
        f"/me/register/{user_id}", json={"token": token, "password": password, **extra}
    )


def start_reset(client: FlaskClient, email: str):
    return client.post("/me/password-reset", json={"email": email})


def reset_token(email: str) -> str:
    """The token of the latest password-reset link queued to `email`."""
    mails = [m for m in queued_mail(email) if "/password-reset/" in m.body]
    return link_in(mails[-1].body, "/password-reset/")


def complete_reset(client: FlaskClient, token: str, password: str = NEW_PASSWORD):
    return client.post(f"/me/password-reset/{token}", json={"password": password})


def link_in(text: str, path: str) -> str:
    """The part of the first link containing `path` that follows it (a token or id/?token=)."""
    match = re.search(re.escape(path) + r"(\S+)", text)
    assert match, f"no link with {path!r} in:\n{text}"
    return match.group(1)
