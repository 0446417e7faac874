"""Conditional GET and who may cache what (API.md 12).

Every GET answered 200 carries a strong `ETag`, the SHA-1 of its body, and a request whose
`If-None-Match` still matches it gets 304 with no body (signed in or not). Anonymous answers
of public reads (every GET but /health*) may be cached by anyone for `PUBLIC_MAX_AGE`
seconds; a signed-in answer is for that user only, never stored. Every answer varies on
`Cookie`, since who asks changes what comes back.

A read whose answer is determined by a stored revision and its URL (a list or search page
of listings: `ListingCount.revision`) asks `answer_if_known(...)` first. The process keeps
the ETag it last answered for that revision and URL, so a client still holding it gets
its 304 before the page's work; and it keeps the most recent of those answers themselves
(`ANSWERS_KEPT`, each at most `ANSWER_BYTES_KEPT`), so the page asked again, by anyone,
is answered without its work too. The ETag is the body's hash all the same (it is the one
computed then); a process that has not answered that page yet does the work as usual.

A streamed answer so determined (a CSV export of listings, API.md 11) cannot be hashed
before it is sent, nor kept: its ETag is a digest of that revision, its URL and the
current stretch of PUBLIC_MAX_AGE seconds (`streamed_tag`, `period`), known before any row
is read, the same in every process. A matching
`If-None-Match` is answered 304 before the export's work, its rate limit and its slot
(at_once.py); the 200 carries the tag. The votes export is determined so too, by the
revisions of the location's votes (`VoteRevision`) and of its employers.
"""

import time
from collections.abc import Hashable

from flask import Flask, Response
from werkzeug.http import generate_etag, quote_etag

from .current import (
    current_application,
    current_globals,
    current_request,
    current_session,
    header_names,
)
from .recent import RecentlyUsed, request_key
from .sessions import USER_KEY

CONDITIONAL_METHODS = frozenset({"GET", "HEAD"})
ANSWERED = frozenset({200, 304})
UNCACHED_PREFIX = "/health"  # liveness and readiness: always asked afresh
VARY = ("Cookie", "Authorization")  # who asks changes what comes back


# The ETag answered last for a revision and URL (recent.py), and for the most recent of
# them the answer itself: its ETag, its body and the headers its view set.
KNOWN_TAGS = RecentlyUsed()
ANSWERS_KEPT = 128
ANSWER_BYTES_KEPT = 64 * 1024  # the bench's page of 20 listings is 7.5 KiB, of 100 37 KiB
KNOWN_ANSWERS = RecentlyUsed(size=ANSWERS_KEPT)
# The URLs this process answered such a read for, under whatever revision: one asked for
# the first time cannot be answered before its work (`may_answer_early`).
ANSWERED_URLS = RecentlyUsed()
VIEW_HEADERS = ("Content-Type", "Link")  # the rest the request's hooks set, as for any answer


def streamed_tag(key: bytes) -> str:
    """The ETag of a streamed answer determined by `key` (its revision and URL)."""
    return key.hex()


def period() -> int:
    """The current stretch of PUBLIC_MAX_AGE seconds. A streamed answer's tag changes with
    it, so a change that bypasses the app (and its revision) is seen within the time a
    public cache may keep the answer anyway, as it is for pages (recent.py)."""
    return int(time.time()) // max(current_application().config["PUBLIC_MAX_AGE"], 1)


def answer_if_known(*revision: Hashable, streamed: bool = False) -> Response | None:
    """For a read whose answer is determined by `revision` and its URL, what this process
    answered for them last: a 304 when the client holds its ETag, else the answer again
    when it was kept; None when the read must do its work (and its answer is then kept, by
    `cache_headers`). A `streamed` answer's ETag is known without answering it first."""
    req, state = current_request(), current_globals()
    if streamed:
        key = state.answer_key = request_key(*revision, period())
        # "*" is left to the read: it would match an export whose query is refused (422).
        if req.if_none_match.star_tag:
            return None
        kept, tag = None, streamed_tag(key)
    else:
        key = state.answer_key = request_key(*revision)
        kept = KNOWN_ANSWERS.get(key)
        tag = kept[0] if kept is not None else KNOWN_TAGS.get(key)
    if tag is None:
        return None
    if req.if_none_match.contains_weak(tag):
        response = Response(status=304)
    elif kept is not None:
        response = current_application().response_class(kept[1], headers=kept[2])
    else:
        return None
    response.set_etag(tag)
    state.answered_early = True
    return response


def url_key() -> bytes:
    """This request's URL as `ANSWERED_URLS` keys it, worked out once per request."""
    state = current_globals()
    key = state.get("url_key")
    if key is None:
        key = state.url_key = request_key()
    return key


def may_answer_early() -> bool:
    """Whether `answer_if_known` might answer this read before its work: the client holds
    an ETag, or this process answered its URL before. Where neither, a read may find its
    revision in the statement that does its work (endpoints.Endpoint.locate_later)."""
    in_environ = "HTTP_IF_NONE_MATCH" in current_request().environ
    return in_environ or ANSWERED_URLS.get(url_key()) is not None


def keep_answer(key: bytes, tag: str, response: Response) -> None:
    KNOWN_TAGS.put(key, tag)
    ANSWERED_URLS.put(url_key(), True)
    if response.status_code != 200:
        return
    body = response.get_data()
    headers = [(name, response.headers[name]) for name in VIEW_HEADERS if name in response.headers]
    # The Link header counts too: it repeats the URL, which the client chose.
    if len(body) + sum(len(value) for _, value in headers) <= ANSWER_BYTES_KEPT:
        KNOWN_ANSWERS.put(key, (tag, body, headers))


def signed_in() -> bool:
    """Whether the request carries a session (a sign-in, or a cookie that was one) or a
    bearer token (whose answer no cache may keep either)."""
    req = current_request()
    return (
        current_application().config["SESSION_COOKIE_NAME"] in req.cookies
        or bool(current_session().get(USER_KEY))
        or "HTTP_AUTHORIZATION" in req.environ  # req.headers would raise and catch a KeyError
    )


def vary_on_the_caller(response: Response, names: set[str]) -> None:
    """`Vary: Cookie, Authorization`, beside any the view set. Written as text where there is
    none (parsing it into a header set, as `response.vary` does, is most of this)."""
    if "vary" in names and response.headers["Vary"]:
        response.vary.update(VARY)
    else:
        response.headers["Vary"] = ", ".join(VARY)


def cache_headers(response: Response) -> Response:
    names = header_names(response.headers)  # the view's and earlier hooks'
    vary_on_the_caller(response, names)
    # The view's: an answer no one may use twice (read as text: views write it so).
    if "cache-control" in names and "no-store" in response.headers["Cache-Control"]:
        return response
    private = signed_in()
    if private:
        response.headers["Cache-Control"] = "no-store"
    req, state = current_request(), current_globals()
    if req.method not in CONDITIONAL_METHODS or response.status_code not in ANSWERED:
        return response
    if not private and not req.path.startswith(UNCACHED_PREFIX):
        max_age = current_application().config["PUBLIC_MAX_AGE"]
        response.headers["Cache-Control"] = f"public, max-age={max_age}"
    if state.get("answered_early"):  # by answer_if_known: its ETag set, nothing new to keep
        return response
    if response.is_streamed:  # not hashed (it is not at hand); tagged if its revision is known
        key = state.get("answer_key")
        if key is not None:
            response.set_etag(streamed_tag(key))
            if req.if_none_match.star_tag:  # left to the read by answer_if_known
                response.close()  # not one row read: the stream has not started
                response.response, response.status_code = [], 304
        return response
    tag = response.get_etag()[0] if "etag" in names else None
    if tag is None:  # the view set none: the body's hash (Response.add_etag, not parsed back)
        tag = generate_etag(response.get_data())
        response.headers["ETag"] = quote_etag(tag)
    key = state.get("answer_key")
    if key is not None:
        keep_answer(key, tag, response)
    # If-None-Match is the one condition here (no Last-Modified, no ranges), compared weakly
    # (RFC 9110 13.1.2). Werkzeug's make_conditional did more per request (a Date header the
    # server replaces, range parsing) and answered 200 to a matching If-None-Match beside
    # a matching If-Match.
    if "HTTP_IF_NONE_MATCH" in req.environ and req.if_none_match.contains_weak(tag):
        response.status_code = 304
    return response


def register_caching(app: Flask) -> None:
    app.after_request(cache_headers)
