"""Conditional GET and who may cache what (API.md 12).

Every GET answered 200 carries a strong `ETag`, the SHA-1 of its body, and a request whose
`If-None-Match` still matches it gets 304 with no body (signed in or not). Anonymous answers
of public reads (every GET but /health*) may be cached by anyone for `PUBLIC_MAX_AGE`
seconds; a signed-in answer is for that user only, never stored. Every answer varies on
`Cookie`, since who asks changes what comes back.

A read whose answer is determined by a stored revision and its URL (a list or search page
of listings: `ListingCount.revision`) asks `answer_if_unchanged(...)` first: the ETag last
answered for that revision and URL is kept, so a client still holding it gets its 304
before the page's work. The ETag is the body's hash all the same (it is the one computed
then); a process that has not answered that page yet does the work and compares as usual.
"""

from collections.abc import Hashable

from flask import Flask, Response, current_app, g, request, session

from .recent import RecentlyUsed, request_key
from .sessions import USER_KEY

CONDITIONAL_METHODS = frozenset({"GET", "HEAD"})
ANSWERED = frozenset({200, 304})
UNCACHED_PREFIX = "/health"  # liveness and readiness: always asked afresh


# The ETag answered last for a revision and URL (recent.py).
KNOWN_TAGS = RecentlyUsed()


def answer_if_unchanged(*revision: Hashable) -> Response | None:
    """For a read whose answer is determined by `revision` and its URL: a 304 when the
    client holds the ETag answered for them last; else None, and this answer's ETag is kept
    (by `cache_headers`)."""
    key = g.tag_key = request_key(*revision)
    tag = KNOWN_TAGS.get(key)
    if tag is None or not request.if_none_match.contains_weak(tag):
        return None
    response = Response(status=304)
    response.set_etag(tag)
    return response


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
        or response.status_code not in ANSWERED
        or response.is_streamed
    ):
        return response
    if not private and not request.path.startswith(UNCACHED_PREFIX):
        max_age = current_app.config["PUBLIC_MAX_AGE"]
        response.headers["Cache-Control"] = f"public, max-age={max_age}"
    if response.status_code == 304:  # answered early (answer_if_unchanged)
        return response
    response.add_etag()
    tag = response.get_etag()[0]
    key = g.get("tag_key")
    if key is not None:
        KNOWN_TAGS.put(key, tag)
    # If-None-Match is the one condition here (no Last-Modified, no ranges), compared weakly
    # (RFC 9110 13.1.2). Werkzeug's make_conditional did more per request (a Date header the
    # server replaces, range parsing) and answered 200 to a matching If-None-Match beside
    # a matching If-Match.
    if request.if_none_match.contains_weak(tag):
        response.status_code = 304
    return response


def register_caching(app: Flask) -> None:
    app.after_request(cache_headers)
