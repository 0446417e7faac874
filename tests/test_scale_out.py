"""Two gunicorn instances, one PostgreSQL database, one Redis: they share one state.

Runs where the real services are configured (CI's PostgreSQL + Redis pass); it needs
both, since with SQLite and file sessions there is nothing to share between hosts.
"""

import http.client
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import PG_URL, POOL_MODE, free_port
from .factories import PASSWORD, make_user

REDIS_URL = os.environ.get("TEST_REDIS_URL")
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not (PG_URL and REDIS_URL),
    reason="needs TEST_DATABASE_URL and TEST_REDIS_URL (CI's PostgreSQL + Redis pass runs it)",
)


def request(port: int, method: str, path: str, body=None, cookie: str | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if cookie:
        headers["Cookie"] = cookie
    connection.request(
        method, path, body=json.dumps(body) if body is not None else None, headers=headers
    )
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, response.headers, json.loads(data) if data else None


def wait_until_up(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gunicorn exited:\n{log.read_text()}")
        try:
            if request(port, "GET", "/health")[0] == 200:
                return
        except (TimeoutError, ConnectionError, OSError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"gunicorn on {port} did not come up:\n{log.read_text()}")


@pytest.fixture
def two_instances(app, tmp_path):
    run = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "APP_ENV": "production",
        "SECRET_KEY": "scale-out-tests-8Hq3mZ6wK1xV9cR4tB7p",
        "DATABASE_URL": PG_URL,
        "DATABASE_POOL_MODE": POOL_MODE,
        "REDIS_URL": REDIS_URL,
        "MAIL_SERVER": "127.0.0.1",
        "SESSION_COOKIE_SECURE": "false",  # plain http on loopback
        "SESSION_KEY_PREFIX": f"scale-{run}:",
        "RATELIMIT_KEY_PREFIX": f"scale-{run}",
        "RATELIMIT_LOGIN_PER_IP": "4/minute",
        "RATELIMIT_LOGIN_PER_EMAIL": "100/minute",
        "WEB_CONCURRENCY": "2",
    }
    processes, ports, logs = [], [], []
    try:
        for name in ("a", "b"):
            port = free_port()
            log = tmp_path / f"gunicorn-{name}.log"
            logs.append(log.open("w"))
            process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
                cwd=ROOT,
                env={**env, "GUNICORN_BIND": f"127.0.0.1:{port}"},
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
            )
            processes.append(process)
            wait_until_up(port, process, log)
            ports.append(port)
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        for log_file in logs:
            log_file.close()


def test_two_instances_share_sessions_logout_and_rate_limits(app, two_instances):
    make_user("ann@example.com")
    a, b = two_instances

    status, headers, body = request(
        a, "POST", "/auth/login", {"email": "ann@example.com", "password": PASSWORD}
    )
    assert status == 200, body
    cookie = headers["Set-Cookie"].split(";")[0]

    # The session made on A is honoured by B (and by every worker of each).
    for port in (b, a, b):
        status, _, body = request(port, "GET", "/me/", cookie=cookie)
        assert status == 200
        assert body["email"] == "ann@example.com"

    # A logout on B ends the session on A too.
    assert request(b, "POST", "/auth/logout", cookie=cookie)[0] == 204
    assert request(a, "GET", "/me/", cookie=cookie)[0] == 401
    assert request(b, "GET", "/me/", cookie=cookie)[0] == 401

    # The login limit (4 a minute per IP) counts requests to both instances together:
    # one login above, then three failures spread over A and B, then the fifth is refused.
    wrong = {"email": "ann@example.com", "password": "not the password"}
    assert [request(port, "POST", "/auth/login", wrong)[0] for port in (b, a, b)] == [401] * 3
    status, headers, body = request(a, "POST", "/auth/login", wrong)
    assert status == 429
    assert int(headers["Retry-After"]) > 0
    assert request(b, "POST", "/auth/login", wrong)[0] == 429
