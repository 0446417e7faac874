"""The request being answered, its `g`, its session, its app and its answer's headers, read
at the cost they look.

`flask.request`, `flask.g`, `flask.session` and `flask.current_app` are proxies
(werkzeug's `LocalProxy`). An attribute read through one first fails on the proxy itself:
Python builds an AttributeError, formats its message and drops it, and only then calls the
proxy's `__getattr__`, which reads the attribute on the real object. That is about 8,000
instructions a read, against 900 for the read itself (callgrind); a request's hooks made
some 60 such reads. Code run for every request takes the object once here and reads it
directly. Elsewhere the proxies are fine: clearer, and the cost is paid once or twice.

A header missing from werkzeug's `Headers` costs as much again: `get`, `in` and `[]` look
for it by raising and catching a KeyError (for an answer's headers an HTTP exception:
14,000 instructions against 4,000 for a header found). Hooks that look for headers a
request usually lacks read the WSGI environ (`HTTP_ORIGIN`), or an answer's
`header_names` once.
"""

from typing import Any

from flask import Flask, Request, current_app, g, request, session
from flask.sessions import SessionMixin
from werkzeug.datastructures import Headers


def current_request() -> Request:
    return request._get_current_object()  # type: ignore[attr-defined]


def current_globals() -> Any:
    """The `g` of the request (of its app context): attributes read and set as on `g`."""
    return g._get_current_object()


def current_session() -> SessionMixin:
    return session._get_current_object()  # type: ignore[attr-defined]


def current_application() -> Flask:
    return current_app._get_current_object()  # type: ignore[attr-defined]


def header_names(headers: Headers) -> set[str]:
    """The names of `headers`, lowercase: what is there, asked without a KeyError."""
    return {name.lower() for name, _ in headers}
