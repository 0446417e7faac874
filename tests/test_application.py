"""The service's Flask class, what a request without a session asks of the store, and the
rate limits' headers on routes with and without a limit."""

import functools
from unittest.mock import patch

from flask import after_this_request

from directory_api.platform.application import Application

from .factories import make_user
from .test_auth import COOKIE, login


def plain():
    return "plain"


async def coroutine():
    return "async"


def test_plain_functions_and_methods_are_called_as_they_are():
    app = Application(__name__)
    assert app.ensure_sync(plain) is plain
    method = app.make_response
    assert app.ensure_sync(method) is method


def test_a_coroutine_function_is_run_as_flask_runs_it(monkeypatch):
    app = Application(__name__)
    wrapped = []
    monkeypatch.setattr(
        app, "async_to_sync", lambda func: wrapped.append(func) or (lambda *a, **k: "ran")
    )
    assert app.ensure_sync(coroutine)() == "ran"
    # A partial has no code of its own: Flask's own question finds the coroutine inside.
    partial = functools.partial(coroutine)
    assert app.ensure_sync(partial)() == "ran"
    assert wrapped == [coroutine, partial]


class Unhashable:
    __hash__ = None

    def __call__(self):
        return "called"


def test_the_answer_for_a_registered_hook_is_kept_and_for_anything_else_asked_again():
    """Flask asks of every hook on every request: the app's own (registered before its
    first request) are asked once; a callable made for one request is never kept."""
    probe = Application(__name__)
    asked: list = []
    original = Application._ensure_sync_uncached

    def counting(self, func):
        asked.append(func)
        return original(self, func)

    class Hooks:
        def before(self):
            return None

    hooks = Hooks()
    probe.before_request(hooks.before)  # a bound method: made anew at each access
    made_for_one_request: list = []

    @probe.get("/")
    def index():
        @after_this_request
        def closing(response):
            made_for_one_request.append(closing)
            return response

        return "ok"

    with patch.object(Application, "_ensure_sync_uncached", counting):
        client = probe.test_client()
        assert [client.get("/").status_code for _ in range(3)] == [200, 200, 200]
        caller = Unhashable()
        assert probe.ensure_sync(caller)() == "called"
        assert probe.ensure_sync(caller)() == "called"
    assert [func for func in asked if func == hooks.before] == [hooks.before]  # once
    assert [func for func in asked if func is index] == [index]
    # Each request's own closure asked each time, and none kept afterwards.
    assert [func for func in asked if func in made_for_one_request] == made_for_one_request
    assert len(made_for_one_request) == 3
    assert not any(func in probe._sync for func in made_for_one_request)
    assert [func for func in asked if func is caller] == [caller, caller]


def test_an_async_view_is_not_called_as_a_plain_one():
    """Without Flask's `async` extra, Flask refuses an async view with its own error; a plain
    call would have returned an un-awaited coroutine as the answer."""
    probe = Application(__name__)

    @probe.get("/async")
    async def view():
        return "never"

    probe.config["PROPAGATE_EXCEPTIONS"] = True
    try:
        probe.test_client().get("/async")
    except RuntimeError as error:
        assert "async" in str(error)
    else:  # asgiref installed: Flask ran it
        assert probe.test_client().get("/async").get_data(as_text=True) == "never"


def watch_the_store(app, monkeypatch) -> list[str]:
    calls: list[str] = []
    interface = app.session_interface
    for name in ("_write", "_delete_session", "_get_store_id"):
        original = getattr(interface, name)

        def recording(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(interface, name, recording)
    return calls


def test_a_request_without_a_session_asks_nothing_of_the_store(client, app, monkeypatch):
    calls = watch_the_store(app, monkeypatch)
    response = client.get("/regions/")
    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers
    assert "Cookie" in response.headers["Vary"]
    assert calls == []


def test_an_unknown_cookie_is_looked_up_once_and_left_alone(client, app, monkeypatch):
    calls = watch_the_store(app, monkeypatch)
    client.set_cookie(COOKIE, "no-such-session")
    response = client.get("/me/")
    assert response.status_code == 401
    assert "Set-Cookie" not in response.headers
    assert calls == ["_get_store_id"]  # the lookup; nothing written or deleted


def test_signing_out_still_deletes_the_stored_session_and_the_cookie(client, app, monkeypatch):
    make_user("ann@example.com")
    assert login(client, "ann@example.com").status_code == 200
    calls = watch_the_store(app, monkeypatch)
    response = client.post("/auth/logout")
    assert response.status_code == 204
    assert f"{COOKIE}=;" in response.headers["Set-Cookie"]
    assert "_delete_session" in calls
    assert client.get("/me/").status_code == 401


def test_vary_names_cookie_where_the_session_was_read_whatever_else_it_names(app):
    """A header named like Cookie (X-Cookie-Consent) is not Cookie."""
    from flask import Response, session

    interface = app.session_interface
    for vary, expected in (
        (None, "Cookie"),
        ("X-Cookie-Consent", "X-Cookie-Consent, Cookie"),
        ("Origin, cookie", "Origin, cookie"),
        ("*", "*"),
    ):
        with app.test_request_context("/regions/"):
            session.get("anything")  # read, not changed
            response = Response()
            if vary is not None:
                response.headers["Vary"] = vary
            interface.save_session(app, session._get_current_object(), response)
            assert response.headers["Vary"] == expected


def limit_headers(response) -> list[str]:
    return [name for name, _ in response.headers if name.startswith("X-RateLimit")]


def test_a_route_without_a_limit_answers_without_limit_headers(client):
    response = client.get("/regions/")
    assert response.status_code == 200
    assert limit_headers(response) == []


def test_a_meta_limit_an_operator_configures_turns_a_client_away_everywhere(app_factory):
    """Flask-Limiter's RATELIMIT_META (breaches a client may make before every route
    refuses it) is checked before every request too: with it set, that check stays (it was
    dropped, and the setting did nothing)."""
    app = app_factory(RATELIMIT_META="1/hour", RATELIMIT_LOGIN_PER_IP="1/minute")
    client, other = app.test_client(), app.test_client()
    other.environ_base["REMOTE_ADDR"] = "10.9.8.7"
    assert client.get("/regions/").status_code == 200
    assert login(client, "guess@example.com").status_code == 401
    assert login(client, "guess@example.com").status_code == 429  # the breach
    refused = client.get("/regions/")  # a route with no limit of its own
    assert refused.status_code == 429
    assert refused.mimetype == "application/problem+json"
    assert other.get("/regions/").status_code == 200  # another client's allowance


def test_an_app_wide_limit_an_operator_configures_shows_on_every_answer(app_factory):
    """The service declares none, but Flask-Limiter's RATELIMIT_DEFAULT still works: its
    check runs before every request and its headers come with every answer."""
    limited = app_factory(RATELIMIT_DEFAULT="1000/hour").test_client()
    first, second = limited.get("/regions/"), limited.get("/regions/")
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.headers["X-RateLimit-Limit"] == "1000"
    assert (first.headers["X-RateLimit-Remaining"], second.headers["X-RateLimit-Remaining"]) == (
        "999",
        "998",
    )
