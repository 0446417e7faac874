"""Every error, from every layer, becomes an RFC 9457 application/problem+json response."""

from http import HTTPStatus
from typing import Any, NoReturn

from flask import Flask, Response, current_app, g, request
from marshmallow import ValidationError
from redis.exceptions import RedisError
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from werkzeug.exceptions import HTTPException

from .extensions import db
from .json_provider import json_response
from .limits import rate_limit_detail
from .metrics import DEPENDENCY_ERRORS, RATE_LIMITED, count

PROBLEM_MIMETYPE = "application/problem+json"

# RFC 9110's names where Python 3.11's HTTPStatus still has the older ones.
TITLES = {413: "Content Too Large", 422: "Unprocessable Content"}

# Werkzeug's default descriptions speak of "the server" and "the browser"; these speak API.
DETAILS = {
    404: "No such resource.",
    405: "The method is not allowed on this path.",
    413: "The request body is too large.",
    415: "The request body must be application/json.",
}


class APIError(HTTPException):
    """An HTTP error carrying a problem detail and, optionally, per-field `errors` and
    `headers` of its own (`WWW-Authenticate`)."""

    def __init__(
        self,
        status: int,
        detail: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(description=detail)
        self.code = status
        self.extra = extra
        self.headers = headers or {}

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [*super().get_headers(*args, **kwargs), *self.headers.items()]


def abort(
    status: int, detail: str | None = None, headers: dict[str, str] | None = None, **extra: Any
) -> NoReturn:
    raise APIError(status, detail, headers, **extra)


def invalid(field: str, message: str | list[Any] | dict[Any, Any]) -> NoReturn:
    """422 for one body field: `message` is a text, a list of texts, or nested errors."""
    abort(
        422,
        "The request body has invalid fields.",
        errors={field: [message] if isinstance(message, str) else message},
    )


def problem(status: int, detail: str | None = None, **extra: Any) -> Response:
    """The one builder of problem responses."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": TITLES.get(status) or HTTPStatus(status).phrase,
        "status": status,
    }
    if detail:
        body["detail"] = detail
    body.update({key: value for key, value in extra.items() if value is not None})
    return json_response(body, status, PROBLEM_MIMETYPE)


def rewrite_as_problem(response: Response, status: int, detail: str) -> None:
    """Turn an answer built already into a problem, for a failure found after the view ran
    (saving the session). Its own headers (request id, security) stay; what described the
    success goes."""
    response.status_code = status
    response.set_data(problem(status, detail).get_data())
    response.content_type = PROBLEM_MIMETYPE
    for name in ("Location", "Link", "Set-Cookie", "ETag"):
        response.headers.pop(name, None)


def validation_problem(errors: dict[str, Any], detail: str) -> Response:
    return problem(422, detail, errors=errors)


def handle_http_exception(error: HTTPException) -> Response:
    status = error.code or 500
    if status == 429:
        scope = getattr(getattr(error, "limit", None), "scope", None)
        count(RATE_LIMITED, scope if isinstance(scope, str) else str(request.endpoint))
    if isinstance(error, APIError):
        response = problem(status, error.description, **error.extra)
    elif status == 429 and (worded := rate_limit_detail(getattr(error, "limit", None))):
        response = problem(status, worded)
    else:
        response = problem(status, DETAILS.get(status) or error.description)
    # Keep headers the exception carries (Allow on 405, Retry-After on 429).
    for name, value in error.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def handle_validation_error(error: ValidationError) -> Response:
    messages = error.messages if isinstance(error.messages, dict) else {"_schema": error.messages}
    return validation_problem(messages, "The request has invalid fields.")


def database_error_summary(error: DBAPIError) -> str:
    """Which constraint or error, never the values (they may be e-mail addresses)."""
    diag = getattr(error.orig, "diag", None)
    constraint = getattr(diag, "constraint_name", None)
    return f"{type(error.orig).__name__}" + (f" on {constraint}" if constraint else "")


def handle_integrity_error(error: IntegrityError) -> Response:
    db.session.rollback()
    current_app.logger.info("integrity conflict: %s", database_error_summary(error))
    return problem(409, "The change conflicts with existing data.")


def handle_data_error(error: DataError) -> Response:
    db.session.rollback()
    current_app.logger.info("value refused by the database: %s", database_error_summary(error))
    return problem(422, "A value in the request cannot be stored.")


def handle_database_unavailable(error: DBAPIError) -> Response:
    db.session.rollback()
    count(DEPENDENCY_ERRORS, "database")
    current_app.logger.error("database unavailable: %s", database_error_summary(error))
    return problem(503, "The database is unavailable; try again shortly.")


STORE_UNAVAILABLE = "The session or rate-limit store is unavailable; try again shortly."


def handle_store_unavailable(error: RedisError) -> Response:
    db.session.rollback()  # nothing the request did is kept when it cannot complete
    count(DEPENDENCY_ERRORS, "redis")
    current_app.logger.error("redis unavailable: %s", type(error).__name__)
    return problem(503, STORE_UNAVAILABLE)


def handle_pool_timeout(error: PoolTimeoutError) -> Response:
    count(DEPENDENCY_ERRORS, "database")
    current_app.logger.error("no database connection free within the pool timeout")
    return problem(503, "The database is busy; try again shortly.")


def handle_unexpected(error: Exception) -> Response:
    db.session.rollback()
    current_app.logger.exception(
        "unhandled error (request id %s)", g.get("request_id"), exc_info=error
    )
    return problem(500, "An unexpected error occurred.", requestId=g.get("request_id"))


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(ValidationError, handle_validation_error)
    app.register_error_handler(IntegrityError, handle_integrity_error)
    app.register_error_handler(DataError, handle_data_error)
    app.register_error_handler(OperationalError, handle_database_unavailable)
    app.register_error_handler(PoolTimeoutError, handle_pool_timeout)
    # Refused, timed out, or read-only after a failover: the store cannot do its part.
    app.register_error_handler(RedisError, handle_store_unavailable)
    app.register_error_handler(Exception, handle_unexpected)
