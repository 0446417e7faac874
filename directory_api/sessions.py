"""Server-side sessions (Flask-Session) with the lifetimes API.md sets out.

A session without "remember" is forgotten after SESSION_IDLE_LIFETIME without a request;
with "remember" (session.permanent) after PERMANENT_SESSION_LIFETIME. Rather than rewriting
the store on every request, a signed-in session's expiry is pushed forward at most once per
SESSION_TOUCH_INTERVAL seconds.
"""

import os
import time
from datetime import timedelta

import redis
from cachelib.file import FileSystemCache
from flask import Flask, current_app
from flask_session.base import ServerSideSession
from flask_session.cachelib import CacheLibSessionInterface
from flask_session.redis import RedisSessionInterface

TOUCHED_KEY = "_touched"


class SessionLifetimeMixin:
    def _upsert_session(
        self, session_lifetime: timedelta, session: ServerSideSession, store_id: str
    ) -> None:
        if not session.permanent:
            session_lifetime = current_app.config["SESSION_IDLE_LIFETIME"]
        super()._upsert_session(session_lifetime, session, store_id)  # type: ignore[misc]

    def should_set_storage(self, app: Flask, session: ServerSideSession) -> bool:
        if session.modified:
            return True
        now = int(time.time())
        if now - session.get(TOUCHED_KEY, 0) >= app.config["SESSION_TOUCH_INTERVAL"]:
            session[TOUCHED_KEY] = now  # marks the session modified: store and cookie renewed
            return True
        return False


class FileSessionInterface(SessionLifetimeMixin, CacheLibSessionInterface):
    pass


class RedisSessions(SessionLifetimeMixin, RedisSessionInterface):
    pass


def init_sessions(app: Flask) -> None:
    options = {
        "key_prefix": app.config["SESSION_KEY_PREFIX"],
        "permanent": app.config["SESSION_PERMANENT"],
    }
    kind = app.config["SESSION_TYPE"]
    if kind == "redis":
        url = app.config["REDIS_URL"]
        if not url:
            raise RuntimeError("SESSION_TYPE=redis needs REDIS_URL.")
        app.session_interface = RedisSessions(app, client=redis.Redis.from_url(url), **options)
    elif kind in ("cachelib", "filesystem"):
        directory = app.config["SESSION_FILE_DIR"] or os.path.join(app.instance_path, "sessions")
        # threshold=0: never evict live sessions to make room; expired files are pruned.
        cache = FileSystemCache(directory, threshold=0, mode=0o600)
        app.session_interface = FileSessionInterface(app, client=cache, **options)
    else:
        raise RuntimeError(f"Unsupported SESSION_TYPE {kind!r}: use 'cachelib' or 'redis'.")
