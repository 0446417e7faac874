"""Cross-site refusal, CORS, JSON-only bodies and the headers every response carries."""

import io

import pytest

from config import SettingsError
from directory_api.models import Region

from .conftest import signed_in
from .factories import PASSWORD, make_location, make_user

FRONTEND = "https://admin.example.org"
MULTIPART = '--x\r\nContent-Disposition: form-data; name="name"\r\n\r\nNorth\r\n--x--\r\n'


def preflight_post(client, path: str, origin: str):
    """What a browser asks before a page of `origin` posts JSON to `path`."""
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Content-Type",
        },
    )


def create_region(client, **kwargs):
    return client.post("/regions/", json={"name": "North"}, **kwargs)


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "http://localhost.evil.example"]
)
def test_unsafe_request_from_a_foreign_origin_is_refused(super_client, app, origin):
    response = create_region(super_client, headers={"Origin": origin})
    assert response.status_code == 403
    assert response.mimetype == "application/problem+json"
    assert "Cross-site" in response.get_json()["detail"]
    assert Region.query.count() == 0


def test_cross_site_fetch_metadata_without_origin_is_refused(super_client, app):
    response = create_region(super_client, headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert Region.query.count() == 0


def test_same_origin_and_curl_requests_pass(super_client, app):
    assert create_region(super_client, headers={"Origin": "http://localhost"}).status_code == 201
    response = super_client.post(
        "/regions/", json={"name": "South"}, headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert response.status_code == 201
    # curl sends neither header.
    assert super_client.post("/regions/", json={"name": "East"}).status_code == 201


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://localhost", 201),
        ("http://LOCALHOST:80", 201),  # the same origin, spelt out
        ("https://localhost", 403),  # another scheme: another origin
        ("http://localhost:8080", 403),  # another port
        ("http://localhost:99999", 403),  # no port at all
        ("ftp://localhost", 403),
    ],
)
def test_the_own_origin_is_its_scheme_host_and_port(super_client, app, origin, status):
    assert create_region(super_client, headers={"Origin": origin}).status_code == status


def test_behind_a_tls_proxy_the_own_origin_is_https(app_factory):
    app = app_factory(PROXY_FIX_X_PROTO=1)
    with app.app_context():
        make_user("super@example.com", is_super=True)
    client = signed_in(app, "super@example.com")
    proxied = {"X-Forwarded-Proto": "https"}
    refused = create_region(client, headers={**proxied, "Origin": "http://localhost"})
    assert refused.status_code == 403
    accepted = create_region(client, headers={**proxied, "Origin": "https://localhost"})
    assert accepted.status_code == 201


def test_a_tls_proxy_without_proxy_fix_x_proto_is_named_in_the_log(super_client, app, caplog):
    """The refusal stands (the service cannot tell), and the log says what to set."""
    response = create_region(super_client, headers={"Origin": "https://localhost"})
    assert response.status_code == 403
    assert "PROXY_FIX_X_PROTO" in caplog.text
    caplog.clear()
    create_region(super_client, headers={"Origin": "https://evil.example"})
    assert "PROXY_FIX_X_PROTO" not in caplog.text  # a foreign page is no misconfiguration


def test_hsts_is_sent_over_https_only(app_factory):
    app = app_factory(HSTS_MAX_AGE=600, PROXY_FIX_X_PROTO=1)
    client = app.test_client()
    assert "Strict-Transport-Security" not in client.get("/regions/").headers
    over_tls = client.get("/regions/", headers={"X-Forwarded-Proto": "https"})
    assert over_tls.headers["Strict-Transport-Security"] == "max-age=600"
    direct = client.get("/regions/", base_url="https://localhost")
    assert direct.headers["Strict-Transport-Security"] == "max-age=600"
    missing = client.get("/nowhere", base_url="https://localhost")
    assert missing.status_code == 404 and "Strict-Transport-Security" in missing.headers
    wide = app_factory(HSTS_MAX_AGE=600, HSTS_INCLUDE_SUBDOMAINS=True)
    answer = wide.test_client().get("/", base_url="https://localhost")
    assert answer.headers["Strict-Transport-Security"] == "max-age=600; includeSubDomains"


def test_without_hsts_max_age_no_header_is_sent(client):
    assert "Strict-Transport-Security" not in client.get("/", base_url="https://localhost").headers


def test_a_host_prefixed_cookie_signs_in_over_https(app_factory):
    app = app_factory(SESSION_COOKIE_NAME="__Host-session", SESSION_COOKIE_SECURE=True)
    with app.app_context():
        make_user("ann@example.com")
    client = app.test_client()
    response = client.post(
        "/auth/login",
        json={"email": "ann@example.com", "password": PASSWORD},
        base_url="https://localhost",
    )
    assert response.status_code == 200, response.get_json()
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("__Host-session=")
    assert "Secure" in cookie and "Path=/" in cookie and "Domain" not in cookie
    me = client.get("/me/", base_url="https://localhost")
    assert me.status_code == 200 and me.get_json()["email"] == "ann@example.com"
    assert me.headers["Cache-Control"] == "no-store"  # known as signed in by that name


def test_reads_from_any_origin_are_not_refused(client, app):
    response = client.get("/regions/", headers={"Origin": "https://evil.example"})
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response.headers


def test_cors_answers_only_the_configured_origins_with_credentials(app_factory):
    app = app_factory(CORS_ORIGINS=[FRONTEND])
    with app.app_context():
        make_user("super@example.com", is_super=True)
    client = signed_in(app, "super@example.com")
    preflight = preflight_post(client, "/regions/", FRONTEND)
    assert preflight.headers["Access-Control-Allow-Origin"] == FRONTEND
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]

    response = create_region(client, headers={"Origin": FRONTEND})
    assert response.status_code == 201
    assert response.headers["Access-Control-Allow-Origin"] == FRONTEND
    assert "Location" in response.headers["Access-Control-Expose-Headers"]

    refused = client.post(
        "/regions/", json={"name": "South"}, headers={"Origin": "https://other.example"}
    )
    assert refused.status_code == 403
    assert "Access-Control-Allow-Origin" not in refused.headers


def test_the_frontend_may_send_a_token_and_a_public_form_s_page_may_not(app_factory):
    app = app_factory(CORS_ORIGINS=[FRONTEND])
    client = app.test_client()
    asks = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "Authorization",
    }
    frontend = client.options("/regions/", headers={"Origin": FRONTEND, **asks})
    assert "authorization" in frontend.headers["Access-Control-Allow-Headers"].lower()
    form = client.options(
        "/locations/harbour/votes/submit/employer",
        headers={"Origin": "https://shop.example", **asks},
    )
    assert "authorization" not in form.headers.get("Access-Control-Allow-Headers", "").lower()


@pytest.mark.parametrize(
    ("content_type", "data"),
    [
        ("text/plain", '{"name": "North"}'),
        ("application/x-www-form-urlencoded", "name=North"),
        ("multipart/form-data; boundary=x", MULTIPART),
        ("application/xml", "<name>North</name>"),
    ],
)
def test_bodies_must_be_json(super_client, app, content_type, data):
    response = super_client.post("/regions/", data=data, content_type=content_type)
    assert response.status_code == 415
    assert response.mimetype == "application/problem+json"
    assert Region.query.count() == 0


def test_a_body_on_an_endpoint_without_one_must_be_json_too(super_client, app):
    response = super_client.post("/auth/logout", data="x=1", content_type="text/plain")
    assert response.status_code == 415
    assert super_client.get("/me/").status_code == 200


def test_login_refuses_a_form_post(client, app):
    make_user("ann@example.com")
    response = client.post(
        "/auth/login",
        data={"email": "ann@example.com", "password": "correct horse battery"},
    )
    assert response.status_code == 415


def test_every_response_carries_the_safety_headers(client, app):
    for response in (client.get("/regions/"), client.get("/nowhere"), client.delete("/regions/")):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert len(response.headers["X-Request-ID"]) >= 16
    assert "no-store" not in client.get("/regions/").headers.get("Cache-Control", "")


def test_request_id_is_taken_from_the_request_when_sane(client, app):
    given = client.get("/health", headers={"X-Request-ID": "abc-123"})
    assert given.headers["X-Request-ID"] == "abc-123"
    replaced = client.get("/health", headers={"X-Request-ID": "bad id <script>"})
    assert replaced.headers["X-Request-ID"] != "bad id <script>"


def test_signed_in_answers_are_not_cached(super_client, app):
    response = super_client.get("/regions/")
    assert response.headers["Cache-Control"] == "no-store"
    assert "Cookie" in response.headers["Vary"]


@pytest.mark.parametrize(
    "origins",
    [
        ["*"],
        ["https://admin.example.org/"],
        ["https://*.example.org"],
        ["admin.example.org"],
        ["https://admin.example.org/app"],
    ],
)
def test_only_exact_cors_origins_are_accepted(app_factory, origins):
    with pytest.raises(SettingsError, match="CORS_ORIGINS"):
        app_factory(CORS_ORIGINS=origins)


def test_chunked_bodies_are_checked_whatever_the_header_case(super_client, app):
    # Logout takes no body, so only the guard can refuse this one.
    response = super_client.post(
        "/auth/logout",
        input_stream=io.BytesIO(b"x=1"),
        headers={"Transfer-Encoding": "Chunked", "Content-Type": "text/plain"},
    )
    assert response.status_code == 415
    assert super_client.get("/me/").status_code == 200


VOTE = {
    "yourName": "Ann",
    "yourEmail": "ann@example.org",
    "yourPhone": "+44 1",
    "businessName": "Bakery",
    "businessBranch": "Quay",
    "voteBody": "Good bread.",
}


@pytest.mark.parametrize("origin", ["https://any-charity.example", "null"])
def test_a_public_vote_form_on_any_site_may_post_and_read_the_answer(app, client, origin):
    """The submission uses no credentials, so any page may send it (issue 18)."""
    make_location("harbour", email="votes@harbour.example")
    path = "/locations/harbour/votes/submit/btoc"
    preflight = preflight_post(client, path, origin)
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in preflight.headers
    assert "content-type" in preflight.headers["Access-Control-Allow-Headers"].lower()

    sent = client.post(path, json=VOTE, headers={"Origin": origin})
    assert sent.status_code == 202, sent.get_json()
    assert sent.headers["Access-Control-Allow-Origin"] == "*"
    form = client.post(path, data=VOTE, headers={"Origin": origin, "Sec-Fetch-Site": "cross-site"})
    assert form.status_code == 202, form.get_json()


def test_a_cookie_sent_along_with_a_public_form_is_not_used(app_factory):
    """Someone signed in who submits through another site's form counts as signed out."""
    app = app_factory(CORS_ORIGINS=[FRONTEND])
    with app.app_context():
        make_user("super@example.com", is_super=True)
        make_location("harbour", email="votes@harbour.example")
    staff = signed_in(app, "super@example.com")
    sent = staff.post(
        "/locations/harbour/votes/submit/btoc",
        json=VOTE,
        headers={"Origin": "https://any-charity.example"},
    )
    assert sent.status_code == 202
    assert "Set-Cookie" not in sent.headers  # the session is neither used nor kept alive
    assert staff.get("/audit/?action=vote.create").get_json()["total"] == 0
    # Every other unsafe request from that site is still refused, signed in or not.
    refused = staff.post(
        "/regions/", json={"name": "X"}, headers={"Origin": "https://any-charity.example"}
    )
    assert refused.status_code == 403


def test_a_public_forms_errors_are_readable_by_the_page_too(app, client):
    """A form on another site shows which field is wrong, or when to retry."""
    make_location("harbour", email="votes@harbour.example")
    origin = {"Origin": "https://any-charity.example"}
    invalid = client.post(
        "/locations/harbour/votes/submit/btoc", json={**VOTE, "yourEmail": "bad"}, headers=origin
    )
    assert invalid.status_code == 422
    assert invalid.headers["Access-Control-Allow-Origin"] == "*"
    assert "yourEmail" in invalid.get_json()["errors"]
    nowhere = client.post("/locations/nowhere/votes/submit/btoc", json=VOTE, headers=origin)
    assert nowhere.status_code == 404
    assert nowhere.headers["Access-Control-Allow-Origin"] == "*"
    # Other endpoints' answers stay closed to that page.
    refused = client.post("/regions/", json={"name": "X"}, headers=origin)
    assert refused.status_code == 403
    assert "Access-Control-Allow-Origin" not in refused.headers


def test_the_frontends_own_origin_may_submit_with_credentials(app_factory):
    app = app_factory(CORS_ORIGINS=[FRONTEND])
    with app.app_context():
        make_location("harbour", email="votes@harbour.example")
    client = app.test_client()
    preflight = preflight_post(client, "/locations/harbour/votes/submit/btoc", FRONTEND)
    assert preflight.headers["Access-Control-Allow-Origin"] == FRONTEND
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
    sent = client.post(
        "/locations/harbour/votes/submit/btoc", json=VOTE, headers={"Origin": FRONTEND}
    )
    assert sent.status_code == 202
    assert sent.headers["Access-Control-Allow-Origin"] == FRONTEND
    assert sent.headers["Access-Control-Allow-Credentials"] == "true"
