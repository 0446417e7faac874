"""Dependencies that fail for real: what clients get, how fast, and that everything recovers.

PostgreSQL sits behind a TCP proxy the test cuts (connections reset, new ones refused) or
freezes (accepted, never answered); Redis is a redis-server of the test's own, killed,
frozen (SIGSTOP) or made read-only (as a replica is after a failover); SMTP is a server
that accepts and never answers. Each case asserts the status, the problem+json body and a
time bound, then that the same app (no restart) and the outbox worker recover with no row
or message lost or doubled. The PostgreSQL cases need a server to fault, so they run in
CI's PostgreSQL pass; the Redis and SMTP cases run in every pass.
"""

import logging
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import redis
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from directory_api.cli import run_worker
from directory_api.models import OutboxMessage, OutboxStatus, Region, User, Vote, utcnow
from directory_api.platform import with_commit
from directory_api.platform.extensions import db
from directory_api.platform.outbox import deliver_due, queue_mail
from directory_api.platform.reads import autocommit_engine
from directory_api.platform.timeouts import unbounded

from .conftest import (
    PG_URL,
    POOL_MODE,
    PROBLEM,
    Clock,
    queued_mail,
    send_outbox,
    signed_in,
    smtp_settings,
)
from .factories import PASSWORD, make_listing, make_location, make_region, make_user
from .faults import RedisServer, SecureRedisServer, SilentSMTP, TcpProxy, tcp_proxy
from .test_outbox import queue
from .test_round_trips import EMPLOYER_VOTE

REQUESTS = "directory_api.requests"

needs_postgresql = pytest.mark.skipif(
    not PG_URL, reason="needs a PostgreSQL server to fault (CI's PostgreSQL pass runs it)"
)


def timed(call, *args, **kwargs):
    started = time.monotonic()
    response = call(*args, **kwargs)
    return response, time.monotonic() - started


def assert_unavailable(response, elapsed: float, bound: float) -> None:
    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    assert response.get_json()["status"] == 503
    assert elapsed < bound, f"answered after {elapsed:.1f}s (bound {bound}s)"


def eventually(check, seconds: float = 15.0):
    """Poll `check` until it returns a truthy value (the service recovering by itself)."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


# --- PostgreSQL -------------------------------------------------------------------------

# Short timeouts keep the suite quick; the defaults (3 s, 5 s, 3 s) bound a request under 10 s.
DB_TIMEOUTS = {
    "DATABASE_CONNECT_TIMEOUT": 2,
    "DATABASE_STATEMENT_TIMEOUT": 1.0,
    "DATABASE_POOL_TIMEOUT": 1.0,
}
# A request may pay one round trip (statement timeout + 1 s margin) and one reconnect.
DB_BOUND = 6.0
VOTE_URL = "/locations/harbour/votes/submit/employer"


@pytest.fixture
def pg_proxy() -> Iterator[TcpProxy]:
    url = make_url(PG_URL)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        yield proxy


def proxied_url(proxy: TcpProxy) -> str:
    return make_url(PG_URL).set(host="127.0.0.1", port=proxy.port).render_as_string(False)


@pytest.fixture
def proxied_app(app_factory, pg_proxy):
    """An app whose every database connection passes through the proxy."""
    proxied = app_factory(SQLALCHEMY_DATABASE_URI=proxied_url(pg_proxy), **DB_TIMEOUTS)
    with proxied.app_context():
        yield proxied


@needs_postgresql
def test_a_frozen_database_answers_503_within_bounds_and_recovers(proxied_app, pg_proxy):
    client = proxied_app.test_client()
    assert client.get("/regions/").status_code == 200

    pg_proxy.freeze()
    response, elapsed = timed(client.get, "/health")
    assert_unavailable(response, elapsed, DB_BOUND)
    assert response.get_json()["checks"] == {"database": "down"}
    assert_unavailable(*timed(client.get, "/regions/"), DB_BOUND)
    response, elapsed = timed(client.get, "/health/ready")
    assert_unavailable(response, elapsed, DB_BOUND)
    assert response.get_json()["checks"]["database"] == "down"

    pg_proxy.restore()
    assert eventually(lambda: client.get("/regions/").status_code == 200)
    assert client.get("/health").get_json() == {"status": "ok"}


@needs_postgresql
def test_with_the_default_settings_a_frozen_database_answers_within_10_seconds(
    app_factory, pg_proxy
):
    """API.md 7: "within a bounded time (default under 10 s)" — the defaults, unshortened."""
    defaults = app_factory(SQLALCHEMY_DATABASE_URI=proxied_url(pg_proxy))
    with defaults.app_context():
        client = defaults.test_client()
        assert client.get("/regions/").status_code == 200
        pg_proxy.freeze()
        assert_unavailable(*timed(client.get, "/regions/"), 10.0)


@needs_postgresql
@pytest.mark.skipif(
    POOL_MODE == "transaction",
    reason="behind PgBouncer the statement timeout is the pooler's (test_pooling.py checks it)",
)
def test_the_server_cancels_a_slow_statement_except_in_maintenance(app_factory):
    bounded = app_factory(DATABASE_STATEMENT_TIMEOUT=0.5)
    with bounded.app_context():
        started = time.monotonic()
        with pytest.raises(OperationalError, match="statement timeout"):
            db.session.execute(text("SELECT pg_sleep(3)"))
        assert time.monotonic() - started < 1.5
        db.session.rollback()
        # Migrations, bulk loads and recounts lift the bounds for their transaction only.
        with unbounded(db.session.connection()):
            db.session.execute(text("SELECT pg_sleep(1)"))
        db.session.commit()
        with pytest.raises(OperationalError, match="statement timeout"):
            db.session.execute(text("SELECT pg_sleep(3)"))
        db.session.rollback()


@needs_postgresql
def test_a_cut_database_answers_503_at_once_and_recovers(proxied_app, pg_proxy):
    client = proxied_app.test_client()
    assert client.get("/health").status_code == 200

    pg_proxy.cut()
    assert_unavailable(*timed(client.get, "/health"), 3.0)
    assert_unavailable(*timed(client.get, "/regions/"), 3.0)

    pg_proxy.restore()
    assert eventually(lambda: client.get("/health").status_code == 200)


def drop_the_pooled_connections(app) -> None:
    """What a server restart does to the app's pooled connections: the server ends them
    (only these: the test database's other sessions are left alone). Behind PgBouncer the
    server connections are the pooler's: every one of the database but the asking one."""
    with app.app_context():
        if POOL_MODE == "transaction":
            db.session.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                )
            )
            db.session.rollback()
            return
        pids = {db.session.scalar(text("SELECT pg_backend_pid()"))}
        db.session.rollback()
        with autocommit_engine(db.engine).connect() as reading:  # the pool that serves reads
            pids.add(reading.scalar(text("SELECT pg_backend_pid()")))
    with psycopg.connect(PG_URL.replace("postgresql+psycopg://", "postgresql://")) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


@needs_postgresql
def test_a_read_right_after_a_server_restart_is_answered_on_a_new_connection(app_factory):
    """The pool pings only connections idle for a while (DATABASE_PING_AFTER); a read that
    meets one the server ended runs again on a new connection instead of a 503."""
    fresh = app_factory(DATABASE_PING_AFTER=60)
    with fresh.app_context():
        make_region("north")
    client = fresh.test_client()
    assert client.get("/regions/").status_code == 200

    drop_the_pooled_connections(fresh)

    response = client.get("/regions/")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert [item["slug"] for item in response.get_json()["items"]] == ["north"]


@needs_postgresql
def test_a_write_right_after_a_server_restart_is_refused_whole(app_factory):
    fresh = app_factory(DATABASE_PING_AFTER=60)
    with fresh.app_context():
        make_user("boss@example.com", is_super=True)
    client = signed_in(fresh, "boss@example.com")
    assert client.get("/regions/").status_code == 200

    drop_the_pooled_connections(fresh)

    if POOL_MODE == "transaction":
        # PgBouncer replaced its lost server connections: the app's own are intact.
        assert client.post("/regions/", json={"name": "Lake District"}).status_code == 201
    else:
        assert_unavailable(*timed(client.post, "/regions/", json={"name": "Lake District"}), 3.0)
        assert client.post("/regions/", json={"name": "Lake District"}).status_code == 201
    with fresh.app_context():
        assert db.session.scalar(select(func.count()).where(Region.name == "Lake District")) == 1


@needs_postgresql
@pytest.mark.parametrize("fault", ["cut", "freeze"])
def test_a_vote_whose_writes_are_lost_on_their_way_is_refused_and_stored_once(
    proxied_app, pg_proxy, monkeypatch, fault
):
    """The BEGIN and the writes go in one round trip, the COMMIT after it
    (platform/with_commit.py). Cut or frozen on their way, none is kept, even when the
    frozen message reaches the server after the client gave up: the client gets 503, and
    its retry, with no `Idempotency-Key`, stores the vote once."""
    location = make_location("harbour")
    make_listing("employer", location, "mill")
    db.session.commit()
    sending = with_commit._send

    def lost_on_the_way(connection, held):
        getattr(pg_proxy, fault)()  # after the reads: the writes go into the fault
        sending(connection, held)

    monkeypatch.setattr(with_commit, "_send", lost_on_the_way)
    client = proxied_app.test_client()
    vote = EMPLOYER_VOTE
    response, elapsed = timed(client.post, VOTE_URL, json=vote)
    assert_unavailable(response, elapsed, DB_BOUND)
    assert db.engine.pool.checkedout() == 0  # the lost connection gave its place back
    pg_proxy.restore()
    monkeypatch.setattr(with_commit, "_send", sending)

    def retried():
        again = client.post(VOTE_URL, json=vote)
        return again if again.status_code == 201 else None

    answer = eventually(retried)
    assert answer is not None
    db.session.rollback()
    assert db.session.scalars(select(Vote.id)).all() == [uuid.UUID(answer.get_json()["id"])]
    assert db.session.scalar(select(func.count()).select_from(OutboxMessage)) == 1


@needs_postgresql
def test_a_vote_whose_writes_wait_past_the_client_s_bound_is_refused_and_kept_nowhere(
    app_factory,
):
    """The writes travel in one round trip, bound as any (statement timeout + 1 s), while
    the server bounds each statement: two lock waits, each within the statement timeout,
    may pass the round trip's bound together. The client gives up (503) before the COMMIT
    is sent, so the server rolls the writes back: nothing is kept."""
    app = app_factory(DATABASE_STATEMENT_TIMEOUT=1.5)  # the client waits 2.5 s
    vote = {**EMPLOYER_VOTE, "employer": "works"}
    with app.app_context():
        harbour = make_location("harbour")
        works = make_listing("employer", harbour, "works")
        db.session.commit()
        location_id, employer_id = harbour.id, works.id
        # A first vote: the location's counts have their row, which the wait below locks.
        first = app.test_client().post(VOTE_URL, json={**vote, "yourEmail": "first@example.org"})
        assert first.status_code == 201, first.get_json()
    holders = create_engine(PG_URL)
    counts, employer = holders.connect(), holders.connect()
    try:
        counts.execute(
            text("SELECT 1 FROM vote_revisions WHERE location_id = :id FOR UPDATE"),
            {"id": location_id},
        )
        employer.execute(
            text("SELECT 1 FROM listings WHERE id = :id FOR NO KEY UPDATE"), {"id": employer_id}
        )
        released = []

        def release_from_the_first_write(_connection, _cursor, statement, *_args) -> None:
            # Timed from the writes' round trip, not from the request (whose reads before it
            # take longer on a loaded machine, and would leave the waits under the bound).
            if not released and statement.startswith(("INSERT", "UPDATE")):
                released.append(True)
                threading.Timer(1.4, counts.commit).start()  # each wait under 1.5 s
                threading.Timer(2.8, employer.commit).start()  # 2.8 s together

        with app.app_context():
            event.listen(db.engine, "before_cursor_execute", release_from_the_first_write)
            try:
                response, elapsed = timed(app.test_client().post, VOTE_URL, json=vote)
            finally:
                event.remove(db.engine, "before_cursor_execute", release_from_the_first_write)
            assert released
            assert_unavailable(response, elapsed, 4.0)
            time.sleep(1.0)  # the locks are gone: had the writes been committed, they would be
            db.session.rollback()
            assert db.session.scalars(select(Vote.your_email)).all() == ["first@example.org"]
            assert db.session.scalar(select(func.count()).select_from(OutboxMessage)) == 1
    finally:
        counts.close()
        employer.close()
        holders.dispose()


@needs_postgresql
def test_a_write_during_an_outage_is_refused_whole_and_the_retry_stores_it_once(
    proxied_app, pg_proxy
):
    make_user("boss@example.com", is_super=True)
    client = signed_in(proxied_app, "boss@example.com")

    pg_proxy.freeze()
    response, elapsed = timed(client.post, "/regions/", json={"name": "Lake District"})
    assert_unavailable(response, elapsed, DB_BOUND)
    pg_proxy.restore()

    def created():
        return client.post("/regions/", json={"name": "Lake District"}).status_code == 201

    assert eventually(created)
    db.session.rollback()
    count = db.session.scalar(select(func.count()).where(Region.name == "Lake District"))
    assert count == 1


@needs_postgresql
def test_the_outbox_worker_survives_a_database_outage_and_delivers_once(
    app, app_factory, pg_proxy, smtp_server, caplog
):
    catcher, port = smtp_server
    worker_app = app_factory(
        SQLALCHEMY_DATABASE_URI=proxied_url(pg_proxy), **DB_TIMEOUTS, **smtp_settings(port)
    )
    stop = threading.Event()

    def work() -> None:
        with worker_app.app_context():
            run_worker(0.1, stop=stop)

    pg_proxy.cut()
    worker = threading.Thread(target=work, daemon=True)
    with caplog.at_level(logging.ERROR, logger="directory_api.platform.outbox"):
        worker.start()
        try:
            assert eventually(lambda: "outbox pass failed" in caplog.text, 10)
            # Mail queued while the worker cannot reach the database (written directly).
            queue()
            pg_proxy.freeze()
            pg_proxy.restore()  # from cut to frozen to up again: the worker must ride it out
            time.sleep(0.5)
            assert worker.is_alive()
            assert eventually(lambda: len(catcher.messages) == 1, 20)
            time.sleep(0.5)  # a second delivery would land now
        finally:
            stop.set()
            worker.join(timeout=20)
    assert not worker.is_alive()
    assert len(catcher.messages) == 1
    [row] = queued_mail()
    assert row.status == OutboxStatus.SENT


# --- Redis (sessions and rate limits) ---------------------------------------------------

REDIS_BOUND = 3.0  # one read timeout (0.5 s), one retry, a reconnect: well under this


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    server = RedisServer(str(tmp_path))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_app(app_factory, redis_server):
    """Sessions and rate limits on the test's own Redis, with short timeouts."""
    built = app_factory(
        SESSION_TYPE="redis",
        REDIS_URL=redis_server.url,
        RATELIMIT_STORAGE_URI=redis_server.url,
        REDIS_CONNECT_TIMEOUT=0.5,
        REDIS_TIMEOUT=0.5,
    )
    with built.app_context():
        yield built


def login(client, email: str = "ann@example.com"):
    return client.post("/auth/login", json={"email": email, "password": PASSWORD})


def test_a_frozen_redis_answers_503_within_bounds_and_recovers(redis_app, redis_server):
    make_user("ann@example.com")
    client = redis_app.test_client()
    assert login(client).status_code == 200
    anonymous = redis_app.test_client()

    redis_server.freeze()
    try:
        # Anonymous reads touch neither sessions nor limits: they stay fast.
        response, elapsed = timed(anonymous.get, "/regions/")
        assert response.status_code == 200 and elapsed < 1.0
        assert_unavailable(*timed(client.get, "/me/"), REDIS_BOUND)
        assert_unavailable(*timed(login, redis_app.test_client()), REDIS_BOUND)
        response, elapsed = timed(anonymous.get, "/health/ready")
        assert_unavailable(response, elapsed, REDIS_BOUND)
        assert response.get_json()["checks"] == {"database": "ok", "redis": "down"}
    finally:
        redis_server.thaw()

    assert client.get("/me/").status_code == 200  # the same session, no restart
    assert login(redis_app.test_client()).status_code == 200


def test_a_stopped_redis_leaves_log_mode_votes_through_and_required_ones_503(
    app_factory, redis_server
):
    """Single use is kept in Redis: with it down, `log` (which refuses nothing) takes the
    vote unchecked; `required` cannot tell a used solution and answers 503. (Limits are
    in memory here, so what is seen is the challenge's own store.)"""
    from .test_public_forms import post, solve

    settings = {
        "REDIS_URL": redis_server.url,
        "SESSION_TYPE": "cachelib",
        "RATELIMIT_STORAGE_URI": "memory://",
        "REDIS_CONNECT_TIMEOUT": 0.5,
        "REDIS_TIMEOUT": 0.5,
    }
    logged = app_factory(VOTE_CHALLENGE="log", **settings)
    required = app_factory(VOTE_CHALLENGE="required", **settings)
    with logged.app_context():
        make_location("harbour", email="desk@harbour.example")
        solutions = [solve(logged.test_client()) for _ in range(2)]
        redis_server.kill()
        assert post(logged.test_client(), altcha=solutions[0]).status_code == 201
    with required.app_context():
        response, elapsed = timed(
            post, required.test_client(), yourEmail="b@example.org", altcha=solutions[1]
        )
        assert_unavailable(response, elapsed, REDIS_BOUND)
        assert db.session.scalar(select(func.count()).select_from(Vote)) == 1


def test_with_the_default_settings_a_frozen_redis_answers_within_10_seconds(
    app_factory, redis_server
):
    defaults = app_factory(
        SESSION_TYPE="redis", REDIS_URL=redis_server.url, RATELIMIT_STORAGE_URI=redis_server.url
    )
    with defaults.app_context():
        make_user("ann@example.com")
        client = defaults.test_client()
        assert login(client).status_code == 200
        redis_server.freeze()
        try:
            assert_unavailable(*timed(client.get, "/me/"), 10.0)
            assert_unavailable(*timed(login, defaults.test_client()), 10.0)
        finally:
            redis_server.thaw()


def test_a_killed_redis_answers_503_at_once_and_recovers_when_it_is_back(redis_app, redis_server):
    make_user("ann@example.com")
    client = redis_app.test_client()
    assert login(client).status_code == 200

    redis_server.kill()
    assert_unavailable(*timed(client.get, "/me/"), 2.0)
    assert_unavailable(*timed(login, redis_app.test_client()), 2.0)

    redis_server.start()  # same port, empty: the old session is gone, a new login works
    assert eventually(lambda: login(redis_app.test_client()).status_code == 200)
    assert client.get("/me/").status_code == 401


def test_redis_killed_after_the_limit_was_counted_leaves_the_answer_without_its_headers(
    redis_app, redis_server, caplog
):
    """The limit is counted before the view; the headers ask the store again after it."""
    killed_after_the_view = redis_app.after_request(
        lambda response: redis_server.kill() or response
    )
    client = redis_app.test_client()
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        response = client.post("/me/password-reset", json={"email": "ann@example.com"})
    assert response.status_code == 202, response.get_data(as_text=True)
    assert response.get_json() is not None
    assert not any(name.startswith("X-RateLimit") for name, _ in response.headers.items())
    assert [r.status for r in caplog.records if r.name == REQUESTS] == [202]
    redis_app.after_request_funcs[None].remove(killed_after_the_view)

    # Dead before the request: 503, still with no header and one log line.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        response = client.post("/me/password-reset", json={"email": "ann@example.com"})
    assert_unavailable(response, 0, 1)
    assert [r.status for r in caplog.records if r.name == REQUESTS] == [503]


def test_the_start_stops_if_the_limiter_s_header_hook_cannot_be_guarded():
    """A Flask-Limiter that registers its hook otherwise must not leave it unguarded."""
    from flask import Flask

    from directory_api.platform.limits import guard_limit_headers

    without = Flask("without-a-limiter")
    without.config["RATELIMIT_ENABLED"] = True
    with pytest.raises(RuntimeError, match="header hook was not found"):
        guard_limit_headers(without)
    disabled = Flask("limits-off")
    disabled.config["RATELIMIT_ENABLED"] = False
    guard_limit_headers(disabled)  # no hook to guard, nothing to say


def test_redis_killed_during_sign_ins_and_submissions_never_answers_500(
    redis_app, redis_server, caplog
):
    make_user("ann@example.com")
    make_location("harbour", email="votes@harbour.example")
    vote = {
        "yourName": "Vic",
        "yourEmail": "vic@example.com",
        "businessName": "Acme",
        "voteBody": "Good",
    }
    requests = [
        lambda client: login(client),
        lambda client: client.post("/locations/harbour/votes/submit/btoc", json=vote),
        lambda client: client.post("/me/password-reset", json={"email": "ann@example.com"}),
        lambda client: client.get("/me/"),
        lambda client: client.post("/auth/logout"),
    ]
    stop = threading.Event()

    def kill_and_restart() -> None:
        while not stop.is_set():
            time.sleep(0.05)
            redis_server.kill()
            time.sleep(0.05)
            redis_server.start()

    chaos = threading.Thread(target=kill_and_restart)
    statuses: list[int] = []
    client = redis_app.test_client()
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        chaos.start()
        try:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                for send in requests:
                    statuses.append(send(client).status_code)
        finally:
            stop.set()
            chaos.join()
    logged = [r.status for r in caplog.records if r.name == REQUESTS]
    assert 500 not in statuses
    assert 503 in statuses and {200, 202} & set(statuses)  # both sides of the outage were hit
    assert logged == statuses  # every answer has its request log line


@pytest.fixture
def secure_redis(tmp_path) -> Iterator[SecureRedisServer]:
    server = SecureRedisServer(str(tmp_path))
    server.start()
    yield server
    server.stop()


def test_sessions_and_limits_work_on_redis_over_tls_as_an_acl_user(app_factory, secure_redis):
    app = app_factory(
        SESSION_TYPE="redis",
        REDIS_URL=secure_redis.url,
        RATELIMIT_STORAGE_URI=secure_redis.url,
        RATELIMIT_LOGIN_PER_IP="2/minute",
    )
    with app.app_context():
        make_user("ann@example.com")
        client = app.test_client()
        assert login(client).status_code == 200
        assert client.get("/me/").get_json()["email"] == "ann@example.com"
        assert login(app.test_client()).status_code == 200
        assert login(app.test_client()).status_code == 429  # counted in that Redis
        assert app.test_client().get("/health/ready").get_json()["checks"]["redis"] == "ok"
    stored = list(redis.Redis.from_url(secure_redis.url).scan_iter())
    assert stored  # what was counted and kept is there, behind TLS and the ACL


def test_a_wrong_redis_password_is_503_never_500(app_factory, secure_redis):
    app = app_factory(
        SESSION_TYPE="redis",
        REDIS_URL=secure_redis.url_with("wrong"),
        RATELIMIT_STORAGE_URI=secure_redis.url_with("wrong"),
    )
    with app.app_context():
        make_user("ann@example.com")
        assert_unavailable(*timed(login, app.test_client()), REDIS_BOUND)
        ready = app.test_client().get("/health/ready")
        assert ready.status_code == 503 and ready.get_json()["checks"]["redis"] == "down"


def make_read_only(server: RedisServer) -> None:
    """A replica of nothing, as after a failover gone wrong: reads work, writes are refused."""
    client = redis.Redis.from_url(server.url)
    client.execute_command("REPLICAOF", "127.0.0.1", "1")
    client.close()


@pytest.fixture
def sessions_app(app_factory, redis_server):
    """Sessions on the test's own Redis, limits in memory (so only the session store fails);
    every request refreshes its stored session, so even a plain GET writes at its end."""
    built = app_factory(
        SESSION_TYPE="redis",
        REDIS_URL=redis_server.url,
        RATELIMIT_STORAGE_URI="memory://",
        REDIS_TIMEOUT=0.5,
        SESSION_TOUCH_INTERVAL=0,
    )
    with built.app_context():
        yield built


def test_a_login_whose_session_cannot_be_stored_is_503_and_did_not_happen(
    sessions_app, redis_server, caplog
):
    user = make_user("ann@example.com")
    make_read_only(redis_server)
    client = sessions_app.test_client()
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        response = login(client)
    assert response.status_code == 503
    assert response.mimetype == PROBLEM
    assert "Set-Cookie" not in response.headers
    assert [r.status for r in caplog.records if r.name == REQUESTS] == [503]
    db.session.rollback()
    assert db.session.get(User, user.id).last_login_at is None  # the login did not happen
    assert client.get("/me/").status_code == 401


def test_a_session_save_that_fails_after_the_view_is_503_logged_once(
    sessions_app, redis_server, caplog
):
    make_user("ann@example.com")
    client = sessions_app.test_client()
    assert login(client).status_code == 200
    make_read_only(redis_server)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        response = client.get("/me/", headers={"X-Request-ID": "save-fails"})
    assert response.status_code == 503
    assert response.mimetype == PROBLEM
    assert response.get_json()["status"] == 503
    assert "email" not in response.get_json()  # none of the answer it replaced
    assert response.headers["X-Request-ID"] == "save-fails"
    records = [r for r in caplog.records if r.name == REQUESTS]
    assert [(r.request_id, r.status) for r in records] == [("save-fails", 503)]

    # The logout cannot be recorded either: it says so rather than pretend.
    assert client.post("/auth/logout").status_code == 503


# --- SMTP -------------------------------------------------------------------------------


@pytest.fixture
def silent_smtp() -> Iterator[SilentSMTP]:
    server = SilentSMTP()
    yield server
    server.close()


def test_an_smtp_server_that_never_answers_fails_the_attempt_within_the_timeout(
    app_factory, silent_smtp, smtp_server
):
    silent = app_factory(
        MAIL_SERVER="127.0.0.1",
        MAIL_PORT=silent_smtp.port,
        MAIL_SUPPRESS_SEND=False,
        MAIL_TIMEOUT=0.5,
    )
    with silent.app_context():
        queue()
        output, elapsed = timed(send_outbox, silent)
        assert "sent 0, failed 1" in output
        assert elapsed < 3.0
        [row] = queued_mail()
        assert row.status == OutboxStatus.PENDING and row.attempts == 1
        assert "timed out" in row.last_error
        row.next_attempt_at = utcnow()
        db.session.commit()

    catcher, port = smtp_server
    with app_factory(**smtp_settings(port)).app_context():
        assert "sent 1, failed 0" in send_outbox(silent)  # any app: same database
    assert len(catcher.messages) == 1


def test_a_send_ends_before_its_lease_so_no_second_worker_overlaps_it(app_factory, silent_smtp):
    # The per-exchange timeout is longer than the lease: only the deadline can stop it.
    slow = app_factory(
        MAIL_SERVER="127.0.0.1",
        MAIL_PORT=silent_smtp.port,
        MAIL_SUPPRESS_SEND=False,
        MAIL_TIMEOUT=30,
        OUTBOX_LEASE_SECONDS=2,  # the deadline falls at 1 s, a second before the lease ends
    )
    with slow.app_context():
        queue()
        report, elapsed = timed(deliver_due)
        assert (report.sent, report.failed) == (0, 1)
        assert elapsed < 2.0  # ended (at 1 s) while the claim was still its own
        [row] = queued_mail()
        assert row.status == OutboxStatus.PENDING and row.attempts == 1


def test_a_claim_whose_worker_died_is_retried_after_its_lease_and_sent_once(
    app_factory, smtp_server, monkeypatch
):
    from directory_api.platform import leases, outbox

    catcher, port = smtp_server
    worker = app_factory(**smtp_settings(port), OUTBOX_LEASE_SECONDS=2)
    clock = Clock()
    for module in (outbox, leases):  # the lease is read off the queue's clock
        monkeypatch.setattr(module, "utcnow", clock)
    with worker.app_context():
        queue()
        assert outbox._claim_next() is not None  # a worker claims it, then dies
        clock.advance(seconds=1.9)
        assert deliver_due().sent == 0  # still leased
        clock.advance(seconds=0.2)
        assert deliver_due().sent == 1
        assert deliver_due().sent == 0
        [row] = queued_mail()
        assert (row.status, row.attempts) == (OutboxStatus.SENT, 2)
    assert len(catcher.messages) == 1


def test_a_late_outcome_never_overwrites_a_newer_claim(app_factory, smtp_server):
    from directory_api.platform import outbox

    catcher, port = smtp_server
    worker = app_factory(**smtp_settings(port), OUTBOX_LEASE_SECONDS=2)
    with worker.app_context():
        queue()
        stale = outbox._claim_next()
        db.session.query(OutboxMessage).update({"next_attempt_at": utcnow()})
        db.session.commit()
        assert deliver_due().sent == 1  # a second worker takes it over and sends it
        assert outbox._settle(stale, last_error="late") is False
        [row] = queued_mail()
        assert (row.status, row.last_error) == (OutboxStatus.SENT, None)
    assert len(catcher.messages) == 1


def test_every_delivery_is_logged_without_its_body(mail_app, mailbox, caplog):
    queue_mail("ann@example.com", "password_reset", user=None, token="secret-token-value")
    db.session.commit()
    with caplog.at_level(logging.INFO, logger="directory_api.platform.outbox"):
        send_outbox(mail_app)
    [row] = queued_mail()
    [line] = [r.getMessage() for r in caplog.records if "delivered" in r.getMessage()]
    assert line == f"mail {row.id} delivered: template=password_reset recipients=1 attempt=1"
    assert "secret-token-value" not in caplog.text
    assert mailbox.messages[0]["Message-ID"] == f"<{row.id}@localhost>"
