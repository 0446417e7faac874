"""The rate limits of API.md, each read from the configuration when a request arrives."""

import functools
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, g, request
from flask_limiter import Limiter
from flask_login import current_user

from .application import View, say_of_view, view_says
from .current import current_application
from .email_addresses import normalize_email
from .extensions import client_network, limiter

log = logging.getLogger(__name__)
LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
RETRY_STATUSES = (429, 503)  # the answers a `Retry-After` is kept on


def configured(name: str) -> Callable[[], str]:
    return lambda: current_application().config[name]


def email_in_body() -> str:
    """Key: the e-mail address in the JSON body, so one account can't be tried from many IPs.

    Normalised as e-mail uniqueness is, so "ＡＮＮ@example.com" spends ann@example.com's allowance.
    """
    body = request.get_json(silent=True)
    email = body.get("email") if isinstance(body, dict) else None
    if isinstance(email, str) and email.strip():
        return "email:" + normalize_email(email)[:254]
    return "ip:" + client_network()


def signed_in_account() -> str:
    """Key: the signed-in account (its id, which a password change does not renew)."""
    return f"user:{current_user.id}"


# Each limit's `error_message` says what it counts, and whose: the 429's detail is "At most
# 10 <that> per hour; try again in 37 minutes." (errors.rate_limit_detail).
def per_ip_and_email(kind: str, what: str) -> tuple[Any, Any]:
    """The two limits of an endpoint that takes an e-mail address: per client address and
    per e-mail address (RATELIMIT_<kind>_PER_IP, …_PER_EMAIL)."""
    return (
        limiter.limit(
            configured(f"RATELIMIT_{kind}_PER_IP"), error_message=f"{what} from one address"
        ),
        limiter.limit(
            configured(f"RATELIMIT_{kind}_PER_EMAIL"),
            key_func=email_in_body,
            error_message=f"{what} for one e-mail address",
        ),
    )


login_per_ip, login_per_email = per_ip_and_email("LOGIN", "sign-in attempts")
reset_per_ip, reset_per_email = per_ip_and_email("RESET", "password reset requests")
email_update_per_account = limiter.limit(
    configured("RATELIMIT_EMAIL_UPDATE_PER_ACCOUNT"),
    key_func=signed_in_account,
    error_message="e-mail changes for one account",
)


def shared(setting: str, scope: str, what: str, **options: Any) -> Any:
    """A limit the endpoints that declare it spend together (`scope`), read from `setting`
    (per client IP unless `options` key it otherwise); `what` it counts, and whose."""
    return limiter.shared_limit(configured(setting), scope=scope, error_message=what, **options)


# Registration and every endpoint that takes a token share one allowance per IP.
token_endpoints = shared(
    "RATELIMIT_TOKENS_PER_IP", "tokens", "requests with a token or a registration from one address"
)
# Every type of public vote submission shares one allowance per client IP.
votes_per_ip = shared("RATELIMIT_VOTES_PER_IP", "votes", "votes from one address")


def accepted(response: Response) -> bool:
    """Whether a deferred limit counts this request (`deduct_when`): what was refused
    (404, 409, 422, …) did nothing to count."""
    return response.status_code < 400


def path_location() -> str:
    """Key: the location the path names (by its slug), whoever asks."""
    return "location:" + str((request.view_args or {}).get("slug"))


# And one per location, whatever the address: visitors of a hostile page cannot flood one
# location from many addresses (API.md 17). It counts submissions accepted (answered below
# 400), so one address past its own allowance spends none of the location's; checked
# before the per-IP limit, whose figures the answer's headers then show the client.
votes_per_location = shared(
    "VOTE_LIMIT_PER_LOCATION",
    "votes-location",
    "votes to one location",
    key_func=path_location,
    deduct_when=accepted,
)
# A test event and a redelivery send to a receiver on demand: one allowance per account
# for both, so a subscription's manager cannot make the service flood the URL they chose.
# Each one counts as it arrives, refused or not: a count deferred to the answer
# (`deduct_when`) is tested first and counted after, so requests sent at once would all
# pass the test before any was counted.
webhook_sends_per_account = shared(
    "RATELIMIT_WEBHOOK_SENDS_PER_ACCOUNT",
    "webhook-sends",
    "webhook tests and redeliveries for one account",
    key_func=signed_in_account,
)
# Every CSV export (businesses, employers, votes) shares one allowance per client IP.
exports_per_ip = shared("RATELIMIT_EXPORTS_PER_IP", "exports", "exports from one address")

# A read whose work grows with what it reads (a search for a word most of a large
# location's listings hold reads them all to count and rank them): anyone may send one,
# spelt anew each time past the answers kept. Such reads, and only those, spend one
# allowance per client IP; the view says so once its work is done (`read_was_costly`).
# Once it is spent, that address's reads of the kind wait, cheap or not (the cost is known
# only after the work), except those that could not be costly whatever they asked (their
# endpoint's `cheap_for_sure`: no check, no headers). An answer kept by the process
# (caching.py) spends nothing.
COSTLY_READ = "costly_read"


def read_was_costly() -> None:
    g.setdefault(COSTLY_READ, True)


def costly_reads_per_ip(cheap_for_sure: Callable[[], bool]) -> Any:
    return shared(
        "RATELIMIT_BROAD_SEARCHES_PER_IP",
        "broad-searches",
        "searches that read many listings from one address",
        deduct_when=lambda response: accepted(response) and COSTLY_READ in g,
        exempt_when=cheap_for_sure,
    )


def in_words(seconds: float) -> str:
    """A wait or a period as a client would say it: 40 seconds, 37 minutes, 2 hours, 1 day
    (to the nearest: `Retry-After` has the exact seconds)."""
    unit, length = next(
        (unit, length)
        for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
        if seconds >= length or unit == "second"
    )
    amount = max(1, round(seconds / length))
    return f"{amount} {unit}{'s' if amount != 1 else ''}"


def rate_limit_detail(limit: Any) -> str | None:
    """The 429's detail for a breached limit declared above (Flask-Limiter's `Limit`): how
    many of what it counts per how long, and when the client may try again."""
    what, item = getattr(limit, "error_message", None), getattr(limit, "limit", None)
    if not isinstance(what, str) or item is None:
        return None
    period = in_words(item.get_expiry())
    per = period.removeprefix("1 ")
    current = limiter.current_limit
    try:
        # The moment may not be read yet: the store is asked, and it may have failed
        # since it counted this request (Redis killed mid-request).
        reset_at = current.reset_at if current is not None and current.limit == item else None
    except Exception as error:  # any store's failure: the 429 stands without the moment
        log.warning("rate-limit reset omitted: the store failed (%s)", type(error).__name__)
        reset_at = None
    if reset_at is None:
        return f"At most {item.amount} {what} per {per}."
    # Whole seconds, rounded up: a client that waits this long is let in. The same number
    # goes into `Retry-After` (`add_limit_headers`), so the words and the header agree.
    g.retry_after = wait = max(1, math.ceil(reset_at - time.time()))
    return f"At most {item.amount} {what} per {per}; try again in {in_words(wait)}."


RATE_LIMITED = "rate_limited"  # a view's flag (`rate_limited`)


def rate_limited(view: View) -> View:
    """Mark `view`: limits above are checked when it runs. Another route's answer has no
    limit to report: Flask-Limiter's header hook is not run for it (`add_limit_headers`)."""
    return say_of_view(view, RATE_LIMITED)


# Flask-Limiter's settings of limits checked before every request, not by a route's own.
APP_WIDE = ("RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION", "RATELIMIT_META")


def app_wide_limits(app: Flask) -> bool:
    """Whether app-wide, default or meta limits (a client that breached limits too often
    turned away from every route) were configured (this service declares none)."""
    return any(app.config.get(name) for name in APP_WIDE)


def adapt_limiter(app: Flask) -> None:
    """Flask-Limiter's hooks as this service needs them, once the limiter is set up: each
    step finds a hook by the private name Flask-Limiter gives it, so this (with
    rate_windows.py, for the limiter's own subclass) is the place to check on an upgrade
    of Flask-Limiter. If the check before every request is renamed,
    the app stops at start (its name is read as an attribute); if the header hook is, it
    stops at start where limits are on (`guard_limit_headers`); if the end-of-request
    reset is, it stays as Flask-Limiter made it: every request pays its time again, and
    the answers are the same."""
    check_only_limited_routes(app)
    guard_limit_headers(app)
    release_only_where_limited(app)


def check_only_limited_routes(app: Flask) -> None:
    """Drop Flask-Limiter's check before every request: it looks for app-wide and default
    limits, and this service has none. Each limit above belongs to its route and is checked
    by its decorator when the view runs, so a request to any other route pays nothing
    (about 0.3 M instructions per request, bench/INSTRUCTIONS.md)."""
    if app_wide_limits(app):
        return  # someone configured app-wide limits: they need the check
    hooks = app.before_request_funcs.get(None, [])
    hooks[:] = [
        hook
        for hook in hooks
        if getattr(hook, "__func__", None) is not Limiter._check_request_limit
    ]


def headers_if_the_store_answers(
    inject: Callable[[Response], Response], every_route: bool
) -> Callable[[Response], Response]:
    """Flask-Limiter's header hook asks the store again once the answer is made (unless the
    request kept the window it read: rate_windows.py). If the store has failed since (Redis
    killed mid-request), the answer stands without the headers:
    raised from a hook, the error would turn a 503 (or a 200) into a bare 500 that no
    request log line records. It runs for the routes with a limit (`rate_limited`), or
    for `every_route` where app-wide limits are configured: for any other, it would only
    look for what no limit left (about 0.04 M instructions a request, callgrind)."""

    def add_limit_headers(response: Response) -> Response:
        if not every_route and not view_says(RATE_LIMITED):
            return response
        try:
            response = inject(response)
        except Exception as error:  # any store's failure: the answer is made already
            log.warning("rate-limit headers omitted: the store failed (%s)", type(error).__name__)
            for name in LIMIT_HEADERS:
                response.headers.pop(name, None)
        # Flask-Limiter works `Retry-After` out again a moment later, rounding down: it
        # could say 59 where the detail says "1 minute". The detail's number stands.
        if response.status_code == 429 and (wait := g.get("retry_after")) is not None:
            response.headers["Retry-After"] = str(wait)
        # And it adds one to every answer: on a vote's 201 "Retry-After: 3600" would tell a
        # client to wait when nothing was refused. It means something on a 429 or a 503
        # (RFC 9110, 10.2.3); the X-RateLimit-* headers say the rest.
        elif response.status_code not in RETRY_STATUSES:
            response.headers.pop("Retry-After", None)
        return response

    return add_limit_headers


def guard_limit_headers(app: Flask) -> None:
    """Wrap Flask-Limiter's after-request hook (see `headers_if_the_store_answers`)."""
    hooks = app.after_request_funcs.get(None, [])
    inject = getattr(Limiter, "_Limiter__inject_headers", None)
    found = [
        index
        for index, hook in enumerate(hooks)
        if isinstance(hook, functools.partial) and hook.func is inject
    ]
    # Flask-Limiter registers no hook where limits are off. Elsewhere, one that names or
    # registers it otherwise must not leave it unguarded: say so at start.
    if not found and app.config.get("RATELIMIT_ENABLED"):
        raise RuntimeError(
            "Flask-Limiter's after-request header hook was not found: a failing rate-limit "
            "store would turn answers into 500s (limits.guard_limit_headers)"
        )
    for index in found:
        hooks[index] = headers_if_the_store_answers(hooks[index], app_wide_limits(app))


def release_only_where_limited(app: Flask) -> None:
    """Flask-Limiter resets its state of a request when the request ends, making it first
    where no limit ran (its context read twice through Flask's request proxy: about 0.02 M
    instructions a request, callgrind). That state lives on the request's context, which
    goes with the request: after a route without a limit there is nothing to reset."""
    if app_wide_limits(app):
        return
    release = getattr(Limiter, "_Limiter__release_context", None)
    hooks = app.teardown_request_funcs.get(None, [])
    for index, hook in enumerate(hooks):
        if getattr(hook, "__func__", None) is release:
            hooks[index] = after_a_limited_route(hook)


def after_a_limited_route(release: Callable[[BaseException | None], None]) -> Callable:
    def release_limiter_state(error: BaseException | None = None) -> None:
        if view_says(RATE_LIMITED):
            release(error)

    return release_limiter_state
