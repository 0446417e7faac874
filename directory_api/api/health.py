"""/health (the database answers) and /health/ready (every configured backing service does)."""

from flask import Blueprint, current_app
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ..endpoints import endpoint
from ..platform.errors import problem
from ..platform.extensions import db
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
