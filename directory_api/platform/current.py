"""The request being answered, its `g` and its app, read without werkzeug's proxies.

`flask.request`, `flask.g` and `flask.current_app` are proxies (werkzeug's `LocalProxy`).
An attribute read through one first fails on the proxy itself: Python builds an
AttributeError, formats its message and drops it, and only then calls the proxy's
`__getattr__`, which reads the attribute on the real object. That is about 8,000
instructions a read, against 900 for the read itself (callgrind); a request's hooks made
some 60 such reads. Code run for every request takes the object once here and reads it
directly. Elsewhere the proxies are fine: clearer, and the cost is paid once or twice.
"""

from typing import Any

from flask import Flask, Request, current_app, g, request


def current_request() -> Request:
    return request._get_current_object()  # type: ignore[attr-defined]


def current_globals() -> Any:
    """The `g` of the request (of its app context): attributes read and set as on `g`."""
    return g._get_current_object()


def current_application() -> Flask:
    return current_app._get_current_object()  # type: ignore[attr-defined]
