"""Settings: a value of the wrong kind, or one that cannot work, stops the start with one line
naming the variable and what it accepts; production refuses unsafe settings."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from config import SettingsError
from directory_api import create_app

from .conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
RANDOM_KEY = "0T4qW8nZ2vK6xB1mR9cY3hJ7pL5sD0fG"  # as long as the check asks, and random
SAFE = {
    "SECRET_KEY": RANDOM_KEY,
    "SQLALCHEMY_DATABASE_URI": "postgresql+psycopg://app@db.internal/directory",
    "MAIL_SERVER": "smtp.internal",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "SESSION_TYPE": "redis",
    "RATELIMIT_STORAGE_URI": "redis://redis.internal:6379/0",
}
SECRET_KEY_RULE = "set SECRET_KEY to a random string of at least 32 characters"


def run(args: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess:
    """A fresh interpreter in the project folder: settings are read when config is imported."""
    inherited = {
        key: value
        for key, value in os.environ.items()
        if key not in ("APP_ENV", "DATABASE_URL", "REDIS_URL", "SECRET_KEY")
        and not key.startswith(("RATELIMIT_", "SESSION_", "GUNICORN_", "MAIL_"))
    }
    return subprocess.run(  # noqa: S603 (our own arguments)
        [sys.executable, *args],
        cwd=ROOT,
        env={**inherited, **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )


def read_setting(expression: str, environment: dict[str, str]) -> str:
    """`expression` (over the module `config`) in an interpreter with `environment`, or the
    line get_config() refuses to start with."""
    code = (
        "import config\n"
        "try:\n"
        "    config.get_config()\n"
        "except config.SettingsError as error:\n"
        "    print(error)\n"
        "else:\n"
        f"    print({expression})\n"
    )
    result = run(["-c", code], environment)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        (
            "RATELIMIT_LOGIN_PER_IP",
            "banana",
            "RATELIMIT_LOGIN_PER_IP='banana' is not a rate limit (e.g. \"10 per minute\"",
        ),
        ("RATELIMIT_VOTES_PER_IP", "10/fortnight", "RATELIMIT_VOTES_PER_IP='10/fortnight' is not"),
        ("RATELIMIT_EXPORTS_PER_IP", "lots", "RATELIMIT_EXPORTS_PER_IP='lots' is not a rate limit"),
        ("EXPORTS_AT_ONCE", "two", "EXPORTS_AT_ONCE='two' is not a whole number"),
        ("APP_ENV", "prod", "APP_ENV='prod' is not one of: development, testing, production"),
        ("MAIL_PORT", "abc", "MAIL_PORT='abc' is not a whole number"),
        ("SESSION_MAX_DAYS", "1.5", "SESSION_MAX_DAYS='1.5' is not a whole number"),
        ("REDIS_TIMEOUT", "soon", "REDIS_TIMEOUT='soon' is not a number"),
        ("DATABASE_STATEMENT_TIMEOUT", "nan", "DATABASE_STATEMENT_TIMEOUT='nan' is not a number"),
        (
            "VOTE_REQUIRE_CONFIRMATION",
            "maybe",
            "VOTE_REQUIRE_CONFIRMATION='maybe' is not a boolean (true/false, 1/0, yes/no, on/off)",
        ),
        ("RATELIMIT_ENABLED", "flase", "RATELIMIT_ENABLED='flase' is not a boolean"),
        ("SESSION_COOKIE_SAMESITE", "Relaxed", "is not one of: Lax, Strict, None"),
        ("SESSION_TYPE", "memcached", "SESSION_TYPE='memcached' is not one of: cachelib, redis"),
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL='LOUD' is not one of: DEBUG, INFO, WARNING"),
        (
            "DATABASE_POOL_MODE",
            "statement",
            "DATABASE_POOL_MODE='statement' is not one of: session, transaction",
        ),
        ("DATABASE_URL", "mysql://app:hunter2@db/directory", "DATABASE_URL is not a URL like"),
        ("REDIS_URL", "redis.internal:6379", "REDIS_URL is not a URL like redis://"),
        ("RATELIMIT_STORAGE_URI", "banana://", "RATELIMIT_STORAGE_URI is not a URL like"),
        # Readable, yet each crashed the start with a traceback (review of issue 18):
        ("SESSION_MAX_DAYS", "9999999999", "SESSION_MAX_DAYS='9999999999' is not a whole number"),
        ("DATABASE_URL", "postgresql://u:hunter2@h:notaport/d", "DATABASE_URL is not a URL"),
        ("REDIS_URL", "redis://h:notaport/0", "REDIS_URL is not a URL like"),
        ("RATELIMIT_STORAGE_URI", "memcached://h:11211", "RATELIMIT_STORAGE_URI is not a URL"),
        ("RATELIMIT_STORAGE_URI", "mongodb://h", "RATELIMIT_STORAGE_URI is not a URL"),
    ],
)
def test_a_value_of_the_wrong_kind_stops_the_start_naming_it(variable, value, says):
    line = read_setting("'started'", {variable: value})
    assert line.startswith("Refusing to start: ") and says in line
    assert "hunter2" not in line  # URLs may hold passwords: never shown back


@pytest.mark.parametrize(
    ("variable", "says"),
    [
        ("RATELIMIT_VOTES", "RATELIMIT_VOTES is not a setting of this service (did you mean "
         "RATELIMIT_VOTES_PER_IP?)"),
        ("DATABASE_STATEMENT_TIMOUT", "(did you mean DATABASE_STATEMENT_TIMEOUT?)"),
        ("SESSION_COOKIE_SECUR", "(did you mean SESSION_COOKIE_SECURE?)"),
        ("WEBHOOK_THREADS", "WEBHOOK_THREADS is not a setting of this service"),
    ],
)  # fmt: skip
def test_a_misspelt_setting_stops_the_start_naming_the_nearest(variable, says):
    """Issue 35: `RATELIMIT_VOTES=abc` started fine and left the real limit at its default."""
    line = read_setting("'started'", {variable: "abc"})
    assert line.startswith("Refusing to start: ") and says in line, line


def test_variables_of_others_under_the_same_prefixes_are_left_alone():
    # gunicorn's (read by gunicorn.conf.py, not by a worker's config), a desktop session's.
    environment = {"GUNICORN_THREADS": "4", "GUNICORN_CMD_ARGS": "-w 2", "SESSION_MANAGER": "x"}
    assert read_setting("'started'", environment) == "started"


def test_every_unreadable_value_is_named_in_one_line():
    line = read_setting("'started'", {"MAIL_PORT": "abc", "JSON_LOG": "sometimes"})
    assert line == (
        "Refusing to start: JSON_LOG='sometimes' is not a boolean (true/false, 1/0, yes/no, "
        "on/off); MAIL_PORT='abc' is not a whole number up to 100000000."
    )


def test_booleans_and_choices_are_read_in_any_case():
    environment = {
        "VOTE_REQUIRE_CONFIRMATION": "YES",
        "RATELIMIT_ENABLED": "off",
        "JSON_LOG": "1",
        "ALLOW_MEMORY_RATELIMITS": "No",
        "MAIL_USE_TLS": "On",
        "MAIL_USE_SSL": "FALSE",
        "SESSION_COOKIE_SECURE": "true",
        "ALLOW_FILE_SESSIONS": "0",
        "SESSION_COOKIE_SAMESITE": "strict",
        "LOG_LEVEL": "debug",
        "RATELIMIT_LOGIN_PER_IP": "3 per minute; 20/day",
    }
    names = [*environment]
    printed = read_setting(f"[getattr(config.ProductionConfig, n) for n in {names!r}]", environment)
    assert printed == str(
        [
            True,
            False,
            True,
            False,
            True,
            False,
            True,
            False,
            "Strict",
            "DEBUG",
            "3 per minute; 20/day",
        ]
    )


def test_lists_of_keys_keep_each_key_as_written():
    """Base64 keys may end in "/" (a list of URLs drops it): an earlier key read wrongly
    would sign everyone out at a rotation."""
    environment = {
        "SECRET_KEY_FALLBACKS": "old+key/ , older/key/",
        "OUTBOX_OLD_KEYS": "a/,b",
        "PII_HASH_OLD_KEYS": " pii/ ",
    }
    names = [*environment]
    printed = read_setting(f"[getattr(config.Config, n) for n in {names!r}]", environment)
    assert printed == str([("old+key/", "older/key/"), ("a/", "b"), ("pii/",)])


@pytest.mark.parametrize(("environment", "days"), [({}, 30), ({"SESSION_MAX_DAYS": "7"}, 7)])
def test_session_max_days_is_read_from_the_environment(environment, days):
    assert read_setting("config.Config.SESSION_MAX_LIFETIME.days", environment) == str(days)


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        (
            "DATABASE_STATEMENT_TIMEOUT",
            -1,
            "DATABASE_STATEMENT_TIMEOUT must be at least 0 (it is -1)",
        ),
        ("DATABASE_CONNECT_TIMEOUT", 0, "DATABASE_CONNECT_TIMEOUT must be at least 1 (it is 0)"),
        ("REDIS_TIMEOUT", 0, "REDIS_TIMEOUT must be at least 0.1"),
        ("MAIL_TIMEOUT", 0, "MAIL_TIMEOUT must be at least 0.1"),
        ("OUTBOX_LEASE_SECONDS", 1, "OUTBOX_LEASE_SECONDS must be at least 2"),
        ("PII_RETENTION_DAYS", 0, "PII_RETENTION_DAYS must be at least 1"),
        ("OUTBOX_RETENTION_DAYS", -1, "OUTBOX_RETENTION_DAYS must be at least 1"),
        ("AUDIT_RETENTION_DAYS", 0, "AUDIT_RETENTION_DAYS must be at least 1"),
        ("SESSION_MAX_LIFETIME", timedelta(0), "SESSION_MAX_DAYS must be at least 1 (it is 0)"),
        ("SESSION_IDLE_LIFETIME", timedelta(0), "SESSION_IDLE_HOURS must be at least 1 (it is 0)"),
        (
            "PERMANENT_SESSION_LIFETIME",
            timedelta(days=-1),
            "SESSION_REMEMBER_DAYS must be at least 1 (it is -1)",
        ),
        ("VOTE_RECEIPTS_PER_ADDRESS", -1, "VOTE_RECEIPTS_PER_ADDRESS must be at least 0"),
        ("PUBLIC_MAX_AGE", -1, "PUBLIC_MAX_AGE must be at least 0"),
        ("SESSION_TOUCH_INTERVAL", -1, "SESSION_TOUCH_INTERVAL must be at least 0"),
        ("PROXY_FIX_X_FOR", -1, "PROXY_FIX_X_FOR must be at least 0"),
        ("PROXY_FIX_X_PROTO", -1, "PROXY_FIX_X_PROTO must be at least 0"),
        ("IMPORT_MAX_BYTES", 10, "IMPORT_MAX_BYTES must be at least 1024"),
        ("MAX_CONTENT_LENGTH", 0, "MAX_CONTENT_LENGTH must be at least 1024"),
        ("MAIL_PORT", 0, "MAIL_PORT must be at least 1"),
        ("EXPORTS_AT_ONCE", 0, "EXPORTS_AT_ONCE must be at least 1 (it is 0)"),
        ("RATELIMIT_BROAD_SEARCH_ROWS", 0, "RATELIMIT_BROAD_SEARCH_ROWS must be at least 1"),
        ("ARGON2_TIME_COST", 0, "ARGON2_TIME_COST must be at least 1"),
        ("ARGON2_MEMORY_COST", 1, "ARGON2_MEMORY_COST must be at least 8"),
        ("ARGON2_PARALLELISM", 0, "ARGON2_PARALLELISM must be at least 1"),
        ("SESSION_TYPE", "redis", "SESSION_TYPE=redis needs REDIS_URL"),
        ("MAIL_PORT", 70000, "MAIL_PORT must be at most 65535 (it is 70000)"),
        ("DATABASE_STATEMENT_TIMEOUT", 3e6, "DATABASE_STATEMENT_TIMEOUT must be at most"),
        ("AUDIT_RETENTION_DAYS", 10**6, "AUDIT_RETENTION_DAYS must be at most 36500"),
        ("SESSION_MAX_LIFETIME", timedelta(days=10**5), "SESSION_MAX_DAYS must be at most 3650"),
        ("ARGON2_PARALLELISM", 2, "ARGON2_MEMORY_COST must be at least 8 × ARGON2_PARALLELISM"),
        ("HSTS_MAX_AGE", -1, "HSTS_MAX_AGE must be at least 0"),
        ("SESSION_COOKIE_NAME", "__Host-session", "needs SESSION_COOKIE_SECURE=true"),
        ("SESSION_COOKIE_NAME", "__Secure-session", "needs SESSION_COOKIE_SECURE=true"),
        ("SESSION_COOKIE_DOMAIN", "example.org", "needs no cookie domain and the path /"),
        # Issue 35: each readable, none workable.
        ("FRONTEND_URL", "admin.example.org", "FRONTEND_URL must be an absolute URL"),
        ("FRONTEND_URL", "https://", "FRONTEND_URL must be an absolute URL"),
        ("SESSION_COOKIE_SAMESITE", "None", "SESSION_COOKIE_SAMESITE=None needs"),
        ("MAIL_USE_SSL", True, "set one of MAIL_USE_TLS (STARTTLS"),
        ("REDIS_URL", "redis://redis.internal:6379/notanumber", "REDIS_URL's path must be"),
        ("RATELIMIT_STORAGE_URI", "redis://h:6379/cache", "RATELIMIT_STORAGE_URI's path must"),
    ],
)
def test_a_setting_that_cannot_work_stops_the_start_naming_it(tmp_path, setting, value, says):
    settings = {"SESSION_FILE_DIR": str(tmp_path), "REDIS_URL": None, setting: value}
    if setting == "MAIL_USE_SSL":
        settings["MAIL_USE_TLS"] = True
    if setting == "SESSION_COOKIE_DOMAIN":  # a __Host- cookie, secure, but with a domain
        settings |= {"SESSION_COOKIE_NAME": "__Host-session", "SESSION_COOKIE_SECURE": True}
    with pytest.raises(SettingsError) as refused:
        create_app("testing", **settings)
    assert refused.value.format_message().startswith("Refusing to start: ")
    assert says in refused.value.format_message()


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ({"SECRET_KEY": None}, SECRET_KEY_RULE),
        ({"SECRET_KEY": "x"}, SECRET_KEY_RULE),
        ({"SECRET_KEY": "change-me"}, SECRET_KEY_RULE),
        ({"SECRET_KEY": "secret"}, SECRET_KEY_RULE),
        ({"SECRET_KEY": "dev"}, SECRET_KEY_RULE),
        ({"SECRET_KEY": RANDOM_KEY[:31]}, SECRET_KEY_RULE),
        ({"SECRET_KEY": "please-change-me-before-deploying-" + RANDOM_KEY}, SECRET_KEY_RULE),
        ({"SECRET_KEY": "ab" * 40}, SECRET_KEY_RULE),
        ({"OUTBOX_KEY": "outbox"}, "set OUTBOX_KEY to a random string of at least 32"),
        ({"SQLALCHEMY_DATABASE_URI": None}, "DATABASE_URL"),
        ({"SQLALCHEMY_DATABASE_URI": "sqlite:////tmp/prod.sqlite3"}, "DATABASE_URL"),
        ({"MAIL_SERVER": None}, "MAIL_SERVER"),
        ({"SESSION_TYPE": "cachelib"}, "sessions are shared"),
        ({"RATELIMIT_STORAGE_URI": "memory://"}, "rate limits count across workers"),
        ({"MAIL_LOG_FILE": "mail.log"}, "unset MAIL_LOG_FILE"),  # live links in clear
        ({"DEBUG": True}, "unset FLASK_DEBUG"),  # it switched the checks off
        ({"FRONTEND_URL": "http://admin.example.org"}, "FRONTEND_URL must be https://"),
        # A name that starts like this machine's is someone else's.
        ({"FRONTEND_URL": "http://localhost.example.org"}, "FRONTEND_URL must be https://"),
        ({"FRONTEND_URL": "http://127.0.0.1.nip.io"}, "FRONTEND_URL must be https://"),
    ],
)
def test_production_refuses_to_start_and_says_what_to_set(tmp_path, missing, says):
    settings = {**SAFE, **missing, "SESSION_FILE_DIR": str(tmp_path)}
    with pytest.raises(SettingsError, match=says) as refused:
        create_app("production", **settings)
    line = refused.value.format_message()
    assert line.startswith("Refusing to start: in production, ")
    secret = settings["SECRET_KEY"]
    assert not (secret and len(secret) > 8 and secret in line)  # a secret is never shown


def test_production_starts_with_safe_settings(tmp_path):
    app = create_app("production", SESSION_FILE_DIR=str(tmp_path), **SAFE)
    assert app.config["SESSION_COOKIE_SECURE"] is True
    assert app.config["SESSION_COOKIE_NAME"] == "__Host-session"
    assert app.config["HSTS_MAX_AGE"] == 365 * 24 * 3600


@pytest.mark.parametrize(
    "frontend", ["http://localhost:3000", "http://127.0.0.2:3000", "http://[::1]:3000"]
)
def test_production_takes_a_plain_http_frontend_on_this_machine(tmp_path, frontend):
    """A frontend on this machine's loopback (behind the same TLS proxy) is not in clear."""
    app = create_app(
        "production", SESSION_FILE_DIR=str(tmp_path), **{**SAFE, "FRONTEND_URL": frontend}
    )
    assert app.config["FRONTEND_URL"] == frontend


def test_local_state_in_production_only_when_explicitly_allowed(tmp_path):
    app = create_app(
        "production",
        SESSION_FILE_DIR=str(tmp_path),
        **{**SAFE, "SESSION_TYPE": "cachelib", "RATELIMIT_STORAGE_URI": "memory://"},
        ALLOW_FILE_SESSIONS=True,
        ALLOW_MEMORY_RATELIMITS=True,
    )
    assert app.config["SESSION_TYPE"] == "cachelib"


def test_sqlite_in_production_only_when_explicitly_allowed(tmp_path):
    settings = {**SAFE, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/p.sqlite3"}
    app = create_app(
        "production",
        ALLOW_SQLITE_IN_PRODUCTION=True,
        SESSION_FILE_DIR=str(tmp_path),
        **{k: v for k, v in settings.items()},
    )
    assert app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite")


# --- What an operator sees ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environment", "line"),
    [
        (
            {"MAIL_PORT": "abc"},
            "Error: Refusing to start: MAIL_PORT='abc' is not a whole number up to 100000000.",
        ),
        (
            {"DATABASE_CONNECT_TIMEOUT": "0"},
            "Error: Refusing to start: DATABASE_CONNECT_TIMEOUT must be at least 1 (it is 0).",
        ),
    ],
)
def test_flask_commands_print_the_one_line_and_fail(tmp_path, environment, line):
    """`flask db upgrade` (a plugin command) and `flask seed-demo` (one of the app's)."""
    for command in (["db", "upgrade"], ["seed-demo"]):
        result = run(
            ["-m", "flask", "--app", "wsgi", *command],
            {"SESSION_FILE_DIR": str(tmp_path), **environment},
        )
        assert (result.returncode, result.stdout, result.stderr) == (1, "", line + "\n")


@pytest.mark.parametrize(
    ("environment", "line", "status"),
    [
        # Read by gunicorn.conf.py: the master stops before any worker starts.
        ({"GUNICORN_THREADS": "eight"}, "GUNICORN_THREADS='eight' is not a whole number", 1),
        ({"GUNICORN_THREADS": "0"}, "GUNICORN_THREADS must be at least 1 (it is 0)", 1),
        ({"WEB_CONCURRENCY": "0"}, "WEB_CONCURRENCY must be at least 1 (it is 0)", 1),
        # Exports that could hold every thread: refused there too, where threads are known.
        (
            {"GUNICORN_THREADS": "4", "EXPORTS_AT_ONCE": "4"},
            "EXPORTS_AT_ONCE must be less than GUNICORN_THREADS (4), leaving threads for "
            "other requests (it is 4).",
            1,
        ),
        # Readable but unsafe: the first worker stops the server (gunicorn's "App failed to load").
        ({"APP_ENV": "production", "SECRET_KEY": "change-me"}, SECRET_KEY_RULE, 4),
    ],
)
def test_gunicorn_prints_the_one_line_and_stops(tmp_path, environment, line, status):
    result = run(
        ["-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
        {
            "GUNICORN_BIND": f"127.0.0.1:{free_port()}",
            "WEB_CONCURRENCY": "1",
            "SESSION_FILE_DIR": str(tmp_path),
            **environment,
        },
    )
    assert result.returncode == status
    assert line in result.stderr and "Traceback" not in result.stderr
    assert len([text for text in result.stderr.splitlines() if "Refusing to start" in text]) == 1


def test_a_worker_moves_the_loaded_app_out_of_the_collectors_reach(tmp_path):
    """gunicorn.conf.py's post_worker_init, run as gunicorn runs it once the app is loaded:
    the app's objects leave the generations a full collection scans."""
    code = (
        "import gc, runpy\n"
        "hooks = runpy.run_path('gunicorn.conf.py')\n"
        "import wsgi\n"
        "loaded = len(gc.get_objects())\n"
        "hooks['post_worker_init'](None)\n"
        "print(loaded, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    environment = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
        "SESSION_FILE_DIR": str(tmp_path),
    }
    result = run(["-c", code], environment)
    assert result.returncode == 0, result.stderr
    loaded, frozen, tracked = map(int, result.stdout.split())
    assert loaded > 50_000  # the app, loaded: what there is to move
    assert frozen > 0.9 * loaded
    assert tracked < 1_000
