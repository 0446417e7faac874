"""Every error is application/problem+json, whatever layer raised it."""

import logging

import pytest
from sqlalchemy.exc import IntegrityError

from .conftest import assert_problem


def test_unknown_route_is_404(client, app):
    assert_problem(client.get("/no/such/route"), 404)


def test_wrong_method_is_405_with_allow(client, app):
    response = client.delete("/regions/")
    assert_problem(response, 405)
    assert {"GET", "POST"} <= set(response.headers["Allow"].split(", "))


def test_malformed_json_is_400(super_client, app):
    response = super_client.post("/regions/", data='{"name": ', content_type="application/json")
    assert assert_problem(response, 400)["detail"] == "The request body is not valid JSON."


def test_json_that_is_not_an_object_is_422(super_client, app):
    body = assert_problem(super_client.post("/regions/", json=["North"]), 422)
    assert body["errors"] == {"_schema": ["Expected a JSON object."]}


def test_oversized_body_is_413(super_client, app):
    response = super_client.post("/regions/", json={"name": "x" * (65 * 1024)})
    assert_problem(response, 413)


def test_validation_errors_name_every_field_at_once(super_client, app):
    body = assert_problem(
        super_client.post("/regions/", json={"slug": "Bad Slug", "colour": "red"}), 422
    )
    assert set(body["errors"]) == {"slug", "colour", "name"}
    assert body["detail"] == "The request body has invalid fields."


@pytest.fixture
def failing_app(app_factory):
    app = app_factory()

    @app.get("/boom")
    def boom():
        raise RuntimeError("SELECT password_hash FROM users -- secret")

    @app.get("/conflict")
    def conflict():
        raise IntegrityError("INSERT INTO regions", {}, Exception("duplicate key"))

    return app


def test_unexpected_error_is_500_without_a_trace(failing_app, caplog):
    with caplog.at_level(logging.ERROR):
        response = failing_app.test_client().get("/boom", headers={"X-Request-ID": "req-42"})
    body = assert_problem(response, 500)
    assert body["requestId"] == "req-42"
    text = response.get_data(as_text=True)
    assert "secret" not in text
    assert "Traceback" not in text
    assert "req-42" in caplog.text and "RuntimeError" in caplog.text


def test_integrity_error_is_409(failing_app):
    body = assert_problem(failing_app.test_client().get("/conflict"), 409)
    assert "INSERT" not in body["detail"]


def test_database_down_is_503(app_factory):
    app = app_factory(SQLALCHEMY_DATABASE_URI="postgresql+psycopg://postgres@127.0.0.1:1/none")
    client = app.test_client()
    body = assert_problem(client.get("/regions/"), 503)
    assert "database" in body["detail"]
    assert_problem(client.get("/health"), 503)


def test_health_is_ok_when_the_database_answers(client, app):
    response = client.get("/health")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/auth/login", "/regions/"])
def test_json_nested_too_deeply_is_400_not_500(super_client, app, path):
    response = super_client.post(
        path, data="[" * 5000 + "]" * 5000, content_type="application/json"
    )
    assert_problem(response, 400)


def test_json_must_be_utf8(super_client, app):
    body = '{"name": "North"}'.encode("utf-16")
    assert_problem(super_client.post("/regions/", data=body, content_type="application/json"), 400)


def test_control_characters_in_text_are_422(super_client, app):
    body = assert_problem(super_client.post("/regions/", json={"name": "Nor\u0000th"}), 422)
    assert body["errors"]["name"] == ["Contains control characters."]
    login = super_client.post("/auth/login", json={"email": "a\u0000@example.com", "password": "x"})
    assert login.status_code in (401, 422)


def test_a_path_segment_that_is_no_slug_is_404(client, app):
    for path in ("/regions/slug/a%00b", "/regions/slug/UPPER", "/categories/slug/a--b"):
        assert_problem(client.get(path), 404)


def test_a_missing_trailing_slash_is_not_an_html_redirect(super_client, app):
    response = super_client.post("/regions", json={"name": "North"})
    assert response.status_code == 201
    listed = super_client.get("/regions")
    assert listed.status_code == 200
    assert listed.get_json()["total"] == 1


def test_ready_reports_each_backing_service(client, app):
    response = client.get("/health/ready")
    assert response.status_code == 200
    checks = response.get_json()["checks"]
    assert checks["database"] == "ok"
    assert ("redis" in checks) == bool(app.config.get("REDIS_URL"))


def test_ready_is_503_naming_what_failed(app_factory):
    app = app_factory(RATELIMIT_STORAGE_URI="redis://127.0.0.1:1/0")
    body = assert_problem(app.test_client().get("/health/ready"), 503)
    assert body["checks"] == {"database": "ok", "redis": "down"}
    assert "redis" in body["detail"]


def test_unknown_hosts_are_refused_when_trusted_hosts_are_set(app_factory):
    app = app_factory(TRUSTED_HOSTS=["api.example.org"])
    client = app.test_client()
    assert client.get("/health", headers={"Host": "api.example.org"}).status_code == 200
    refused = client.get("/health", headers={"Host": "evil.example"})
    assert_problem(refused, 400)
    assert "JSON" not in refused.get_json().get("detail", "")


def test_an_unknown_route_or_method_wins_over_a_bad_body(client, app):
    assert_problem(client.post("/nope", data="x", content_type="text/plain"), 404)
    assert_problem(client.delete("/regions/", data="x", content_type="text/plain"), 405)


def test_database_errors_are_logged_without_their_values(app_factory, caplog):
    app = app_factory()

    @app.get("/duplicate")
    def duplicate():
        raise IntegrityError(
            "INSERT INTO users", {}, Exception("Key (email)=(alice@example.com) already exists")
        )

    with caplog.at_level(logging.INFO):
        assert_problem(app.test_client().get("/duplicate"), 409)
    assert "alice@example.com" not in caplog.text


def test_an_unreachable_session_store_is_503(app_factory):
    app = app_factory(SESSION_TYPE="redis", REDIS_URL="redis://127.0.0.1:1/0")
    client = app.test_client()
    # Anonymous public reads never touch the store.
    assert client.get("/regions/").status_code == 200
    client.set_cookie("session", "some-session-id")
    body = assert_problem(client.get("/me/"), 503)
    assert "store" in body["detail"]


def test_an_unreachable_rate_limit_store_is_503(app_factory):
    app = app_factory(RATELIMIT_STORAGE_URI="redis://127.0.0.1:1/0")
    response = app.test_client().post(
        "/auth/login", json={"email": "a@example.com", "password": "x"}
    )
    assert_problem(response, 503)


def test_an_unreachable_rate_limit_store_is_503_before_any_route_with_meta_limits(app_factory):
    """With RATELIMIT_META set, Flask-Limiter asks the store before every request: a store
    that does not answer is a 503 problem there too, not a 500."""
    app = app_factory(RATELIMIT_META="2/hour", RATELIMIT_STORAGE_URI="redis://127.0.0.1:1/0")
    body = assert_problem(app.test_client().get("/regions/"), 503)
    assert "store" in body["detail"]
