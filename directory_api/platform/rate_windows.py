"""Flask-Limiter reading each moving window from its store once a request.

A limit counted only when the answer allows it (`deduct_when`: the votes to a location, the
broad searches) is tested before the view and its window read again for the answer's
`X-RateLimit-*` headers (or a 429's wait): two round trips to Redis for one figure, when
the request has not counted in that window meanwhile. Here a window read in a request is
kept by the request until the request counts in it (a hit, which the store must do), so
the headers show the figures the request was let in by. Another request may count in
the same window between the two reads either way: the headers are a moment's figures.
A kept window whose oldest count has expired since (a slow request) is read again, and
windows are kept by store and key (the in-memory fallback may take over mid-request). A
store that fails after the test (Redis killed mid-request) no longer costs such an answer
its headers: they come from the read that let it in.

Only the moving window (the strategy config.py sets) is wrapped; any other stays as
Flask-Limiter makes it.

And two steps of Flask-Limiter's, done as it does them for less (callgrind, a search on
PostgreSQL: 0.19 and 0.14 M instructions a request before): its state of the request,
found through Flask's request proxy two or three times each of the ten times it is asked
for; and the exemptions of the route and its blueprints, worked out with enum flags twice
a request where this service declares none. Both name Flask-Limiter's internals (`LimiterContext`,
`LimitManager.exemption_scope`): with adapt_limiter (limits.py), the places to check on an
upgrade of Flask-Limiter.
"""

import time
from typing import Any

from flask import Flask, has_request_context
from flask.globals import request_ctx
from flask_limiter import ExemptionScope, Limiter
from flask_limiter._extension import LimiterContext
from flask_limiter._manager import LimitManager
from limits import RateLimitItem, WindowStats
from limits.strategies import MovingWindowRateLimiter, RateLimiter

# Kept on Flask's request context, which goes with the request.
WINDOWS = "_rate_windows"  # the windows the request read, by store and key
STATE = "_limiter_state"  # Flask-Limiter's state of the request


def kept_by_request(name: str, make: type) -> Any:
    """What the current request keeps under `name`, made by `make` the first time."""
    kept = vars(request_ctx._get_current_object())
    found = kept.get(name)
    if found is None:
        found = kept[name] = make()
    return found


def windows_read() -> dict[tuple[int, str], WindowStats] | None:
    """The windows this request has read, or None outside a request."""
    return kept_by_request(WINDOWS, dict) if has_request_context() else None


class MovingWindowReadOnce(MovingWindowRateLimiter):
    """limits' moving window, its windows kept by the request that read them."""

    def test(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        # As limits tests: the window's count at most `amount - cost`.
        return self.get_window_stats(item, *identifiers).remaining >= cost

    def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        windows = windows_read()
        if windows is None:
            return super().get_window_stats(item, *identifiers)
        key = self.kept_as(item, identifiers)
        window = windows.get(key)
        # A window whose oldest count has expired since (a slow request) is read again:
        # its figures, and the wait the headers derive from them, have changed.
        if window is None or window.reset_time <= time.time():
            window = windows[key] = super().get_window_stats(item, *identifiers)
        return window

    def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        self.forget(item, identifiers)
        return super().hit(item, *identifiers, cost=cost)

    def clear(self, item: RateLimitItem, *identifiers: str) -> None:
        self.forget(item, identifiers)
        super().clear(item, *identifiers)

    def kept_as(self, item: RateLimitItem, identifiers: tuple[str, ...]) -> tuple[int, str]:
        """A window's name among those kept: its store's (the in-memory fallback may take
        over mid-request) and its key there."""
        return id(self.storage), item.key_for(*identifiers)

    def forget(self, item: RateLimitItem, identifiers: tuple[str, ...]) -> None:
        windows = windows_read()
        if windows:
            windows.pop(self.kept_as(item, identifiers), None)


class ServiceLimitManager(LimitManager):
    def exemption_scope(
        self, app: Flask, endpoint: str | None, blueprint: str | None
    ) -> ExemptionScope:
        # No exemption declared (Limiter.exempt), none found: Flask-Limiter's answer.
        if not self._route_exemptions and not self._blueprint_exemptions:
            return ExemptionScope.NONE
        return super().exemption_scope(app, endpoint, blueprint)


class ServiceLimiter(Limiter):
    """Flask-Limiter whose moving-window strategy (its store's, or the in-memory fallback's)
    is asked through `MovingWindowReadOnce` (every use of the strategy, its own and its
    `RequestLimit`s', goes through the `limiter` property), whose state of a request is
    kept on the request's context directly, and whose exemptions are not worked out when
    none is declared."""

    _read_once: MovingWindowReadOnce | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each limiter's state of a request its own, as Flask-Limiter keeps it.
        self._state = f"{STATE}_{id(self)}"
        # The manager Flask-Limiter made, its class swapped: it keeps every attribute its
        # constructor gave it (the exemptions are the limiter's own dicts, read live).
        self.limit_manager.__class__ = ServiceLimitManager

    @property
    def context(self) -> LimiterContext:
        return kept_by_request(self._state, LimiterContext)

    @property
    def limiter(self) -> RateLimiter:
        strategy = super().limiter
        if type(strategy) is not MovingWindowRateLimiter:
            return strategy
        wrapped = self._read_once
        if wrapped is None or wrapped.storage is not strategy.storage:
            # A new store (init_app again) or the switch to or from the fallback.
            wrapped = self._read_once = MovingWindowReadOnce(strategy.storage)
        return wrapped
