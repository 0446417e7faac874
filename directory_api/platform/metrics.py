"""Prometheus metrics (API.md 18): `GET /metrics`, one view of every worker of an instance.

- Requests are counted by method, route template (`/locations/<slug:slug>/votes/`, never
  the path a client sent: a path per slug or id would be a series per slug or id) and
  status class, with a latency histogram by route; a request that matched no route is
  `<unmatched>`. `/metrics` itself is not counted.
- Under gunicorn the client library's multiprocess mode is used: `PROMETHEUS_MULTIPROC_DIR`
  is set and emptied by the master before any worker starts (gunicorn.conf.py), each
  worker writes its own files, a worker that exits is marked dead (`child_exit`), and a
  scrape reads them all. Without it (the development server, tests) one process's
  registry is the view.
- What is read at scrape time (queues, backlogs) comes from collectors the app registers
  (`add_scrape_collector`), kept for `SCRAPE_CACHE_SECONDS` per process.
- `address_allowed`: the client is in `METRICS_ALLOW` (CIDRs, default loopback); the app
  may admit others too (a super's API token), and answers anyone else 404.
"""

import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Response, current_app, request, request_finished
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import Metric

from .current import current_globals, current_request

disable_created_metrics()  # a `_created` series beside each counter doubles every scrape

log = logging.getLogger(__name__)
PATH = "/metrics"
UNMATCHED = "<unmatched>"
SCRAPE_CACHE_SECONDS = 15.0
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
# Seconds: from a cached page (a millisecond) to a request that hits its timeouts.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter(
    "http_requests",
    "Requests answered, by method, route template and status class.",
    ["method", "route", "status"],
)
LATENCY = Histogram(
    "http_request_duration_seconds",
    "Time from the request's start to its answer, by route template.",
    ["route"],
    buckets=BUCKETS,
)


RATE_LIMITED = Counter(
    "rate_limit_refusals", "Requests refused by a rate limit (429), by limit.", ["limit"]
)
DEPENDENCY_ERRORS = Counter(
    "dependency_errors",
    "Failures of a service the API depends on while answering, by service (database, redis).",
    ["dependency"],
)
_children: dict[tuple[Any, tuple[str, ...]], Any] = {}


def count(counter: Counter, *labels: str) -> None:
    """One more of `counter{labels}` (its child kept: `labels()` parses every call)."""
    key = (counter, labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = counter.labels(*labels)
    child.inc()


def route_of() -> str:
    """The template of the route the request matched: a bounded set of labels."""
    rule = current_request().url_rule
    return rule.rule if rule is not None else UNMATCHED


# The children of a label set, once made: `labels()` parses its arguments every time.
_requests: dict[tuple[str, str, str], Any] = {}
_latency: dict[str, Any] = {}


def observe(_sender: Flask, response: Response, **_extra: Any) -> None:
    route = route_of()
    if route == PATH:
        return
    key = (current_request().method, route, f"{response.status_code // 100}xx")
    counter = _requests.get(key)
    if counter is None:
        counter = _requests[key] = REQUESTS.labels(*key)
    counter.inc()
    started = current_globals().get("started")
    if started is not None:
        histogram = _latency.get(route)
        if histogram is None:
            histogram = _latency[route] = LATENCY.labels(route)
        histogram.observe(time.perf_counter() - started)


class ScrapeTime:
    """Metrics read when scraped (a query each), kept SCRAPE_CACHE_SECONDS per process so
    that several scrapers, or a fast one, cost the database one read per interval."""

    def __init__(self, app: Flask, collect: Callable[[], Iterable[Metric]]) -> None:
        self.app = app
        self.collect_now = collect
        self.kept: list[Metric] = []
        self.until = 0.0
        self.lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        """What was read last (within SCRAPE_CACHE_SECONDS), else read now. A database that
        does not answer leaves them out of this scrape (the requests' metrics still come,
        and they show the 503s): a scrape must not fail with what it watches."""
        with self.lock:
            if time.monotonic() >= self.until:
                try:
                    with self.app.app_context():
                        self.kept = list(self.collect_now())
                except Exception as error:  # any store's failure, at 3 a.m.
                    log.warning("metrics read at scrape time left out: %s", type(error).__name__)
                    self.kept = []
                self.until = time.monotonic() + SCRAPE_CACHE_SECONDS
            return list(self.kept)


def add_scrape_collector(app: Flask, collect: Callable[[], Iterable[Metric]]) -> None:
    app.extensions.setdefault("scrape_collectors", []).append(ScrapeTime(app, collect))


def allowed_networks(app: Flask) -> tuple[Any, ...]:
    return tuple(
        ipaddress.ip_network(entry.strip(), strict=False) for entry in app.config["METRICS_ALLOW"]
    )


WARNED_OF_PROXY = threading.Event()


def address_allowed() -> bool:
    """Whether the client's address (after PROXY_FIX_X_FOR) is in METRICS_ALLOW.

    A request that came through a proxy (it carries X-Forwarded-For) while PROXY_FIX_X_FOR
    is 0 shows the proxy's address, loopback behind nginx, whoever the client is: it is not
    let in by address (the token still is)."""
    if not current_app.config["PROXY_FIX_X_FOR"] and "X-Forwarded-For" in request.headers:
        if not WARNED_OF_PROXY.is_set():  # once per process: anyone may send the header
            WARNED_OF_PROXY.set()
            log.warning(
                "GET /metrics came through a proxy (X-Forwarded-For) but PROXY_FIX_X_FOR is "
                "0: its address is the proxy's, so METRICS_ALLOW cannot admit it; set "
                "PROXY_FIX_X_FOR"
            )
        return False
    try:
        address = ipaddress.ip_address((request.remote_addr or "").split("%", 1)[0])
    except ValueError:
        return False
    networks = current_app.extensions["metrics_networks"]
    return any(address in network for network in networks if network.version == address.version)


def scrape_response() -> Response:
    """Every metric, in Prometheus' text format: all workers' (multiprocess mode) or this
    process's, and those read at scrape time."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROCESS_DIR):
        multiprocess.MultiProcessCollector(registry)
        collectors: list[Any] = []
    else:  # this process's metrics: ours, every module's, and the library's own
        collectors = [REGISTRY]
    for collector in [*collectors, *app.extensions.get("scrape_collectors", [])]:
        registry.register(collector)
    response = Response(generate_latest(registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    response.headers["Cache-Control"] = "no-store"
    return response


def init_metrics(app: Flask) -> None:
    """Count every request (the app declares the route that answers `scrape_response`)."""
    app.extensions["metrics_networks"] = allowed_networks(app)
    request_finished.connect(observe, app)
