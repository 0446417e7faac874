"""GET /metrics (API.md 18): route templates as labels (never a raw path), who may read
it, the backlogs read at scrape time, and one view of every gunicorn worker, recycled
ones included."""

import http.client
import re

from directory_api.credentials import create_api_token

from .conftest import assert_problem, queued_mail
from .factories import make_location, make_user
from .test_server import gunicorn

ELSEWHERE = {"REMOTE_ADDR": "10.9.8.7"}


def scrape(client, **kwargs) -> str:
    response = client.get("/metrics", **kwargs)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "text/plain"
    assert response.headers["Cache-Control"] == "no-store"
    return response.get_data(as_text=True)


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name{labels}` (labels in any order), if scraped."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_scrape_shows_route_templates_and_never_a_raw_path(app_factory):
    app = app_factory()
    with app.app_context():
        make_location("harbour")
        client = app.test_client()
        before = scrape(client)
        route = "/locations/<slug:slug>/businesses/"
        was = sample(before, "http_requests_total", method="GET", route=route, status="2xx") or 0
        for _ in range(3):
            assert client.get("/locations/harbour/businesses/").status_code == 200
        assert client.get("/locations/nowhere/businesses/").status_code == 404
        assert client.get("/no/such/path/a1b2c3").status_code == 404
        text = scrape(client)
    assert sample(text, "http_requests_total", method="GET", route=route, status="2xx") == was + 3
    assert sample(text, "http_requests_total", method="GET", route=route, status="4xx") >= 1
    assert sample(text, "http_requests_total", method="GET", route="<unmatched>", status="4xx")
    assert sample(text, "http_request_duration_seconds_count", route=route) >= 3
    assert "harbour" not in text and "nowhere" not in text and "a1b2c3" not in text
    assert 'route="/metrics"' not in text  # not counted in itself
    assert "_created" not in text


def test_only_allowed_addresses_or_a_supers_audit_token_may_read_it(app_factory):
    app = app_factory()
    with app.app_context():
        root = make_user("root@example.com", is_super=True)
        plain = make_user("plain@example.com")
        reading = create_api_token(
            root, {"name": "prometheus", "scopes": ["audit:read"], "expires_in_days": 30}, "dapi_"
        ).secret
        narrow = create_api_token(
            root, {"name": "other", "scopes": ["directory:read"], "expires_in_days": 30}, "dapi_"
        ).secret
        theirs = create_api_token(
            plain, {"name": "mine", "scopes": ["audit:read"], "expires_in_days": 30}, "dapi_"
        ).secret
        from directory_api.platform.extensions import db

        db.session.commit()
        client = app.test_client()
        assert_problem(client.get("/metrics", environ_base=ELSEWHERE), 404)
        stranger = client.get("/metrics", environ_base=ELSEWHERE).get_json()
        # A token of another scope or user, or none of this service (malformed, unknown,
        # revoked): the same 404, never a 401 telling a stranger the route is there.
        revoked_or_made_up = "dapi_" + "x" * 43
        for secret in (narrow, theirs, "not-a-token", revoked_or_made_up):
            bearer = {"Authorization": f"Bearer {secret}"}
            response = client.get("/metrics", environ_base=ELSEWHERE, headers=bearer)
            assert_problem(response, 404)
            assert response.get_json() == stranger
            assert "WWW-Authenticate" not in response.headers
        # A dead token is no token: from an allowed address, the scrape is answered.
        stale = {"Authorization": f"Bearer {revoked_or_made_up}"}
        assert "http_requests_total" in scrape(client, headers=stale)
        bearer = {"Authorization": f"Bearer {reading}"}
        assert "http_requests_total" in scrape(client, environ_base=ELSEWHERE, headers=bearer)
    opened = app_factory(METRICS_ALLOW=["10.0.0.0/8"])
    with opened.app_context():
        assert "http_requests_total" in scrape(opened.test_client(), environ_base=ELSEWHERE)
        assert_problem(opened.test_client().get("/metrics"), 404)  # loopback: not listed now


def test_through_a_proxy_not_declared_the_address_is_not_the_clients(app_factory, caplog):
    """Behind nginx with PROXY_FIX_X_FOR=0 every client shows as loopback; a request that
    carries X-Forwarded-For is then not let in by its (the proxy's) address."""
    from directory_api.platform import metrics

    metrics.WARNED_OF_PROXY.clear()
    forwarded = {"X-Forwarded-For": "203.0.113.9"}
    app = app_factory()
    with app.app_context():
        client = app.test_client()
        assert_problem(client.get("/metrics", headers=forwarded), 404)
        assert "PROXY_FIX_X_FOR is 0" in caplog.text
        caplog.clear()
        assert_problem(client.get("/metrics", headers=forwarded), 404)
        assert "PROXY_FIX_X_FOR" not in caplog.text  # said once: anyone may send the header
        assert "http_requests_total" in scrape(client)  # loopback, no proxy: answered
    declared = app_factory(PROXY_FIX_X_FOR=1)
    with declared.app_context():
        client = declared.test_client()
        assert_problem(client.get("/metrics", headers=forwarded), 404)  # the real client
        loopback = {"X-Forwarded-For": "127.0.0.1"}
        assert "http_requests_total" in scrape(client, headers=loopback)


def test_the_backlogs_are_read_at_scrape_time(app_factory):
    from directory_api.platform.outbox import queue_mail

    app = app_factory()
    with app.app_context():
        from directory_api.platform.extensions import db

        queue_mail("someone@example.org", "password_changed", user=None)
        db.session.commit()
        assert len(queued_mail()) == 1
        text = scrape(app.test_client())
    assert sample(text, "outbox_pending") is None  # a gauge without labels: no braces
    assert "outbox_pending 1.0" in text
    assert "outbox_retrying 0.0" in text  # not attempted yet
    assert re.search(r"^outbox_oldest_pending_age_seconds \d", text, re.M)
    assert "votes_awaiting_moderation 0.0" in text
    assert "webhook_deliveries_pending 0.0" in text


def test_a_database_that_does_not_answer_leaves_the_backlogs_out(app_factory, tmp_path):
    app = app_factory(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path}/missing/directory.sqlite3")
    with app.app_context():
        text = scrape(app.test_client())
    assert "http_requests_total" in text or "http_request_duration_seconds" in text
    assert "outbox_pending" not in text


def test_every_worker_recycled_or_not_is_in_one_view(migrated_database, tmp_path):
    """Two gunicorn workers recycled every 5 requests: 40 requests later, one scrape of
    any worker counts all 40, and shows no series of a dead worker's own."""
    with gunicorn(
        migrated_database,
        tmp_path,
        WEB_CONCURRENCY="2",
        GUNICORN_MAX_REQUESTS="5",
        TRUSTED_HOSTS="127.0.0.1",
    ) as server:
        before = fetch(server.port, "/metrics")  # the start-up check asked /health already
        for _ in range(40):
            fetch(server.port, "/health")
        text = fetch(server.port, "/metrics")
    labels = {"method": "GET", "route": "/health", "status": "2xx"}
    counted = sample(text, "http_requests_total", **labels) - sample(
        before, "http_requests_total", **labels
    )
    assert counted == 40
    timed = sample(text, "http_request_duration_seconds_count", route="/health") - sample(
        before, "http_request_duration_seconds_count", route="/health"
    )
    assert timed == 40
    assert "pid=" not in text


def fetch(port: int, path: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        assert answer.status == 200, answer.status
        return answer.read().decode()
    finally:
        connection.close()


def total(text: str, name: str) -> float:
    """The sum of every series of `name`."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def test_votes_sign_ins_refusals_and_dependency_errors_are_counted(app_factory, tmp_path):
    from .factories import PASSWORD
    from .test_votes import body_for

    app = app_factory(RATELIMIT_LOGIN_PER_IP="2/minute")
    with app.app_context():
        make_location("harbour", email="desk@harbour.example")
        make_user("ann@example.com")
        client = app.test_client()
        before = scrape(client)
        votes = "/locations/harbour/votes/submit/"
        assert client.post(votes + "btoc", json=body_for("btoc")).status_code == 202
        assert client.post(votes + "employer", json=body_for("employer")).status_code == 201
        login = "/auth/login"
        assert (
            client.post(login, json={"email": "ann@example.com", "password": "no"}).status_code
            == 401
        )
        right = {"email": "ann@example.com", "password": PASSWORD}
        assert app.test_client().post(login, json=right).status_code == 200
        assert app.test_client().post(login, json=right).status_code == 429
        after = scrape(client)
    for name, labels in (
        ("votes_submitted_total", {"type": "btoc", "outcome": "accepted"}),
        ("votes_submitted_total", {"type": "employer", "outcome": "accepted"}),
        ("sign_ins_total", {"result": "failed"}),
        ("sign_ins_total", {"result": "succeeded"}),
    ):
        assert (sample(after, name, **labels) or 0) - (sample(before, name, **labels) or 0) == 1
    assert (
        total(after, "rate_limit_refusals_total") - total(before, "rate_limit_refusals_total") == 1
    )
    broken = app_factory(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path}/missing/x.sqlite3")
    with broken.app_context():
        client = broken.test_client()
        was = sample(scrape(client), "dependency_errors_total", dependency="database") or 0
        assert client.get("/regions/").status_code == 503
        now = sample(scrape(client), "dependency_errors_total", dependency="database")
    assert now == was + 1


def test_mail_that_smtp_refused_shows_as_retrying(app_factory):
    """SMTP's trouble, seen from the web: mail waiting again after a failed attempt."""
    from directory_api.platform.extensions import db
    from directory_api.platform.outbox import queue_mail

    from .conftest import free_port, send_outbox, smtp_settings

    down = app_factory(**smtp_settings(free_port()))  # nothing listens there
    with down.app_context():
        queue_mail("someone@example.org", "password_changed", user=None)
        db.session.commit()
        assert "sent 0, failed 1" in send_outbox(down)
        text = scrape(down.test_client())
    assert "outbox_retrying 1.0" in text and "outbox_pending 1.0" in text
