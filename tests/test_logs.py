"""One log line per request, with its id; no token, password or vote detail ever logged."""

import json
import logging

from directory_api.logs import JSONFormatter

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
