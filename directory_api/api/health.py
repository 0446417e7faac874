"""/health (the database answers), /health/ready (every configured backing service does)
and /metrics (Prometheus, API.md 18)."""

from flask import Blueprint, current_app
from flask_login import current_user
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ..access import calling_token, granted
from ..endpoints import endpoint
from ..models.api_token import Scope
from ..platform.errors import abort, problem
from ..platform.extensions import db
from ..platform.metrics import address_allowed, scrape_response
from ..platform.timeouts import redis_options
from ..schemas.common import ReadyOut, StatusOut

bp = Blueprint("health", __name__)


def database_ok() -> bool:
    try:
        db.session.execute(text("SELECT 1"))
    except SQLAlchemyError:
        db.session.rollback()
        return False
    return True


def redis_urls() -> set[str]:
    config = current_app.config
    urls = {config["REDIS_URL"]} if config.get("REDIS_URL") else set()
    if config["RATELIMIT_STORAGE_URI"].startswith(("redis://", "rediss://")):
        urls.add(config["RATELIMIT_STORAGE_URI"])
    return urls


def redis_ok(url: str) -> bool:
    try:
        client = Redis.from_url(url, **redis_options(current_app.config))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except RedisError:
        return False


@bp.get("/health")
@endpoint(response=StatusOut)
def health():
    """Liveness: 200 when the database answers, else 503."""
    if not database_ok():
        return problem(503, "The database is not answering.", checks={"database": "down"})
    return {"status": "ok"}


@bp.get("/health/ready")
@endpoint(response=ReadyOut)
def ready():
    """Readiness: the database and, when configured, Redis; 503 naming what failed."""
    checks = {"database": "ok" if database_ok() else "down"}
    if urls := redis_urls():
        checks["redis"] = "ok" if all(redis_ok(url) for url in urls) else "down"
    failed = [name for name, state in checks.items() if state != "ok"]
    if failed:
        return problem(503, "Not ready: " + ", ".join(failed) + " unavailable.", checks=checks)
    return {"status": "ok", "checks": checks}


@bp.get("/metrics")
@endpoint(responses={200: None}, not_found=True)
def metrics():
    """Prometheus metrics of this instance (text format): requests by route template,
    latency, backlogs. For addresses in METRICS_ALLOW, or a super's API token with
    `audit:read`; anyone else gets 404."""
    if not (address_allowed() or super_reading_the_audit()):
        abort(404)
    return scrape_response()


metrics.hidden_from_strangers = True  # a bad bearer token counts as none (access.py)


def super_reading_the_audit() -> bool:
    """A super's token that may read the whole audit log (no location limit)."""
    token = calling_token()
    return (
        token is not None
        and current_user.is_super
        and Scope.AUDIT_READ in granted(token.scopes)
        and token.location_ids is None
    )
