"""The rate limits of API.md, each read from the configuration when a request arrives."""

import functools
import logging
from collections.abc import Callable

from flask import Flask, Response, current_app, request
from flask_limiter import Limiter
from flask_login import current_user

from .email_addresses import normalize_email
from .extensions import client_network, limiter

log = logging.getLogger(__name__)
LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def configured(name: str) -> Callable[[], str]:
    return lambda: current_app.config[name]


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


login_per_ip = limiter.limit(configured("RATELIMIT_LOGIN_PER_IP"))
login_per_email = limiter.limit(configured("RATELIMIT_LOGIN_PER_EMAIL"), key_func=email_in_body)
reset_per_ip = limiter.limit(configured("RATELIMIT_RESET_PER_IP"))
reset_per_email = limiter.limit(configured("RATELIMIT_RESET_PER_EMAIL"), key_func=email_in_body)
email_update_per_account = limiter.limit(
    configured("RATELIMIT_EMAIL_UPDATE_PER_ACCOUNT"), key_func=signed_in_account
)
# Registration and every endpoint that takes a token share one allowance per IP.
token_endpoints = limiter.shared_limit(configured("RATELIMIT_TOKENS_PER_IP"), scope="tokens")
# Every type of public vote submission shares one allowance per client IP.
votes_per_ip = limiter.shared_limit(configured("RATELIMIT_VOTES_PER_IP"), scope="votes")


def path_location() -> str:
    """Key: the location the path names (by its slug), whoever asks."""
    return "location:" + str((request.view_args or {}).get("slug"))


# And one per location, whatever the address: visitors of a hostile page cannot flood one
# location from many addresses (API.md 17). It counts submissions accepted (answered below
# 400), so one address past its own allowance spends none of the location's; checked
# before the per-IP limit, whose figures the answer's headers then show the client.
votes_per_location = limiter.shared_limit(
    configured("VOTE_LIMIT_PER_LOCATION"),
    scope="votes-location",
    key_func=path_location,
    deduct_when=lambda response: response.status_code < 400,
)
# Every CSV export (businesses, employers, votes) shares one allowance per client IP.
exports_per_ip = limiter.shared_limit(configured("RATELIMIT_EXPORTS_PER_IP"), scope="exports")


def check_only_limited_routes(app: Flask) -> None:
    """Drop Flask-Limiter's check before every request: it looks for app-wide and default
    limits, and this service has none. Each limit above belongs to its route and is checked
    by its decorator when the view runs, so a request to any other route pays nothing
    (about 0.3 M instructions per request, bench/INSTRUCTIONS.md)."""
    if app.config.get("RATELIMIT_DEFAULT") or app.config.get("RATELIMIT_APPLICATION"):
        return  # someone configured app-wide limits: they need the check
    hooks = app.before_request_funcs.get(None, [])
    hooks[:] = [
        hook
        for hook in hooks
        if getattr(hook, "__func__", None) is not Limiter._check_request_limit
    ]


def headers_if_the_store_answers(
    inject: Callable[[Response], Response],
) -> Callable[[Response], Response]:
    """Flask-Limiter's header hook asks the store again once the answer is made. If the store
    has failed since (Redis killed mid-request), the answer stands without the headers:
    raised from a hook, the error would turn a 503 (or a 200) into a bare 500 that no
    request log line records."""

    def add_limit_headers(response: Response) -> Response:
        try:
            return inject(response)
        except Exception as error:  # any store's failure: the answer is made already
            log.warning("rate-limit headers omitted: the store failed (%s)", type(error).__name__)
            for name in LIMIT_HEADERS:
                response.headers.pop(name, None)
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
        hooks[index] = headers_if_the_store_answers(hooks[index])
