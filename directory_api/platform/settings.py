"""The start-up check of the settings: values that config.py could read but that cannot work
stop the app, with the same `SettingsError` (one line naming every such variable and what
it accepts) that config.py raises for values of the wrong kind.

Add a rule here, as a line of its own in `setting_problems`, or a range in BOUNDS.
"""

import ipaddress
import math
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from flask import Flask

from config import SettingsError

from .ssrf import parse_networks

# Each setting's range: its smallest sensible value (below, it would fail every request) and
# the most it can be (beyond, a duration or a date computed from it overflows, or the service
# it configures refuses it); None: no ceiling.
BOUNDS: dict[str, tuple[Any, Any]] = {
    "DATABASE_CONNECT_TIMEOUT": (1, None),
    # 0: no statement timeout; at most what PostgreSQL takes (milliseconds in an int).
    "DATABASE_STATEMENT_TIMEOUT": (0, 2_147_483),
    "DATABASE_POOL_TIMEOUT": (0.1, None),
    "DATABASE_PING_AFTER": (0, None),  # 0: ping on every checkout
    "REDIS_CONNECT_TIMEOUT": (0.1, None),
    "REDIS_TIMEOUT": (0.1, None),
    "MAIL_TIMEOUT": (0.1, None),
    "OUTBOX_LEASE_SECONDS": (2, None),  # a send must end a second before its lease does
    # Not timeouts, but periods with a floor all the same (0 would erase what is in use).
    "PII_RETENTION_DAYS": (1, 36500),
    "OUTBOX_RETENTION_DAYS": (1, 36500),
    "AUDIT_RETENTION_DAYS": (1, 36500),
    "SESSION_MAX_LIFETIME": (timedelta(days=1), timedelta(days=3650)),
    # Read in whole hours and days: more than 0 is at least 1 (tests go below, not operators).
    "SESSION_IDLE_LIFETIME": (timedelta(seconds=1), timedelta(hours=87600)),
    "PERMANENT_SESSION_LIFETIME": (timedelta(seconds=1), timedelta(days=3650)),
    # Amounts that must not be negative (0 is a choice: no receipts, no public caching).
    "VOTE_RECEIPTS_PER_ADDRESS": (0, None),
    "WEBHOOK_TIMEOUT": (1, 60),  # a receiver's answer; a worker waits no longer
    "WEBHOOK_LOG_DAYS": (1, 36500),
    "WEBHOOK_WORKERS": (1, 64),  # threads of one outbox worker
    "VOTE_MIN_FILL_SECONDS": (0, 600),  # 0: no time trap; a challenge lives 10 minutes
    # Below 1,000 a browser solves it at once; past 10 million a phone takes minutes.
    "VOTE_CHALLENGE_MAX_NUMBER": (1_000, 10_000_000),
    "PUBLIC_MAX_AGE": (0, None),
    "SESSION_TOUCH_INTERVAL": (0, None),
    "PROXY_FIX_X_FOR": (0, None),
    "PROXY_FIX_X_PROTO": (0, None),
    "HSTS_MAX_AGE": (0, None),
    "IMPORT_MAX_BYTES": (1024, None),  # a header row and a few rows at least
    "MAX_CONTENT_LENGTH": (1024, None),  # the largest vote, with its form encoding
    "MAIL_PORT": (1, 65535),
    "EXPORTS_AT_ONCE": (1, None),  # 0 would refuse every export
    "RATELIMIT_BROAD_SEARCH_ROWS": (1, None),  # 0 would take every search for a broad one
    # Argon2's own minimums (memory: 8 KiB per lane).
    "ARGON2_TIME_COST": (1, None),
    "ARGON2_MEMORY_COST": (8, None),
    "ARGON2_PARALLELISM": (1, None),
}
# Settings config.py derives from a variable of another name, read in whole units: that
# variable and its unit.
READ_AS = {
    "SESSION_MAX_LIFETIME": ("SESSION_MAX_DAYS", timedelta(days=1)),
    "SESSION_IDLE_LIFETIME": ("SESSION_IDLE_HOURS", timedelta(hours=1)),
    "PERMANENT_SESSION_LIFETIME": ("SESSION_REMEMBER_DAYS", timedelta(days=1)),
}

MIN_SECRET_LENGTH = 32
# Words of the values people paste from examples (compared in lower case, letters and
# digits only), so that "change-me-…" is refused however long.
PLACEHOLDERS = (
    "changeme",
    "changethis",
    "replaceme",
    "placeholder",
    "example",
    "notsecret",
    "notasecret",
    "insecure",
    "devonly",
    "testonly",
    "yoursecret",
    "secretkey",
)
KEY_COMMAND = "python -c 'import secrets; print(secrets.token_urlsafe(48))'"


def check_settings(app: Flask) -> None:
    """Refuse to start, naming every setting that cannot work."""
    problems = setting_problems(app)
    if problems:
        raise SettingsError(problems)


def setting_problems(app: Flask) -> list[str]:
    config = app.config
    problems = out_of_bounds(config)
    problems += [
        f"CORS_ORIGINS entry {origin!r} is not an exact origin such as https://admin.example.org"
        for origin in config["CORS_ORIGINS"]
        if not is_exact_origin(origin)
    ]
    problems += network_problems(config)
    problems += transport_problems(config)
    if config["SESSION_TYPE"] == "redis" and not config["REDIS_URL"]:
        problems.append("SESSION_TYPE=redis needs REDIS_URL")
    problems += cookie_prefix_problems(config)
    if config["ARGON2_MEMORY_COST"] < 8 * config["ARGON2_PARALLELISM"]:
        problems.append("ARGON2_MEMORY_COST must be at least 8 × ARGON2_PARALLELISM (KiB)")
    if config.get("ENV_NAME") == "production" and not config.get("TESTING"):
        problems += [f"in production, {problem}" for problem in production_problems(config)]
        if app.debug:  # it would also show tracebacks to clients
            problems.append("in production, unset FLASK_DEBUG")
    return problems


def transport_problems(config: Any) -> list[str]:
    """Values each readable on its own that cannot work as given, or together (issue 35):
    a front end's URL without a scheme, a SameSite=None cookie browsers would drop, two
    ways of mail encryption at once, a Redis URL naming no database number."""
    problems = []
    frontend = urlsplit(config["FRONTEND_URL"] or "")
    if frontend.scheme not in ("http", "https") or not frontend.hostname:
        problems.append(
            "FRONTEND_URL must be an absolute URL such as https://admin.example.org "
            "(the links in mail start with it)"
        )
    if config["SESSION_COOKIE_SAMESITE"] == "None" and not config["SESSION_COOKIE_SECURE"]:
        problems.append(
            "SESSION_COOKIE_SAMESITE=None needs SESSION_COOKIE_SECURE=true "
            "(browsers drop such a cookie otherwise)"
        )
    if config.get("MAIL_USE_TLS") and config.get("MAIL_USE_SSL"):
        problems.append(
            "set one of MAIL_USE_TLS (STARTTLS, usually port 587) and MAIL_USE_SSL "
            "(TLS from the start, usually port 465), not both"
        )
    for name in ("REDIS_URL", "RATELIMIT_STORAGE_URI"):
        url = urlsplit(config.get(name) or "")
        database = url.path.strip("/")
        if url.scheme in ("redis", "rediss") and database and not database.isdigit():
            problems.append(f"{name}'s path must be a database number such as /0")
    return problems


def network_problems(config: Any) -> list[str]:
    problems = []
    for name in ("WEBHOOK_ALLOWED_NETWORKS", "METRICS_ALLOW"):
        for entry in config[name]:
            try:
                parse_networks([entry])
            except ValueError:
                problems.append(f"{name} entry {entry!r} is not a network such as 10.20.0.0/16")
    return problems


def cookie_prefix_problems(config: Any) -> list[str]:
    """A cookie name's prefix is a promise browsers hold it to: they drop the cookie
    (nobody could sign in) unless it is Secure, and for __Host- also on path / with no
    Domain."""
    name = config["SESSION_COOKIE_NAME"]
    if not name.startswith(("__Host-", "__Secure-")):
        return []
    problems = []
    if not config["SESSION_COOKIE_SECURE"]:
        problems.append(f"SESSION_COOKIE_NAME={name} needs SESSION_COOKIE_SECURE=true")
    if name.startswith("__Host-") and (
        config.get("SESSION_COOKIE_DOMAIN") or (config.get("SESSION_COOKIE_PATH") or "/") != "/"
    ):
        problems.append(f"SESSION_COOKIE_NAME={name} needs no cookie domain and the path /")
    return problems


def out_of_bounds(config: dict[str, Any]) -> list[str]:
    """A setting under its floor or above its ceiling, named as the variable it is read from."""
    problems = []
    for name, (lowest, highest) in BOUNDS.items():
        value = config[name]
        if not value >= lowest:
            variable, limit, shown = as_read(name, lowest, value, math.ceil)
            problems.append(f"{variable} must be at least {limit} (it is {shown})")
        elif highest is not None and value > highest:
            variable, limit, shown = as_read(name, highest, value, math.floor)
            problems.append(f"{variable} must be at most {limit} (it is {shown})")
    return problems


def as_read(name: str, limit: Any, value: Any, whole: Any) -> tuple[str, Any, str]:
    """The variable `name` is read from, `limit` and `value` in its units (`limit` rounded
    to a whole one by `whole`)."""
    variable, unit = READ_AS.get(name, (name, None))
    if unit is None:
        return variable, limit, f"{value!s}"
    return variable, whole(limit / unit), f"{value / unit:g}"


def is_loopback(url: str) -> bool:
    """Whether the URL's host is this machine: `localhost` or a loopback address."""
    host = urlsplit(url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address
        return False


def is_exact_origin(origin: str) -> bool:
    """flask-cors would read "*" or a pattern as "reflect anyone"."""
    parts = urlsplit(origin)
    return (
        parts.scheme in ("http", "https")
        and bool(parts.netloc)
        and not (parts.path or parts.query or parts.fragment)
        and not any(char in origin for char in "*?[]()^$\\|+ ")
    )


def is_weak_secret(secret: str | None) -> bool:
    """Missing, short, of few distinct characters, or with a placeholder's words in it."""
    if not secret or len(secret) < MIN_SECRET_LENGTH or len(set(secret)) < 10:
        return True
    letters = re.sub(r"[^a-z0-9]", "", secret.lower())
    return any(word in letters for word in PLACEHOLDERS)


def production_problems(config: dict[str, Any]) -> list[str]:
    problems = []
    # The root of the session signature and of every derived key; never shown back.
    if is_weak_secret(config.get("SECRET_KEY")):
        problems.append(
            f"set SECRET_KEY to a random string of at least {MIN_SECRET_LENGTH} characters, "
            f"not a placeholder (e.g. from {KEY_COMMAND})"
        )
    if config.get("OUTBOX_KEY") and is_weak_secret(config["OUTBOX_KEY"]):
        problems.append(
            f"set OUTBOX_KEY to a random string of at least {MIN_SECRET_LENGTH} characters "
            "(or unset it to derive the key from SECRET_KEY)"
        )
    if config.get("PII_HASH_KEY") and is_weak_secret(config["PII_HASH_KEY"]):
        problems.append(
            f"set PII_HASH_KEY to a random string of at least {MIN_SECRET_LENGTH} characters "
            "(or unset it to derive the key from SECRET_KEY)"
        )
    if config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite") and not config.get(
        "ALLOW_SQLITE_IN_PRODUCTION"
    ):
        problems.append("set DATABASE_URL to a PostgreSQL database (postgresql://…)")
    if not config.get("MAIL_SERVER"):
        # Without SMTP, messages (reset and invitation links included) would only be logged.
        problems.append("set MAIL_SERVER (and MAIL_PORT, MAIL_USERNAME, …) to an SMTP server")
    if config.get("MAIL_LOG_FILE"):  # it holds live links in clear: development only
        problems.append("unset MAIL_LOG_FILE")
    if config.get("WEBHOOK_ALLOW_HTTP"):  # signed, but readable and alterable on the way
        problems.append("unset WEBHOOK_ALLOW_HTTP (webhook receivers must be https)")
    frontend = config.get("FRONTEND_URL") or ""
    if urlsplit(frontend).scheme == "http" and not is_loopback(frontend):
        problems.append("FRONTEND_URL must be https://")  # links would travel in clear
    # State kept per process or per host would differ between gunicorn workers and hosts.
    if config["SESSION_TYPE"] != "redis" and not config.get("ALLOW_FILE_SESSIONS"):
        problems.append(
            "set REDIS_URL so sessions are shared by every worker and host "
            "(or ALLOW_FILE_SESSIONS=1 for a single host)"
        )
    if config["RATELIMIT_STORAGE_URI"].startswith("memory") and not config.get(
        "ALLOW_MEMORY_RATELIMITS"
    ):
        problems.append(
            "set REDIS_URL (or RATELIMIT_STORAGE_URI) so rate limits count across workers "
            "(or ALLOW_MEMORY_RATELIMITS=1 to let each worker count alone)"
        )
    return problems
