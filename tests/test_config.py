"""Production refuses settings that would be unsafe or would silently lose data."""

from datetime import timedelta

import pytest

from directory_api import create_app

SAFE = {
    "SECRET_KEY": "a-long-random-production-secret",
    "SQLALCHEMY_DATABASE_URI": "postgresql+psycopg://app@db.internal/directory",
    "MAIL_SERVER": "smtp.internal",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "SESSION_TYPE": "redis",
    "RATELIMIT_STORAGE_URI": "redis://redis.internal:6379/0",
}


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ({"SECRET_KEY": None}, "SECRET_KEY"),
        ({"SQLALCHEMY_DATABASE_URI": None}, "DATABASE_URL"),
        ({"SQLALCHEMY_DATABASE_URI": "sqlite:////tmp/prod.sqlite3"}, "DATABASE_URL"),
        ({"MAIL_SERVER": None}, "MAIL_SERVER"),
        ({"SESSION_TYPE": "cachelib"}, "sessions are shared"),
        ({"RATELIMIT_STORAGE_URI": "memory://"}, "rate limits count across workers"),
    ],
)
def test_production_refuses_to_start_and_says_what_to_set(tmp_path, missing, says):
    settings = {**SAFE, **missing, "SESSION_FILE_DIR": str(tmp_path)}
    with pytest.raises(RuntimeError, match=says):
        create_app("production", **settings)


def test_production_starts_with_safe_settings(tmp_path):
    app = create_app("production", SESSION_FILE_DIR=str(tmp_path), **SAFE)
    assert app.config["SESSION_COOKIE_SECURE"] is True


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


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("DATABASE_STATEMENT_TIMEOUT", -1),
        ("DATABASE_CONNECT_TIMEOUT", 0),
        ("REDIS_TIMEOUT", 0),
        ("MAIL_TIMEOUT", 0),
        ("OUTBOX_LEASE_SECONDS", 1),
        ("PII_RETENTION_DAYS", 0),
        ("OUTBOX_RETENTION_DAYS", -1),
        ("AUDIT_RETENTION_DAYS", 0),
        ("SESSION_MAX_LIFETIME", timedelta(0)),
        ("VOTE_RECEIPTS_PER_ADDRESS", -1),
        ("PUBLIC_MAX_AGE", -1),
        ("IMPORT_MAX_BYTES", 10),
    ],
)
def test_a_timeout_that_cannot_work_stops_the_start_naming_it(tmp_path, setting, value):
    with pytest.raises(RuntimeError, match=setting):
        create_app("testing", SESSION_FILE_DIR=str(tmp_path), **{setting: value})


def test_a_setting_that_is_not_a_number_is_named(monkeypatch):
    from config import env_float

    monkeypatch.setenv("REDIS_TIMEOUT", "soon")
    with pytest.raises(RuntimeError, match="REDIS_TIMEOUT='soon' is not a number"):
        env_float("REDIS_TIMEOUT", 1.0)


@pytest.mark.parametrize(("environment", "days"), [({}, 30), ({"SESSION_MAX_DAYS": "7"}, 7)])
def test_session_max_days_is_read_from_the_environment(environment, days):
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "SESSION_MAX_DAYS"}
    result = subprocess.run(  # a fresh interpreter: settings are read when config is imported
        [sys.executable, "-c", "import config; print(config.Config.SESSION_MAX_LIFETIME.days)"],
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == str(days)
