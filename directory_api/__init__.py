"""The Directory API application factory."""

import os
from typing import Any

from flask import Flask
from flask_cors import CORS
from sqlalchemy import event
from werkzeug.middleware.proxy_fix import ProxyFix

from config import get_config

# Every model registered before Alembic looks.
from . import audit, gauges, listing_pages, models, search, vote_integrity
from .credentials import init_password_hasher
from .endpoints import check_declared
from .platform import reads, single_use
from .platform.application import Application
from .platform.at_once import init_slots
from .platform.autogenerate import include_in_migrations
from .platform.bodies import APIRequest
from .platform.caching import register_caching
from .platform.cors import EXPOSED_HEADERS, FRONTEND_HEADERS, MAX_AGE
from .platform.crypto import init_keys
from .platform.errors import register_error_handlers
from .platform.events import listen
from .platform.extensions import db, limiter, login_manager, mail, migrate
from .platform.json_provider import JSONProvider
from .platform.limits import adapt_limiter
from .platform.logs import configure_logging, register_request_logging
from .platform.metrics import add_scrape_collector, init_metrics
from .platform.reads import add_read_engine
from .platform.sessions import init_sessions
from .platform.settings import check_settings
from .platform.single_use import init_single_use
from .platform.slugs import SlugConverter
from .platform.timeouts import bound_postgresql, database_engine_options, redis_options
from .platform.with_commit import hold_writes_for_commit
from .protection import register_protection
from .webhooks import events as webhook_events

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def create_app(config_name: str | None = None, **overrides: Any) -> Flask:
    """Build the app for `config_name` (development, testing, production; default APP_ENV)."""
    app = Application(__name__, instance_relative_config=True, static_folder=None)
    app.json = JSONProvider(app)
    app.request_class = APIRequest
    app.url_map.converters["slug"] = SlugConverter
    app.url_map.strict_slashes = False  # /regions and /regions/ are one endpoint, no redirect
    app.config.from_object(get_config(config_name))
    app.config.update(overrides)
    configure_logging(app)
    configure_database(app)
    check_settings(app)
    register_request_logging(app)  # first: a request's duration covers every hook
    register_protection(app)
    register_caching(app)
    init_slots(app)
    register_extensions(app)
    register_listeners()
    register_blueprints(app)
    register_error_handlers(app)
    register_commands(app)
    return app


def configure_database(app: Flask) -> None:
    os.makedirs(app.instance_path, exist_ok=True)
    if not app.config.get("SQLALCHEMY_DATABASE_URI"):
        path = os.path.join(app.instance_path, "directory.sqlite3")
        app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{path}"
        app.config["USING_DEFAULT_DATABASE"] = True
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = database_engine_options(
        app.config, app.config["SQLALCHEMY_DATABASE_URI"]
    )
    if app.config["RATELIMIT_STORAGE_URI"].startswith(("redis://", "rediss://")):
        app.config["RATELIMIT_STORAGE_OPTIONS"] = {
            **redis_options(app.config),
            **(app.config.get("RATELIMIT_STORAGE_OPTIONS") or {}),
        }


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")  # SQLite ignores foreign keys unless asked
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    # Deep pages walk a long stretch of an index: keep it in memory (both grow only with
    # use; the default page cache, 2 MiB, is smaller than one location's name index).
    cursor.execute("PRAGMA cache_size=-65536")  # KiB: 64 MiB per connection at most
    cursor.execute("PRAGMA mmap_size=268435456")
    cursor.close()


def register_extensions(app: Flask) -> None:
    if app.config["PROXY_FIX_X_FOR"] or app.config["PROXY_FIX_X_PROTO"]:
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app,
            x_for=app.config["PROXY_FIX_X_FOR"],
            x_proto=app.config["PROXY_FIX_X_PROTO"],
        )
    db.init_app(app)
    app.teardown_request(reads.return_read_connection)
    with app.app_context():
        if db.engine.dialect.name == "sqlite":
            event.listen(db.engine, "connect", _sqlite_pragmas)
        elif db.engine.dialect.name == "postgresql":
            bound_postgresql(app, db.engine)
            add_read_engine(app, db.engine)
            hold_writes_for_commit(db.engine)
    migrate.init_app(
        app,
        db,
        directory=os.path.join(PROJECT_ROOT, "migrations"),
        include_object=include_in_migrations(unmapped=(search.SQLITE_SEARCH_TABLE,)),
    )
    login_manager.session_protection = None  # sessions are server-side and rotated at login
    login_manager.init_app(app)
    init_sessions(app)
    limiter.init_app(app)
    adapt_limiter(app)
    mail.init_app(app)
    init_password_hasher(app)
    init_keys(app)
    init_single_use(app)
    init_metrics(app)
    add_scrape_collector(app, gauges.backlogs)
    if app.config["CORS_ORIGINS"]:
        CORS(
            app,
            origins=app.config["CORS_ORIGINS"],
            supports_credentials=True,
            expose_headers=EXPOSED_HEADERS,
            allow_headers=FRONTEND_HEADERS,
            max_age=MAX_AGE,
        )


def register_listeners() -> None:
    """What keeps derived data in step within the change's own transaction: listing counts
    and revisions, search columns, votes' counts and revisions, the audit log, webhook
    events;
    and reads refusing to write. Once per process, however many apps it builds."""
    for module in (
        reads,
        single_use,
        models.listing,
        listing_pages,
        audit,
        search,
        vote_integrity,
        webhook_events,
    ):
        listen(module.LISTENERS)


def register_blueprints(app: Flask) -> None:
    from .api import (
        audit_log,
        auth,
        categories,
        docs,
        health,
        listings,
        locations,
        me,
        members,
        regions,
        socials,
        supers,
        tokens,
        votes,
        webhooks,
    )

    for module in (
        health,
        docs,
        auth,
        me,
        regions,
        categories,
        socials,
        supers,
        tokens,
        locations,
        votes,
        audit_log,
    ):
        app.register_blueprint(module.bp)
    for blueprint in (
        members.owners,
        members.admins,
        listings.businesses,
        listings.employers,
        votes.receipts,
        webhooks.location_webhooks,
        webhooks.global_webhooks,
    ):
        app.register_blueprint(blueprint)
    check_declared(app)


def register_commands(app: Flask) -> None:
    from .cli import commands

    for command in commands:
        app.cli.add_command(command)
