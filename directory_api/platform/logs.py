"""Logging: the request id on every line, one line per request, JSON in production.

Paths are logged with tokens replaced and control characters escaped (a path can never
start a second line), and no body, query string, password or vote detail is ever logged.
"""

import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from flask import Flask, Response, g, has_request_context, request_finished

from .current import current_globals, current_request

# Paths whose rest is a secret token. Matched on the path itself, not on the route, so the
# token is redacted whatever the answer: a 404 or 405 matches no route.
TOKEN_PATH_PREFIXES = (
    "/me/password-reset/",
    "/me/email-update/",
    "/me/roles/accept/",
    "/votes/confirm/",
    "/votes/withdraw/",
)
REDACTED = "[redacted]"
# What could end or disguise a log line: C0 and C1 controls, DEL, the Unicode line and
# paragraph separators; and the backslash, so that an escape in the log is unambiguous.
UNSAFE_IN_LOG = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")
REQUEST_FIELDS = ("request_id", "method", "path", "status", "duration_ms", "user_id")

request_log = logging.getLogger("directory_api.requests")


class RequestIdFilter(logging.Filter):
    """Stamp every record with the current request's id (or "-" outside requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = (
                current_globals().get("request_id", "-") if has_request_context() else "-"
            )
        return True


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in REQUEST_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def not_a_request_line(record: logging.LogRecord) -> bool:
    """Werkzeug's development server logs each request ("127.0.0.1 - - [date] "GET /path…"
    200"), beside this package's own line for it: its line goes (it would also print
    tokens in paths, which this package's line redacts); its banner and errors stay."""
    return " - - [" not in record.getMessage()


def configure_logging(app: Flask) -> None:
    """The package logs at LOG_LEVEL to stderr unless the host (pytest) set logging up;
    `flask run`'s server logs no second line per request."""
    development_server = logging.getLogger("werkzeug")
    if not_a_request_line not in development_server.filters:
        development_server.addFilter(not_a_request_line)
    logger = logging.getLogger("directory_api")
    logger.setLevel(app.config["LOG_LEVEL"])
    if not any(isinstance(f, RequestIdFilter) for f in logger.filters):
        logger.addFilter(RequestIdFilter())
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(
        JSONFormatter() if app.config["JSON_LOG"] else logging.Formatter(TEXT_FORMAT)
    )
    logger.addHandler(handler)
    logger.propagate = False


def escape_for_log(text: str) -> str:
    """`text` on one line: CR becomes \\r, NUL \\x00, U+2028 \\u2028, a backslash \\\\."""
    return UNSAFE_IN_LOG.sub(lambda match: match.group().encode("unicode_escape").decode(), text)


def redact_tokens(path: str) -> str:
    """Everything after a token-bearing prefix, however the path is spelled (case, //)."""
    canonical = re.sub("/{2,}", "/", path).lower()
    for prefix in TOKEN_PATH_PREFIXES:
        if canonical.startswith(prefix) and len(canonical) > len(prefix):
            return prefix + REDACTED
    return path


def logged_path() -> str:
    return escape_for_log(redact_tokens(current_request().path))


def start_timer() -> None:
    g.started = time.perf_counter()


def log_request(_sender: Flask, response: Response, **_extra: Any) -> None:
    state = current_globals()
    started = state.get("started")
    user = state.get("_login_user")  # only if this request loaded one; never loads it for logging
    method, path = escape_for_log(current_request().method), logged_path()
    request_log.info(
        "%s %s %s",
        method,
        path,
        response.status_code,
        extra={
            "request_id": state.get("request_id"),
            "method": method,
            "path": path,
            "status": response.status_code,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1) if started else None,
            "user_id": str(user.id) if getattr(user, "is_authenticated", False) else None,
        },
    )


def register_request_logging(app: Flask) -> None:
    app.before_request(start_timer)
    # Sent once the answer is final, after the session is saved (which can still turn it
    # into a 503), so the line shows the status the client got.
    request_finished.connect(log_request, app)
