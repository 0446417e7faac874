"""Settings, every one read from the environment once, when this module is imported, by the
parser of its kind (documented once, in README.md).

A value of the wrong kind stops the start with one line naming the variable and what it
accepts (`SettingsError`, from get_config()), and so does a variable with one of the
service's prefixes that nothing reads (a misspelling, named with the nearest setting: it
would otherwise leave its setting at the default, silently). Values that are readable but
cannot work (a timeout of 0, a weak SECRET_KEY in production) are refused by
directory_api/platform/settings.py, in the same way.
"""

import difflib
import math
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TypeVar
from urllib.parse import urlsplit

import click
import limits

T = TypeVar("T")


class SettingsError(click.ClickException):
    """Settings the app cannot start with. The message is one line naming each variable and
    what it accepts: `flask` prints it as `Error: …` and exits 1 (a ClickException), and
    gunicorn prints it alone and stops (gunicorn.conf.py: its master, and `post_fork`).
    Values are shown except where they may hold a password (URLs) or are secrets."""

    def __init__(self, problems: Iterable[str]) -> None:
        super().__init__("Refusing to start: " + "; ".join(problems) + ".")


# Each variable set to a value its kind refuses, as the words that say so. Nothing is raised
# while this module is imported (gunicorn's master imports it with its config file, where an
# exception is a page of traceback): get_config() refuses to start while any is listed.
UNREADABLE: list[str] = []
# Every variable this module was asked for (whatever the answer): the service's settings.
READ: set[str] = set()
# The prefixes of the service's settings: a variable starting with one that nothing reads
# is taken for a misspelt setting.
PREFIXES = (
    "ALLOW_", "APP_", "ARGON2_", "AUDIT_", "CORS_", "DATABASE_", "EXPORTS_", "FRONTEND_",
    "GUNICORN_", "HSTS_", "IMPORT_", "MAIL_", "METRICS_", "OUTBOX_", "PII_", "PROXY_FIX_",
    "PUBLIC_", "RATELIMIT_", "REDIS_", "SECRET_", "SESSION_", "TRUSTED_", "VOTE_", "WEBHOOK_",
)  # fmt: skip
# Read elsewhere, under those prefixes: gunicorn.conf.py (a worker imports this module
# afresh, without them), gunicorn itself, and a desktop session's own variable.
READ_ELSEWHERE = frozenset(
    {
        "GUNICORN_BIND",
        "GUNICORN_THREADS",
        "GUNICORN_TIMEOUT",
        "GUNICORN_GRACEFUL_TIMEOUT",
        "GUNICORN_MAX_REQUESTS",
        "GUNICORN_LOG_LEVEL",
        "GUNICORN_CONTROL_SOCKET",
        "GUNICORN_CMD_ARGS",
        "SESSION_MANAGER",
    }
)


def unknown_settings() -> list[str]:
    """A problem for each variable with the service's prefixes that nothing reads, naming
    the nearest setting when one is near."""
    known = sorted(READ | READ_ELSEWHERE)
    problems = []
    for name in sorted(os.environ):
        if name.startswith(PREFIXES) and name not in known:
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]}?)" if near else ""
            problems.append(f"{name} is not a setting of this service{hint}")
    return problems


def env(name: str, default: str | None = None) -> str | None:
    READ.add(name)
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def env_parsed(
    name: str, default: T, parse: Callable[[str], T], accepts: str, *, show: bool = True
) -> T:
    """`name` read by `parse`, or `default` when unset or empty. A value `parse` refuses
    (ValueError) is noted in UNREADABLE as "NAME='value' <accepts>" (without the value
    unless `show`)."""
    value = env(name)
    if value is None:
        return default
    try:
        return parse(value.strip())
    except ValueError:
        UNREADABLE.append(f"{name}{f'={value!r}' if show else ''} {accepts}")
        return default


def one_of(options: Mapping[str, T]) -> Callable[[str], T]:
    """A parser accepting the keys of `options` (lower-case), in any case."""

    def parse(value: str) -> T:
        if value.lower() not in options:
            raise ValueError(value)
        return options[value.lower()]

    return parse


def env_choice(name: str, default: str, options: Iterable[str]) -> str:
    """One of `options` (in any case; read as spelt in `options`)."""
    spelt = {option.lower(): option for option in options}
    return env_parsed(name, default, one_of(spelt), f"is not one of: {', '.join(spelt.values())}")


BOOLEANS = {"true": True, "1": True, "yes": True, "on": True}
BOOLEANS |= {"false": False, "0": False, "no": False, "off": False}


def env_bool(name: str, default: T) -> bool | T:
    """true/false, 1/0, yes/no, on/off in any case; anything else is refused, not false."""
    accepts = "is not a boolean (true/false, 1/0, yes/no, on/off)"
    return env_parsed(name, default, one_of(BOOLEANS), accepts)


LARGEST_WHOLE_NUMBER = 10**8  # beyond any setting's use; larger ones overflow durations


def whole_number(value: str) -> int:
    number = int(value)
    if abs(number) > LARGEST_WHOLE_NUMBER:
        raise ValueError(value)
    return number


def env_int(name: str, default: int) -> int:
    return env_parsed(
        name, default, whole_number, f"is not a whole number up to {LARGEST_WHOLE_NUMBER}"
    )


def finite_float(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(value)
    return number


def env_float(name: str, default: float) -> float:
    return env_parsed(name, default, finite_float, "is not a number")


def rate_limit(value: str) -> str:
    """Kept as written (Flask-Limiter reads it), once `limits` has read it as Flask-Limiter
    will: a value it cannot read would silently turn the limit off."""
    limits.parse_many(value)
    return value


def env_rate_limit(name: str, default: str) -> str:
    return env_parsed(
        name, default, rate_limit, 'is not a rate limit (e.g. "10 per minute" or "10/minute")'
    )


def url_with_scheme(schemes: Iterable[str]) -> Callable[[str], str]:
    """A parser accepting URLs of `schemes` (the part before "://", in any case)."""

    def parse(value: str) -> str:
        scheme, separator, _rest = value.partition("://")
        if not separator or scheme.lower() not in schemes:
            raise ValueError(value)
        urlsplit(value).port  # noqa: B018  (a port that is not a number: ValueError)
        return value

    return parse


def env_url(name: str, schemes: Iterable[str], example: str) -> str | None:
    """A URL with one of `schemes`; never quoted back (it may hold a password)."""
    return env_parsed(
        name, None, url_with_scheme(schemes), f"is not a URL like {example}", show=False
    )


def database_url(url: str | None) -> str | None:
    """Use the psycopg 3 driver for plain postgres:// URLs (as hosting providers hand them out)."""
    if url is None:
        return None
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def env_database_url(name: str) -> str | None:
    return database_url(
        env_url(
            name,
            ("postgresql", "postgres", "postgresql+psycopg", "sqlite"),
            "postgresql://user:password@host/database or sqlite:////absolute/path.sqlite3",
        )
    )


def env_redis_url(name: str) -> str | None:
    return env_url(name, ("redis", "rediss", "unix"), "redis://host:6379/0")


# The storages rate limits may count in: memory, or Redis (whose client is installed).
RATELIMIT_STORAGE_SCHEMES = ("memory", "redis", "rediss", "redis+unix")
SESSION_TYPES = ("cachelib", "redis")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
POOL_MODES = ("session", "transaction")  # how PostgreSQL connections are pooled (PgBouncer)


def env_secrets(name: str) -> tuple[str, ...]:
    """Comma-separated secrets, each as written but for surrounding spaces (a base64 key
    may end in "/", which a list of URLs would lose)."""
    return tuple(item.strip() for item in (env(name) or "").split(",") if item.strip())


def env_list(name: str) -> list[str]:
    """Comma-separated URLs, origins or networks, without a trailing "/"."""
    return [item.rstrip("/") for item in env_secrets(name)]


# Unset (None), these follow the profile: on in production, off elsewhere.
SECURE_COOKIES = env_bool("SESSION_COOKIE_SECURE", None)
JSON_LOGS = env_bool("JSON_LOG", None)


class Config:
    SECRET_KEY = env("SECRET_KEY")
    # Earlier secret keys, comma-separated, while SECRET_KEY is rotated (Flask's own
    # setting, API.md 18): sessions, pending mail, challenges and voters' address hashes
    # made under them stay valid.
    SECRET_KEY_FALLBACKS = env_secrets("SECRET_KEY_FALLBACKS")
    # PII_HASH_KEY, when set, keys the voters' address hashes instead of SECRET_KEY. Hashes
    # made under PII_HASH_OLD_KEYS still match, and so do those made under SECRET_KEY and
    # its fallbacks unless PII_HASH_MATCH_SECRET_KEYS is off (README, "Rotating the secret
    # key": how to retire them once no vote needs them).
    PII_HASH_KEY = env("PII_HASH_KEY")
    PII_HASH_OLD_KEYS = env_secrets("PII_HASH_OLD_KEYS")
    PII_HASH_MATCH_SECRET_KEYS = env_bool("PII_HASH_MATCH_SECRET_KEYS", True)
    # None means "SQLite in the instance folder"; create_app() fills in the path.
    SQLALCHEMY_DATABASE_URI = env_database_url("DATABASE_URL")
    # Every wait on a backing service is bounded (directory_api/platform/timeouts.py), so a stalled
    # dependency answers 503 within seconds instead of hanging the request.
    DATABASE_CONNECT_TIMEOUT = env_int("DATABASE_CONNECT_TIMEOUT", 3)  # seconds (libpq: ≥ 2)
    DATABASE_STATEMENT_TIMEOUT = env_float("DATABASE_STATEMENT_TIMEOUT", 5.0)  # seconds; 0: none
    DATABASE_POOL_TIMEOUT = env_float("DATABASE_POOL_TIMEOUT", 3.0)  # wait for a free connection
    # A pooled connection idle this long is pinged before use (0: every time; timeouts.py).
    DATABASE_PING_AFTER = env_float("DATABASE_PING_AFTER", 2.0)
    # `transaction` behind PgBouncer in transaction pooling (API.md 18): no server-side
    # prepared statements, no session settings at connect (the statement timeout is then
    # the pooler's `connect_query` or the role's; deploy/pgbouncer.ini).
    DATABASE_POOL_MODE = env_choice("DATABASE_POOL_MODE", "session", POOL_MODES)
    REDIS_URL = env_redis_url("REDIS_URL")
    REDIS_CONNECT_TIMEOUT = env_float("REDIS_CONNECT_TIMEOUT", 1.0)
    REDIS_TIMEOUT = env_float("REDIS_TIMEOUT", 1.0)

    # Server-side sessions: a file store under the instance folder unless Redis is configured.
    SESSION_TYPE = env_choice("SESSION_TYPE", "redis" if REDIS_URL else "cachelib", SESSION_TYPES)
    SESSION_FILE_DIR = env("SESSION_FILE_DIR")  # default: <instance folder>/sessions
    SESSION_FILE_THRESHOLD = env_int("SESSION_FILE_THRESHOLD", 10_000)
    SESSION_PERMANENT = False  # only "remember" makes the cookie outlive the browser
    SESSION_REFRESH_EACH_REQUEST = False  # the store is refreshed at most once per interval
    SESSION_TOUCH_INTERVAL = env_int("SESSION_TOUCH_INTERVAL", 300)
    SESSION_IDLE_LIFETIME = timedelta(hours=env_int("SESSION_IDLE_HOURS", 12))
    PERMANENT_SESSION_LIFETIME = timedelta(days=env_int("SESSION_REMEMBER_DAYS", 14))
    # However active, a session ends this long after its sign-in (platform/sessions.py).
    SESSION_MAX_LIFETIME = timedelta(days=env_int("SESSION_MAX_DAYS", 30))
    SESSION_KEY_PREFIX = env("SESSION_KEY_PREFIX", "session:")
    SESSION_COOKIE_NAME = env("SESSION_COOKIE_NAME", "session")
    SESSION_COOKIE_HTTPONLY = True
    SESSION_COOKIE_SAMESITE = env_choice(
        "SESSION_COOKIE_SAMESITE", "Lax", ("Lax", "Strict", "None")
    )
    SESSION_COOKIE_SECURE = SECURE_COOKIES is True
    # Strict-Transport-Security on answers over https (0: none); production sends a year.
    HSTS_MAX_AGE = env_int("HSTS_MAX_AGE", 0)
    HSTS_INCLUDE_SUBDOMAINS = env_bool("HSTS_INCLUDE_SUBDOMAINS", False)

    # Rate limits (Flask-Limiter): memory by default, Redis when configured.
    RATELIMIT_ENABLED = env_bool("RATELIMIT_ENABLED", True)
    RATELIMIT_STORAGE_URI = (
        env_url(
            "RATELIMIT_STORAGE_URI", RATELIMIT_STORAGE_SCHEMES, "memory:// or redis://host:6379/0"
        )
        or REDIS_URL
        or "memory://"
    )
    RATELIMIT_KEY_PREFIX = env("RATELIMIT_KEY_PREFIX", "directory-api")
    RATELIMIT_HEADERS_ENABLED = True
    RATELIMIT_STRATEGY = "moving-window"
    RATELIMIT_LOGIN_PER_IP = env_rate_limit("RATELIMIT_LOGIN_PER_IP", "10/minute")
    RATELIMIT_LOGIN_PER_EMAIL = env_rate_limit("RATELIMIT_LOGIN_PER_EMAIL", "5/minute")
    RATELIMIT_RESET_PER_IP = env_rate_limit("RATELIMIT_RESET_PER_IP", "5/hour")
    RATELIMIT_RESET_PER_EMAIL = env_rate_limit("RATELIMIT_RESET_PER_EMAIL", "5/hour")
    # Each e-mail change mails a new address: one account cannot turn it into a mail cannon.
    RATELIMIT_EMAIL_UPDATE_PER_ACCOUNT = env_rate_limit(
        "RATELIMIT_EMAIL_UPDATE_PER_ACCOUNT", "5/hour"
    )
    RATELIMIT_TOKENS_PER_IP = env_rate_limit("RATELIMIT_TOKENS_PER_IP", "20/hour")
    RATELIMIT_VOTES_PER_IP = env_rate_limit("RATELIMIT_VOTES_PER_IP", "10/hour")
    RATELIMIT_EXPORTS_PER_IP = env_rate_limit("RATELIMIT_EXPORTS_PER_IP", "30/hour")
    # A search that reads at least RATELIMIT_BROAD_SEARCH_ROWS listings (its matches, or
    # every listing of the location where no word narrows) spends this allowance.
    RATELIMIT_BROAD_SEARCHES_PER_IP = env_rate_limit("RATELIMIT_BROAD_SEARCHES_PER_IP", "30/minute")
    RATELIMIT_BROAD_SEARCH_ROWS = env_int("RATELIMIT_BROAD_SEARCH_ROWS", 10_000)
    RATELIMIT_WEBHOOK_SENDS_PER_ACCOUNT = env_rate_limit(
        "RATELIMIT_WEBHOOK_SENDS_PER_ACCOUNT", "30/hour"
    )
    # CSV exports streaming at once in one process (directory_api/platform/at_once.py); one more is
    # answered 429 rather than take a thread, a connection and CPU from every other request.
    EXPORTS_AT_ONCE = env_int("EXPORTS_AT_ONCE", 2)

    # Requests
    MAX_CONTENT_LENGTH = env_int("MAX_CONTENT_LENGTH", 64 * 1024)
    # A CSV import's body (API.md 11): its own, larger limit; at most 10,000 rows as well.
    IMPORT_MAX_BYTES = env_int("IMPORT_MAX_BYTES", 5 * 1024 * 1024)
    PROXY_FIX_X_FOR = env_int("PROXY_FIX_X_FOR", 0)
    PROXY_FIX_X_PROTO = env_int("PROXY_FIX_X_PROTO", 0)
    CORS_ORIGINS = env_list("CORS_ORIGINS")
    # Host names this service answers to (Flask answers 400 to any other Host); empty: any.
    TRUSTED_HOSTS = env_list("TRUSTED_HOSTS") or None
    # Seconds anyone (browsers, proxies, CDNs) may keep an anonymous answer of a public read.
    PUBLIC_MAX_AGE = env_int("PUBLIC_MAX_AGE", 30)

    # Passwords (Argon2id); OWASP's second recommended profile by default.
    ARGON2_TIME_COST = env_int("ARGON2_TIME_COST", 2)
    ARGON2_MEMORY_COST = env_int("ARGON2_MEMORY_COST", 19 * 1024)
    ARGON2_PARALLELISM = env_int("ARGON2_PARALLELISM", 1)

    # Mail
    FRONTEND_URL = env("FRONTEND_URL", "http://localhost:3000")
    MAIL_SERVER = env("MAIL_SERVER")
    MAIL_PORT = env_int("MAIL_PORT", 25)
    MAIL_USE_TLS = env_bool("MAIL_USE_TLS", False)
    MAIL_USE_SSL = env_bool("MAIL_USE_SSL", False)
    MAIL_USERNAME = env("MAIL_USERNAME")
    MAIL_PASSWORD = env("MAIL_PASSWORD")
    MAIL_DEFAULT_SENDER = env("MAIL_DEFAULT_SENDER", "Directory <no-reply@localhost>")
    MAIL_TIMEOUT = env_float("MAIL_TIMEOUT", 10.0)  # seconds per SMTP exchange
    # Without MAIL_SERVER: each message is also appended to this file (`make run`:
    # instance/mail.log), where a script finds its links. It holds live tokens: development.
    MAIL_LOG_FILE = env("MAIL_LOG_FILE")
    # A worker's claim on a message; a claim whose worker died is retried after it expires.
    OUTBOX_LEASE_SECONDS = env_int("OUTBOX_LEASE_SECONDS", 300)
    VOTE_FALLBACK_RECIPIENT = env("VOTE_FALLBACK_RECIPIENT")
    # Vote integrity (API.md 8): receipts mailed to one address per rolling 24 hours (past
    # it the vote is kept, unreceipted), and whether staff may activate unconfirmed votes.
    VOTE_RECEIPTS_PER_ADDRESS = env_int("VOTE_RECEIPTS_PER_ADDRESS", 5)
    VOTE_REQUIRE_CONFIRMATION = env_bool("VOTE_REQUIRE_CONFIRMATION", False)
    # Public forms against abuse (API.md 17): the proof of work a submission carries (off:
    # not asked; log: checked, counted and logged; required: refused without one), how hard
    # it is (the widget tries up to half of it on average), the time under which a filled
    # honeypot holds a submission, and one cap per location beside the per-IP limit.
    VOTE_CHALLENGE = env_choice("VOTE_CHALLENGE", "log", ("off", "log", "required"))
    VOTE_CHALLENGE_MAX_NUMBER = env_int("VOTE_CHALLENGE_MAX_NUMBER", 100_000)
    VOTE_MIN_FILL_SECONDS = env_float("VOTE_MIN_FILL_SECONDS", 3.0)
    VOTE_LIMIT_PER_LOCATION = env_rate_limit("VOTE_LIMIT_PER_LOCATION", "200/hour")

    # Webhooks (API.md 16): how long a receiver has to answer, whether plain http receivers
    # are allowed (never in production), the private networks receivers may be in (CIDRs,
    # comma-separated; none by default), how long the delivery log is kept, and how many
    # deliveries one outbox worker makes at once (threads beside its mail).
    WEBHOOK_TIMEOUT = env_float("WEBHOOK_TIMEOUT", 15.0)
    # Who may read GET /metrics besides a super's token with audit:read (API.md 18): the
    # networks a scraper is in, CIDRs, comma-separated (after PROXY_FIX_X_FOR).
    METRICS_ALLOW = env_list("METRICS_ALLOW") or ["127.0.0.1/32", "::1/128"]
    WEBHOOK_WORKERS = env_int("WEBHOOK_WORKERS", 4)
    WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", False)
    WEBHOOK_ALLOWED_NETWORKS = env_list("WEBHOOK_ALLOWED_NETWORKS")
    WEBHOOK_LOG_DAYS = env_int("WEBHOOK_LOG_DAYS", 30)

    # Data protection (API.md 9; directory_api/privacy.py). Pending outbox bodies are
    # encrypted with a key derived from OUTBOX_KEY (else SECRET_KEY); after a change of
    # either, list the previous secrets in OUTBOX_OLD_KEYS until `flask outbox rekey` ran.
    OUTBOX_KEY = env("OUTBOX_KEY")
    OUTBOX_OLD_KEYS = env_secrets("OUTBOX_OLD_KEYS")
    PII_RETENTION_DAYS = env_int("PII_RETENTION_DAYS", 365)  # then a vote's submitter is redacted
    OUTBOX_RETENTION_DAYS = env_int("OUTBOX_RETENTION_DAYS", 30)  # delivered/failed rows
    AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 400)  # then audit entries go

    JSON_LOG = JSON_LOGS is True
    LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", LOG_LEVELS)


class DevelopmentConfig(Config):
    ENV_NAME = "development"
    SECRET_KEY = Config.SECRET_KEY or "dev-only-not-secret"


class TestingConfig(Config):
    ENV_NAME = "testing"
    TESTING = True
    SECRET_KEY = "test-only-not-secret"  # noqa: S105
    SQLALCHEMY_DATABASE_URI = env_database_url("TEST_DATABASE_URL")
    DATABASE_POOL_MODE = env_choice("TEST_DATABASE_POOL_MODE", "session", POOL_MODES)
    REDIS_URL = env_redis_url("TEST_REDIS_URL")
    SESSION_TYPE = "redis" if REDIS_URL else "cachelib"
    RATELIMIT_STORAGE_URI = REDIS_URL or "memory://"
    # Cheapest Argon2id parameters: tests hash many passwords and must stay fast.
    ARGON2_TIME_COST = 1
    ARGON2_MEMORY_COST = 8
    ARGON2_PARALLELISM = 1
    MAIL_SERVER = None
    CORS_ORIGINS: list[str] = []  # noqa: RUF012
    # The easiest challenge the settings allow: tests solve many (a thousand hashes each).
    VOTE_CHALLENGE_MAX_NUMBER = 1_000


class ProductionConfig(Config):
    ENV_NAME = "production"
    ALLOW_SQLITE_IN_PRODUCTION = env_bool("ALLOW_SQLITE_IN_PRODUCTION", False)
    ALLOW_FILE_SESSIONS = env_bool("ALLOW_FILE_SESSIONS", False)
    ALLOW_MEMORY_RATELIMITS = env_bool("ALLOW_MEMORY_RATELIMITS", False)
    SESSION_COOKIE_SECURE = SECURE_COOKIES is not False
    # A __Host- cookie is the host's alone: Secure, for every path, no Domain, so a sibling
    # subdomain (or a man in the middle over http) cannot set or shadow it.
    SESSION_COOKIE_NAME = env(
        "SESSION_COOKIE_NAME", "__Host-session" if SESSION_COOKIE_SECURE else "session"
    )
    HSTS_MAX_AGE = env_int("HSTS_MAX_AGE", 365 * 24 * 3600)
    JSON_LOG = JSON_LOGS is not False


configs = {
    "development": DevelopmentConfig,
    "testing": TestingConfig,
    "production": ProductionConfig,
}


APP_ENV = env_choice("APP_ENV", "development", configs)


def get_config(name: str | None = None) -> type[Config]:
    """The profile `name` (default APP_ENV); a SettingsError naming every variable whose
    value could not be read, if any."""
    problems = [*UNREADABLE, *unknown_settings()]
    if problems:
        raise SettingsError(problems)
    return configs[name or APP_ENV]
