"""The service's Flask class, and what a request without a session asks of the store."""

import functools

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
