"""Conditional GET and who may cache what (API.md 12).

Every GET answered 200 carries a strong `ETag`, the SHA-1 of its body, and a request whose
`If-None-Match` still matches it gets 304 with no body (signed in or not). Anonymous answers
of public reads (every GET but /health*) may be cached by anyone for `PUBLIC_MAX_AGE`
seconds; a signed-in answer is for that user only, never stored. Every answer varies on
`Cookie`, since who asks changes what comes back.
"""

from flask import Flask, Response, current_app, request, session

from .sessions import USER_KEY

CONDITIONAL_METHODS = frozenset({"GET", "HEAD"})
UNCACHED_PREFIX = "/health"  # liveness and readiness: always asked afresh


def signed_in() -> bool:
    """Whether the request carries a session (a sign-in, or a cookie that was one)."""
    return current_app.config["SESSION_COOKIE_NAME"] in request.cookies or bool(
        session.get(USER_KEY)
    )


def cache_headers(response: Response) -> Response:
    response.vary.add("Cookie")
    private = signed_in()
    if private:
        response.headers["Cache-Control"] = "no-store"
    if (
        request.method not in CONDITIONAL_METHODS
        or response.status_code != 200
        or response.is_streamed
    ):
        return response
    if not private and not request.path.startswith(UNCACHED_PREFIX):
        max_age = current_app.config["PUBLIC_MAX_AGE"]
        response.headers["Cache-Control"] = f"public, max-age={max_age}"
    response.add_etag()
    return response.make_conditional(request)


def register_caching(app: Flask) -> None:
    app.after_request(cache_headers)
