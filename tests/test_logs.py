"""One log line per request, with its id; no token, password or vote detail ever logged."""

import json
import logging

import pytest

from directory_api.platform.logs import JSONFormatter

from .conftest import signed_in
from .factories import PASSWORD, make_user

REQUESTS = "directory_api.requests"


def request_records(caplog):
    return [r for r in caplog.records if r.name == REQUESTS]


def test_each_request_is_logged_once_with_its_id(client, app, caplog):
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        response = client.get("/regions/", headers={"X-Request-ID": "req-7"})
    [record] = request_records(caplog)
    assert (record.request_id, record.method, record.path, record.status) == (
        "req-7",
        "GET",
        "/regions/",
        200,
    )
    assert record.duration_ms >= 0
    assert record.user_id is None
    assert response.headers["X-Request-ID"] == "req-7"


def test_the_signed_in_user_is_logged_by_id_only(app, caplog):
    user = make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        client.get("/me/")
    record = request_records(caplog)[-1]
    assert record.path == "/me/"
    assert record.user_id == str(user.id)
    assert "ann@example.com" not in caplog.text


def test_tokens_and_passwords_never_reach_the_log(client, app, caplog):
    make_user("ann@example.com")
    token = "a-secret-reset-token-value-1234567890"
    with caplog.at_level(logging.DEBUG):
        client.post(f"/me/password-reset/{token}", json={"password": "a brand new passphrase"})
        client.post(f"/me/email-update/{token}")
        client.post("/auth/login", json={"email": "ann@example.com", "password": PASSWORD})
    assert token not in caplog.text
    assert PASSWORD not in caplog.text
    assert "a brand new passphrase" not in caplog.text
    paths = [r.path for r in request_records(caplog)]
    assert "/me/password-reset/[redacted]" in paths
    assert "/me/email-update/[redacted]" in paths


def test_vote_details_are_not_logged(client, app, caplog):
    from .factories import make_location

    make_location("harbour", email="inbox@harbour.example")
    body = {
        "yourName": "Val Voter",
        "yourEmail": "val@example.com",
        "yourPhone": "+44 1",
        "businessName": "Acme",
        "businessBranch": "North",
        "voteBody": "Secretly great",
    }
    with caplog.at_level(logging.DEBUG):
        assert client.post("/locations/harbour/votes/submit/btoc", json=body).status_code == 202
    for value in body.values():
        assert value not in caplog.text


def test_json_lines_carry_the_request_fields():
    record = logging.LogRecord(REQUESTS, logging.INFO, __file__, 1, "GET / 200", None, None)
    record.request_id, record.method, record.status = "req-1", "GET", 200
    line = json.loads(JSONFormatter().format(record))
    assert line["request_id"] == "req-1"
    assert (line["level"], line["logger"], line["message"]) == ("INFO", REQUESTS, "GET / 200")
    assert line["status"] == 200 and line["time"].endswith("+00:00")


def test_control_characters_in_a_path_never_start_a_second_line(client, app, caplog):
    from directory_api.platform.logs import TEXT_FORMAT

    attempts = {
        "/regions/%0d%0aINFO fake line": "/regions/\\r\\nINFO fake line",
        "/regions/%00%1b[31m%7f": "/regions/\\x00\\x1b[31m\\x7f",
        "/regions/a%e2%80%a8b%c2%85c": "/regions/a\\u2028b\\x85c",
        "/regions/back%5cslash": "/regions/back\\\\slash",
    }
    for path, logged in attempts.items():
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=REQUESTS):
            assert client.get(path).status_code == 404
        [record] = request_records(caplog)
        assert record.path == logged
        assert record.getMessage() == f"GET {logged} 404"
        for formatter in (logging.Formatter(TEXT_FORMAT), JSONFormatter()):
            assert len(formatter.format(record).splitlines()) == 1
        assert len(caplog.text.splitlines()) == 1


def test_a_request_with_a_valid_reset_token_is_logged_redacted(client, app, caplog):
    from .conftest import reset_token, start_reset

    make_user("ann@example.com")
    start_reset(client, "ann@example.com")
    token = reset_token("ann@example.com")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=REQUESTS):
        response = client.post(
            f"/me/password-reset/{token}", json={"password": "a brand new passphrase"}
        )
    assert response.status_code == 204
    [record] = request_records(caplog)
    assert (record.path, record.status) == ("/me/password-reset/[redacted]", 204)
    assert token not in caplog.text


TOKEN = "a-secret-token-value-1234567890"


@pytest.mark.parametrize(
    ("method", "path", "status", "logged"),
    [
        ("POST", f"/me/password-reset/{TOKEN}", 404, "/me/password-reset/[redacted]"),
        ("GET", f"/me/password-reset/{TOKEN}", 405, "/me/password-reset/[redacted]"),
        ("DELETE", f"/me/email-update/{TOKEN}", 405, "/me/email-update/[redacted]"),
        ("POST", f"/me/email-update/{TOKEN}/extra", 404, "/me/email-update/[redacted]"),
        ("GET", f"/me/roles/accept/{TOKEN}", 405, "/me/roles/accept/[redacted]"),
        ("GET", f"/votes/confirm/{TOKEN}", None, "/votes/confirm/[redacted]"),
        ("GET", f"/votes/withdraw/{TOKEN}", None, "/votes/withdraw/[redacted]"),
        ("POST", f"/ME/Password-Reset/{TOKEN}", 404, "/me/password-reset/[redacted]"),
        ("POST", f"/me//password-reset//{TOKEN}", None, "/me/password-reset/[redacted]"),
    ],
)
def test_tokens_are_redacted_whatever_the_status(client, app, caplog, method, path, status, logged):
    with caplog.at_level(logging.DEBUG):
        response = client.open(path, method=method, json={"password": "a brand new passphrase"})
    if status is not None:
        assert response.status_code == status
    [record] = request_records(caplog)
    assert record.path == logged
    assert record.status == response.status_code
    assert TOKEN not in caplog.text


def test_every_route_that_takes_a_token_is_redacted_by_its_path(app):
    from directory_api.platform.logs import TOKEN_PATH_PREFIXES

    token_routes = [rule.rule for rule in app.url_map.iter_rules() if "token" in rule.arguments]
    assert token_routes
    for route in token_routes:
        assert route.startswith(TOKEN_PATH_PREFIXES), f"{route} is not in TOKEN_PATH_PREFIXES"


def test_the_development_server_logs_each_request_once(app, caplog):
    """Issue 35: `flask run` printed two lines per request, werkzeug's (with any token in
    the path) and this package's. Served here by werkzeug's own development server."""
    import threading
    import urllib.request

    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        with caplog.at_level(logging.INFO):
            url = f"http://127.0.0.1:{server.port}/regions/"
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200
    finally:
        server.shutdown()
        thread.join()
    lines = [record for record in caplog.records if "/regions/" in record.getMessage()]
    assert [record.name for record in lines] == ["directory_api.requests"]
    # Its other lines (the banner, errors) still show.
    logging.getLogger("werkzeug").info(" * Running on http://127.0.0.1:5000")
    assert caplog.records[-1].getMessage() == " * Running on http://127.0.0.1:5000"
