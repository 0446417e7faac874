"""/auth and /me/: sign-in, sessions held on the server, rotation, logout, rate limits."""

import time

import pytest
from sqlalchemy.exc import IntegrityError

from directory_api.api import auth
from directory_api.models import Role, User

from .conftest import signed_in
from .factories import PASSWORD, grant, make_location, make_user

COOKIE = "session"


def login(client, email, password=PASSWORD, **extra):
    return client.post("/auth/login", json={"email": email, "password": password, **extra})


def session_cookie(client):
    cookie = client.get_cookie(COOKIE)
    return cookie.value if cookie else None


def test_login_returns_the_user_and_an_http_only_cookie(client, app):
    user = make_user("ann@example.com", name="Ann")
    grant(user, make_location("harbour"), Role.OWNER)
    response = login(client, "ANN@Example.com")
    assert response.status_code == 200
    body = response.get_json()
    assert body["id"] == str(user.id)
    assert body["email"] == "ann@example.com"
    assert body["status"] == "active"
    assert body["isSuper"] is False
    assert body["roles"] == [{"location": "harbour", "role": "owner"}]
    assert body["lastLoginAt"].endswith("Z")
    assert not {"passwordHash", "password_hash", "sessionToken", "session_token"} & set(body)
    set_cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in set_cookie
    assert "SameSite=Lax" in set_cookie
    assert "Expires" not in set_cookie  # without "remember", a browser-session cookie
    assert response.headers["Cache-Control"] == "no-store"
    assert "Cookie" in response.headers["Vary"]


def test_me_answers_the_signed_in_user(client, app):
    make_user("ann@example.com")
    assert client.get("/me/").status_code == 401
    login(client, "ann@example.com")
    response = client.get("/me/")
    assert response.status_code == 200
    assert response.get_json()["email"] == "ann@example.com"
    assert response.headers["Cache-Control"] == "no-store"


def test_remember_makes_a_lasting_cookie(client, app):
    make_user("ann@example.com")
    response = login(client, "ann@example.com", remember=True)
    assert response.status_code == 200
    assert "Expires=" in response.headers["Set-Cookie"]


@pytest.mark.parametrize(
    ("email", "password"),
    [
        ("ann@example.com", "wrong password!"),
        ("nobody@example.com", PASSWORD),
        ("invited@example.com", PASSWORD),
        ("not-an-address", PASSWORD),
    ],
)
def test_every_login_failure_is_the_same_401(client, app, email, password):
    make_user("ann@example.com")
    make_user("invited@example.com", password=None)
    response = login(client, email, password)
    assert response.status_code == 401
    assert response.mimetype == "application/problem+json"
    assert response.get_json() == {
        "type": "about:blank",
        "title": "Unauthorized",
        "status": 401,
        "detail": "Wrong e-mail or password.",
    }
    assert "Set-Cookie" not in response.headers


def test_login_body_is_validated(client, app):
    response = client.post("/auth/login", json={"email": "a@example.com"})
    assert response.status_code == 422
    assert "password" in response.get_json()["errors"]
    response = client.post(
        "/auth/login", json={"email": "a@example.com", "password": "x", "remember": "yes"}
    )
    assert response.status_code == 422
    assert "remember" in response.get_json()["errors"]


def test_session_id_is_rotated_at_login(client, app):
    make_user("ann@example.com")
    make_user("bob@example.com")
    # A cookie planted before sign-in (session fixation) is not what the user ends up with.
    client.set_cookie(COOKIE, "planted-by-an-attacker")
    login(client, "ann@example.com")
    first = session_cookie(client)
    assert first and first != "planted-by-an-attacker"
    attacker = app.test_client()
    attacker.set_cookie(COOKIE, "planted-by-an-attacker")
    assert attacker.get("/me/").status_code == 401

    # Signing in again, even as someone else, issues a new id and ends the old one.
    login(client, "bob@example.com")
    second = session_cookie(client)
    assert second != first
    replay = app.test_client()
    replay.set_cookie(COOKIE, first)
    assert replay.get("/me/").status_code == 401
    assert client.get("/me/").get_json()["email"] == "bob@example.com"


def test_logout_ends_the_server_side_session(client, app):
    make_user("ann@example.com")
    login(client, "ann@example.com")
    copied = session_cookie(client)
    response = client.post("/auth/logout")
    assert response.status_code == 204
    assert client.get("/me/").status_code == 401
    replay = app.test_client()
    replay.set_cookie(COOKIE, copied)
    assert replay.get("/me/").status_code == 401
    assert replay.post("/auth/logout").status_code == 401


def test_logout_needs_a_session(client, app):
    response = client.post("/auth/logout")
    assert response.status_code == 401
    assert response.mimetype == "application/problem+json"


def test_sessions_of_a_user_end_when_the_session_token_changes(app):
    user = make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    assert client.get("/me/").status_code == 200
    # What a password change or reset does: every existing session stops working.
    user.rotate_session_token()
    from directory_api.platform.extensions import db

    db.session.commit()
    assert client.get("/me/").status_code == 401


def test_a_removed_role_takes_effect_at_once(app):
    user = make_user("ann@example.com")
    membership = grant(user, make_location("harbour"), Role.ADMIN)
    client = signed_in(app, "ann@example.com")
    assert client.get("/me/").get_json()["roles"] == [{"location": "harbour", "role": "admin"}]
    from directory_api.platform.extensions import db

    db.session.delete(membership)
    db.session.commit()
    assert client.get("/me/").get_json()["roles"] == []


def test_retry_after_and_the_detail_name_one_number(app_factory, monkeypatch):
    """Flask-Limiter works its `Retry-After` out a moment after the detail is worded and
    rounds down: at .3 past a second the detail said 60 seconds and the header 59 (a CI
    run). A clock that ticks from .3 past a whole second makes that moment every time."""
    import time

    start, ticks = float(int(time.time())) + 0.3, iter(range(10**9))
    monkeypatch.setattr(time, "time", lambda: start + next(ticks) / 1000)
    app = app_factory(RATELIMIT_LOGIN_PER_IP="1/minute", RATELIMIT_LOGIN_PER_EMAIL="100/minute")
    client = app.test_client()
    login(client, "guess@example.com")
    response = login(client, "guess@example.com")
    assert response.status_code == 429
    detail = response.get_json()["detail"]
    wait = response.headers["Retry-After"]
    # Flask-Limiter's reset moment is the next whole second after the window ends.
    assert wait in {"60", "61"}, wait
    assert detail.endswith("try again in 1 minute."), detail
    assert int(response.headers["X-RateLimit-Reset"]) - int(start) == int(wait)


def test_a_store_failing_after_it_counted_still_answers_429(app_factory, monkeypatch):
    """The store counts the request, then fails before the 429 is worded (Redis killed
    in between, seen in a fault test): the answer is the 429 without the moment, not a 500."""
    from directory_api.platform.extensions import limiter

    app = app_factory(RATELIMIT_LOGIN_PER_IP="1/minute", RATELIMIT_LOGIN_PER_EMAIL="100/minute")
    client = app.test_client()
    login(client, "guess@example.com")

    def failed(*args, **kwargs):
        raise ConnectionError("the store went away")

    # Whatever the store (memory, or Redis in CI): asking it for the window fails.
    with app.app_context():
        monkeypatch.setattr(limiter.limiter, "get_window_stats", failed)
    response = login(client, "guess@example.com")
    assert response.status_code == 429
    assert response.mimetype == "application/problem+json"
    assert response.get_json()["detail"] == (
        "At most 1 sign-in attempts from one address per minute."
    )
    assert "X-RateLimit-Remaining" not in response.headers


def test_login_is_rate_limited_per_ip_with_retry_after(app_factory):
    app = app_factory(RATELIMIT_LOGIN_PER_IP="3/minute", RATELIMIT_LOGIN_PER_EMAIL="100/minute")
    client = app.test_client()
    with app.app_context():
        make_user("ann@example.com")
    for attempt in range(3):
        response = login(client, f"guess{attempt}@example.com")
        assert response.status_code == 401
        assert "X-RateLimit-Remaining" in response.headers
        # Nothing refused yet: no wait to tell (Flask-Limiter put one on every answer).
        assert "Retry-After" not in response.headers
    response = login(client, "ann@example.com")
    assert response.status_code == 429
    assert response.mimetype == "application/problem+json"
    assert int(response.headers["Retry-After"]) > 0
    assert response.headers["X-RateLimit-Remaining"] == "0"
    # In words, not Flask-Limiter's "3 per 1 minute" (issue 35).
    wait = int(response.headers["Retry-After"])
    assert response.get_json()["detail"] == (
        "At most 3 sign-in attempts from one address per minute; try again in "
        + ("1 minute." if wait > 59 else f"{wait} second{'s' if wait != 1 else ''}.")
    )
    # Another client address has its own allowance.
    other = app.test_client()
    ok = other.post(
        "/auth/login",
        json={"email": "ann@example.com", "password": PASSWORD},
        environ_base={"REMOTE_ADDR": "10.1.2.3"},
    )
    assert ok.status_code == 200


def test_login_is_rate_limited_per_email_across_addresses(app_factory):
    app = app_factory(RATELIMIT_LOGIN_PER_IP="100/minute", RATELIMIT_LOGIN_PER_EMAIL="2/minute")
    client = app.test_client()
    with app.app_context():
        make_user("ann@example.com")
    assert_address_allowance_spent(client, ["ann@example.com"] * 2, "ANN@example.com", "10.0.0")


def assert_address_allowance_spent(client, failing: list[str], last: str, network: str) -> None:
    """Wrong passwords for each spelling in `failing`, each from its own IP (401), spend the
    address's allowance: the right password as `last`, from yet another IP, gets 429."""
    for number, spelling in enumerate(failing):
        response = client.post(
            "/auth/login",
            json={"email": spelling, "password": "wrong password!"},
            environ_base={"REMOTE_ADDR": f"{network}.{number}"},
        )
        assert response.status_code == 401, spelling
    response = client.post(
        "/auth/login",
        json={"email": last, "password": PASSWORD},
        environ_base={"REMOTE_ADDR": f"{network}.99"},
    )
    assert response.status_code == 429
    assert "Retry-After" in response.headers
    assert response.get_json()["detail"].startswith(
        f"At most {len(failing)} sign-in attempts for one e-mail address per minute; try again in"
    )


def test_default_login_limit_is_ten_a_minute(client, app):
    statuses = [login(client, "nobody@example.com").status_code for _ in range(6)]
    # Five a minute per e-mail is the tighter of the two defaults.
    assert statuses == [401] * 5 + [429]
    assert User.query.count() == 0


def test_only_limited_routes_ask_the_limiter(app_factory, monkeypatch):
    """Every limit is a route's: a request to any other route costs the limiter nothing
    (issue 19), and the limited ones still count (the tests above)."""
    from flask_limiter import Limiter

    asked = []
    original = Limiter._check_request_limit

    def counting(self, *args, **kwargs):
        asked.append(kwargs.get("callable_name"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Limiter, "_check_request_limit", counting)
    client = app_factory().test_client()  # its hooks see the counting check
    assert client.get("/regions/").status_code == 200
    assert asked == []
    assert login(client, "nobody@example.com").status_code == 401
    assert asked  # the login's limits were checked


def failed_logins_from(client, forwarded_for: str, count: int) -> list[int]:
    return [
        client.post(
            "/auth/login",
            json={"email": f"guess{n}@example.com", "password": "wrong password!"},
            headers={"X-Forwarded-For": forwarded_for},
        ).status_code
        for n in range(count)
    ]


def test_spoofed_forwarded_for_does_not_escape_the_limit_without_a_proxy(app_factory):
    app = app_factory(RATELIMIT_LOGIN_PER_IP="2/minute")
    client = app.test_client()
    assert failed_logins_from(client, "1.1.1.1", 2) == [401, 401]
    # Without PROXY_FIX_X_FOR the header is not trusted: same client, same allowance.
    assert failed_logins_from(client, "2.2.2.2", 1) == [429]


def test_behind_a_proxy_limits_key_on_the_forwarded_client(app_factory):
    app = app_factory(RATELIMIT_LOGIN_PER_IP="2/minute", PROXY_FIX_X_FOR=1)
    client = app.test_client()
    assert failed_logins_from(client, "1.1.1.1", 3) == [401, 401, 429]
    assert failed_logins_from(client, "2.2.2.2", 1) == [401]


def test_an_idle_session_is_forgotten_but_a_remembered_one_lasts(app_factory):
    from datetime import timedelta

    app = app_factory(SESSION_IDLE_LIFETIME=timedelta(seconds=1))
    with app.app_context():
        make_user("ann@example.com")
    idle, remembered = app.test_client(), app.test_client()
    assert login(idle, "ann@example.com").status_code == 200
    assert login(remembered, "ann@example.com", remember=True).status_code == 200
    # Both stores expire by the whole second (the file store from the second it was written
    # in, floored), so just over one second is past the idle lifetime in either.
    time.sleep(1.1)
    assert idle.get("/me/").status_code == 401
    assert remembered.get("/me/").status_code == 200


def test_a_request_in_flight_cannot_bring_a_logged_out_session_back(app_factory):
    """Review finding: a slow request finishing after logout re-wrote the whole session."""
    from flask import request

    app = app_factory(SESSION_TOUCH_INTERVAL=0)  # every request refreshes the store
    with app.app_context():
        make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    copied = session_cookie(client)
    with app.test_request_context("/me/", headers={"Cookie": f"{COOKIE}={copied}"}):
        in_flight = app.session_interface.open_session(app, request)
        assert in_flight.get("_user_id")
        assert client.post("/auth/logout").status_code == 204
        app.session_interface.save_session(app, in_flight, app.response_class())
    replay = app.test_client()
    replay.set_cookie(COOKIE, copied)
    assert replay.get("/me/").status_code == 401


def test_a_session_planted_before_login_is_not_the_victims_afterwards(app):
    """Fixation with a real, stored session id (the attacker's own)."""
    make_user("ann@example.com")
    make_user("mallory@example.com")
    attacker = signed_in(app, "mallory@example.com")
    planted = session_cookie(attacker)
    victim = app.test_client()
    victim.set_cookie(COOKIE, planted)
    assert login(victim, "ann@example.com").status_code == 200
    assert session_cookie(victim) != planted
    assert attacker.get("/me/").status_code == 401  # the planted id was retired, not reused
    assert victim.get("/me/").get_json()["email"] == "ann@example.com"


def test_flask_logins_remember_cookie_signs_nobody_in(app):
    from flask_login.utils import encode_cookie

    user = make_user("ann@example.com")
    with app.test_request_context():
        forged = encode_cookie(user.session_token)
    client = app.test_client()
    client.set_cookie("remember_token", forged)
    assert client.get("/me/").status_code == 401


def test_a_dead_session_is_deleted_not_kept_alive(app):
    user = make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    user.rotate_session_token()
    from directory_api.platform.extensions import db

    db.session.commit()
    response = client.get("/me/")
    assert response.status_code == 401
    assert "Expires=Thu, 01 Jan 1970" in response.headers.get("Set-Cookie", "")
    assert client.get_cookie(COOKIE) is None


# However active, a session ends SESSION_MAX_DAYS after its sign-in (API.md 9).

DAY = 24 * 60 * 60


def stamp_sign_in(client, seconds_ago: int | None) -> None:
    """Rewrite when the client's stored session signed in (None: a session without one)."""
    from directory_api.platform.sessions import SIGNED_IN_KEY

    with client.session_transaction() as stored:
        if seconds_ago is None:
            del stored[SIGNED_IN_KEY]
        else:
            stored[SIGNED_IN_KEY] = int(time.time()) - seconds_ago


@pytest.mark.parametrize("remember", [False, True])
def test_a_session_ends_thirty_days_after_sign_in_however_active(app, remember):
    make_user("ann@example.com")
    client = app.test_client()
    assert login(client, "ann@example.com", remember=remember).status_code == 200
    copied = session_cookie(client)
    stamp_sign_in(client, 30 * DAY - 60)
    assert client.get("/me/").status_code == 200
    stamp_sign_in(client, 30 * DAY)
    response = client.get("/me/")
    assert response.status_code == 401
    assert response.mimetype == "application/problem+json"
    assert client.get_cookie(COOKIE) is None  # the store forgot it, the cookie is dropped
    replay = app.test_client()
    replay.set_cookie(COOKIE, copied)
    assert replay.get("/me/").status_code == 401
    # Signing in again starts a new 30 days.
    assert login(client, "ann@example.com").status_code == 200
    assert client.get("/me/").status_code == 200


def test_the_maximum_session_age_is_a_setting(app_factory):
    from datetime import timedelta

    app = app_factory(SESSION_MAX_LIFETIME=timedelta(days=1))
    with app.app_context():
        make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    stamp_sign_in(client, DAY - 60)
    assert client.get("/me/").status_code == 200
    stamp_sign_in(client, DAY)
    assert client.get("/me/").status_code == 401


def test_a_session_signed_in_before_the_limit_counts_from_its_next_request(app):
    make_user("ann@example.com")
    client = signed_in(app, "ann@example.com")
    stamp_sign_in(client, None)  # as sessions signed in before the limit existed are
    assert client.get("/me/").status_code == 200
    from directory_api.platform.sessions import SIGNED_IN_KEY

    with client.session_transaction() as stored:
        assert abs(stored[SIGNED_IN_KEY] - time.time()) < 60  # stamped by that request
    stamp_sign_in(client, 30 * DAY)
    assert client.get("/me/").status_code == 401


def test_login_spellings_of_one_address_share_its_allowance(client, app):
    """The per-address key is normalised as e-mail uniqueness is (NFKC, case-folded)."""
    make_user("ann@example.com")
    spellings = ["ann@example.com", "ａnn@example.com", "ANN@EXAMPLE.COM", "Ann@Example.com"]
    spellings += ["ＡＮＮ@ｅｘａｍｐｌｅ.ｃｏｍ"]
    assert_address_allowance_spent(client, spellings, " Ａnn@example.com ", "10.0.2")


def test_a_sign_in_whose_commit_is_refused_signs_nobody_in(app, client, monkeypatch):
    """Its session was stored before the commit (so that a store that fails keeps nothing
    in the database); a commit refused after it (a 409 or 422) takes the session along:
    no cookie, nothing to sign in with."""
    make_user("ann@example.com")

    def refused() -> None:
        raise IntegrityError("INSERT …", None, Exception("refused"))

    monkeypatch.setattr(auth, "commit_keeping_state", refused)
    response = client.post("/auth/login", json={"email": "ann@example.com", "password": PASSWORD})
    assert response.status_code == 409
    assert "Set-Cookie" not in response.headers
    assert client.get("/me/").status_code == 401
