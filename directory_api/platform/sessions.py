"""Server-side sessions (Flask-Session) with the lifetimes API.md sets out.

A session without "remember" is forgotten after SESSION_IDLE_LIFETIME without a request;
with "remember" (session.permanent) after PERMANENT_SESSION_LIFETIME. Rather than rewriting
the store on every request, a signed-in session's expiry is pushed forward at most once per
SESSION_TOUCH_INTERVAL seconds.

However active, a signed-in session ends SESSION_MAX_LIFETIME after its sign-in (the
stamp `sign_in` leaves in it); one signed in before that limit existed counts from its
first request after the upgrade.

A session that came from the store is only ever written back while it is still there: a
request that was already running when the user logged out must not bring it back.

A session is part of the request's outcome, like its database transaction: a request that
fails (5xx) saves no session change, a sign-in writes its session before the transaction
commits (`save_now`), and a store that fails while saving turns the answer into a 503, so
the client is never told "signed in" (or "signed out") when the store did not record it.

What the store holds can do nothing and open nothing. A session is stored as JSON and read
back only as a JSON object (Flask-Session falls back to `pickle.loads`, and cachelib's file
store pickles: either would run code planted in the store); anything else is no session.
It is stored under a keyed hash of its id (HMAC-SHA256 under a key derived from
SECRET_KEY), never the id itself, so a copy of the store (Redis' files, a backup, the
session folder) holds no id that works as a cookie. Each stored value is sealed with an
HMAC of itself and that key, so whoever can write to the store can neither forge a session
nor move one to another cookie. Sessions stored before this (bare ids, unsealed values)
are not found: they end, and their users sign in again once.
"""

import contextlib
import hashlib
import hmac
import logging
import os
import time
from datetime import timedelta
from typing import IO, Any

import msgspec
import redis
from cachelib.file import FileSystemCache
from cachelib.serializers import BaseSerializer
from flask import Flask, Request, Response, current_app, g, has_request_context
from flask_session.base import Serializer, ServerSideSession
from flask_session.cachelib import CacheLibSessionInterface
from flask_session.redis import RedisSessionInterface
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from .crypto import keys_for
from .current import current_globals, current_session
from .errors import STORE_UNAVAILABLE, rewrite_as_problem
from .timeouts import redis_options

log = logging.getLogger(__name__)
TOUCHED_KEY = "_touched"
SIGNED_IN_KEY = "_signed_in"  # when the session signed in, in seconds since the epoch
USER_KEY = "_user_id"  # where Flask-Login keeps who is signed in


# The keys this service's sessions hold, and their types (Flask-Login's, Flask-Session's,
# ours): a stored session whose value of one of them has another type is no session.
KEY_TYPES: dict[str, tuple[type, ...]] = {
    USER_KEY: (str,),
    "_id": (str,),
    "_fresh": (bool,),
    "_permanent": (bool,),
    "_remember": (str,),
    "_remember_seconds": (int, float),
    TOUCHED_KEY: (int,),
    SIGNED_IN_KEY: (int,),
}
SEALED = b"v1."  # the format of a stored session: v1.<HMAC, 64 hex digits>.<JSON object>


def from_json(data: bytes) -> Any:
    """The JSON value `data` holds; None when it holds none. JSON only builds data."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested past the stack
        log.warning("a stored value that is not JSON was ignored")
        return None


def of_its_type(value: Any, types: tuple[type, ...]) -> bool:
    """Whether `value` is one of `types`; a bool, an int to Python, only where one is due."""
    return isinstance(value, types) and (type(value) is bool) == (bool in types)


def session_data(value: Any) -> dict[str, Any] | None:
    """A stored session's data, if `value` is a JSON object whose keys have their types;
    else no session."""
    if isinstance(value, dict) and all(
        of_its_type(value[key], types) for key, types in KEY_TYPES.items() if key in value
    ):
        return value
    if value is not None:
        log.warning("a stored session that is not one of this service's was ignored")
    return None


class JSONSessions(Serializer):
    """Sessions as JSON objects, read back only as such: what is not one is no session."""

    encoder = msgspec.json.Encoder()

    def encode(self, session: ServerSideSession) -> bytes:
        return self.encoder.encode(dict(session))

    def decode(self, serialized_data: bytes) -> dict | None:  # type: ignore[override]
        return session_data(from_json(serialized_data))


class JSONFiles(BaseSerializer):
    """cachelib's file serializer as JSON (its own pickles): sessions, and the count of
    files it keeps beside them."""

    def dump(self, value: Any, f: IO[bytes], *_args: Any, **_kwargs: Any) -> None:
        f.write(JSONSessions.encoder.encode(value))

    def load(self, f: IO[bytes], *_args: Any, **_kwargs: Any) -> Any:
        return from_json(f.read())


class JSONFileCache(FileSystemCache):
    """cachelib's file store, JSON from its first write: its constructor writes the count of
    files already, which an instance's serializer set afterwards would not see (a pickle
    then, read back as no count at all, with a warning on every read until rewritten)."""

    serializer = JSONFiles()

    def remove(self, key: str) -> bool:
        """Whether this call removed `key` (of two calls at once, one does; cachelib's
        `delete` says True for a key already gone)."""
        try:
            os.remove(self._get_filename(key))
        except FileNotFoundError:
            return False
        self._update_count(delta=-1)
        return True


class SessionLifetimeMixin:
    serializer: Serializer
    key_prefix: str
    id_key: bytes  # the HMAC key of store ids
    value_key: bytes  # the HMAC key of stored sessions

    # Keys from SECRET_KEY_FALLBACKS: sessions stored under them are still found (and
    # moved under the current keys when read).
    earlier_keys: list[tuple[bytes, bytes]]

    def _get_store_id(self, sid: str, id_key: bytes | None = None) -> str:
        if has_request_context():
            g.session_sid = sid  # for a session stored under an earlier key
        digest = hmac.new(id_key or self.id_key, sid.encode(), hashlib.sha256).hexdigest()
        return self.key_prefix + digest

    def _mac(self, store_id: str, payload: bytes, value_key: bytes | None = None) -> bytes:
        message = store_id.encode() + b"\0" + payload
        return hmac.new(value_key or self.value_key, message, hashlib.sha256).hexdigest().encode()

    def _seal(self, store_id: str, session: ServerSideSession) -> bytes:
        """The session as stored: its JSON, under an HMAC of it and the key it is stored
        under, so that nobody who can write to the store can forge one, or move one to
        another key (another cookie)."""
        payload = self.serializer.encode(session)
        return SEALED + self._mac(store_id, payload) + b"." + payload

    def _unseal(self, store_id: str, stored: Any, value_key: bytes | None = None) -> dict | None:
        """The session `stored` under `store_id` holds, if this service sealed it there."""
        if stored is None:
            return None
        if isinstance(stored, str):
            stored = stored.encode()
        if isinstance(stored, bytes) and stored.startswith(SEALED):
            mac, _, payload = stored[len(SEALED) :].partition(b".")
            if hmac.compare_digest(mac, self._mac(store_id, payload, value_key)):
                return self.serializer.decode(payload)
        log.warning("a stored session that this service did not seal was ignored")
        return None

    def _retrieve_session_data(self, store_id: str) -> dict | None:
        found = self._unseal(store_id, self._read(store_id))
        if found is None and self.earlier_keys and g.get("session_sid"):
            return self._move_from_earlier_key(g.session_sid, store_id)
        return found

    def _move_from_earlier_key(self, sid: str, store_id: str) -> dict | None:
        """The session of `sid` stored under an earlier key (before SECRET_KEY was
        rotated), moved under the current one: saved where it is looked for from now on.

        The move takes the earlier entry in one step: of two requests with one cookie, one
        moves it and the other finds what that one left (nothing, if it signed out since),
        so a sign-out is never undone by a request that read the entry before it."""
        for id_key, value_key in self.earlier_keys:
            earlier_id = self._get_store_id(sid, id_key)
            stored = self._read(earlier_id)
            data = self._unseal(earlier_id, stored, value_key)
            if data is None:
                continue
            permanent = data.get("_permanent", self.permanent)
            lifetime = (
                current_app.permanent_session_lifetime
                if permanent
                else current_app.config["SESSION_IDLE_LIFETIME"]
            )
            moved = self.session_class(data, sid=sid)  # type: ignore[attr-defined]
            sealed = self._seal(store_id, moved)
            taken = self._move(earlier_id, stored, store_id, sealed, int(lifetime.total_seconds()))
            g.session_sid = sid
            return data if taken else self._moved_by_another(store_id)
        return None

    def _moved_by_another(self, store_id: str) -> dict | None:
        """The session another request with this cookie has just moved (nothing, if it
        signed out since). The file store writes it a moment after taking the old entry:
        looked for a few times, for at most MOVE_WAIT seconds in all."""
        for attempt in range(MOVE_LOOKS):
            found = self._unseal(store_id, self._read(store_id))
            if found is not None or attempt == MOVE_LOOKS - 1:
                return found
            time.sleep(MOVE_WAIT / MOVE_LOOKS)
        return None

    def _read(self, store_id: str) -> Any:
        raise NotImplementedError

    def _move(
        self, earlier_id: str, stored: Any, store_id: str, value: bytes, seconds: int
    ) -> bool:
        """Store `value` under `store_id` and remove `earlier_id`, if `earlier_id` still
        holds `stored`; whether it did (another request may have moved it first)."""
        raise NotImplementedError

    def open_session(self, app: Flask, request: Request) -> ServerSideSession:
        try:
            session = super().open_session(app, request)  # type: ignore[misc]
        except RedisError:
            # Raised here, Flask would answer a bare 500; answer 503 from inside the request.
            session = self.session_class(sid=self._generate_sid(self.sid_length))
            session.store_unavailable = True
        session.stored = session.sid == request.cookies.get(app.config["SESSION_COOKIE_NAME"])
        end_if_too_old(app, session)
        return session

    def regenerate(self, session: ServerSideSession) -> None:
        super().regenerate(session)  # type: ignore[misc]
        session.stored = False

    def save_now(self, session: ServerSideSession) -> None:
        """Write the session to the store at once (raising if the store fails)."""
        store_id = self._get_store_id(session.sid)
        self._upsert_session(current_app.permanent_session_lifetime, session, store_id)
        session.stored = True  # from here on, written back only while still there
        session.saved_now = True

    def save_session(self, app: Flask, session: ServerSideSession, response: Response) -> None:
        if current_globals().get("session_unused"):
            return  # a public form posted from another site: the cookie plays no part
        if response.status_code >= 400 and getattr(session, "saved_now", False):
            # The request failed after storing its new session (a sign-in whose commit was
            # refused): that session must not live on, nor its cookie be sent.
            self._forget(session)
            return
        if response.status_code >= 500:
            return
        if not session and not session.modified:
            # Nothing to store, delete or renew (most requests: no sign-in, no cookie).
            # Flask-Session would still compute the store id (an HMAC) and parse Vary.
            if session.accessed and not varies_on_cookie(response):
                response.vary.add("Cookie")
            return
        try:
            super().save_session(app, session, response)  # type: ignore[misc]
        except RedisError as error:
            log.error("session store unavailable while saving: %s", type(error).__name__)
            rewrite_as_problem(response, 503, STORE_UNAVAILABLE)

    def _forget(self, session: ServerSideSession) -> None:
        # If the store is unreachable the orphan expires on its own; no cookie carries its id.
        with contextlib.suppress(RedisError):
            self._delete_session(self._get_store_id(session.sid))  # type: ignore[attr-defined]

    def _upsert_session(
        self, session_lifetime: timedelta, session: ServerSideSession, store_id: str
    ) -> None:
        if not session.permanent:
            session_lifetime = current_app.config["SESSION_IDLE_LIFETIME"]
        seconds = int(session_lifetime.total_seconds())
        value = self._seal(store_id, session)
        self._write(store_id, value, seconds, only_if_present=getattr(session, "stored", False))

    def _write(self, store_id: str, value: bytes, seconds: int, *, only_if_present: bool) -> None:
        """Store `value` for `seconds`; `only_if_present`: only over a value still there."""
        raise NotImplementedError

    def should_set_storage(self, app: Flask, session: ServerSideSession) -> bool:
        if session.modified:
            return True
        now = int(time.time())
        if now - session.get(TOUCHED_KEY, 0) >= app.config["SESSION_TOUCH_INTERVAL"]:
            session[TOUCHED_KEY] = now  # marks the session modified: store and cookie renewed
            return True
        return False


def varies_on_cookie(response: Response) -> bool:
    """Whether the answer's Vary names Cookie already (read as text: parsing it into a
    header set, as `response.vary` does, costs more)."""
    names = response.headers.get("Vary", "").split(",")
    return any(name.strip().lower() in ("cookie", "*") for name in names)


def end_if_too_old(app: Flask, session: ServerSideSession) -> None:
    """Sign a session out SESSION_MAX_LIFETIME after its sign-in (the store forgets it)."""
    if USER_KEY not in session:
        return
    now = int(time.time())
    signed_in = session.get(SIGNED_IN_KEY)
    if not isinstance(signed_in, int):
        session[SIGNED_IN_KEY] = now  # signed in before the limit existed: count from now
    elif now - signed_in >= app.config["SESSION_MAX_LIFETIME"].total_seconds():
        session.clear()  # empty and modified: deleted from the store, cookie removed


class FileSessionInterface(SessionLifetimeMixin, CacheLibSessionInterface):
    def _read(self, store_id: str) -> Any:
        return self.cache.get(store_id)

    def _write(self, store_id: str, value: bytes, seconds: int, *, only_if_present: bool) -> None:
        if not only_if_present or self.cache.has(store_id):
            self.cache.set(store_id, value.decode(), timeout=seconds)

    def _move(
        self, earlier_id: str, stored: Any, store_id: str, value: bytes, seconds: int
    ) -> bool:
        # One process's files (one host): whoever removes the earlier file moves it.
        if not self.cache.remove(earlier_id):
            return False
        self._write(store_id, value, seconds, only_if_present=False)
        return True


class RedisSessions(SessionLifetimeMixin, RedisSessionInterface):
    def _read(self, store_id: str) -> Any:
        return self.client.get(store_id)

    def _write(self, store_id: str, value: bytes, seconds: int, *, only_if_present: bool) -> None:
        self.client.set(store_id, value, ex=seconds, xx=only_if_present)  # XX: atomically

    def _move(
        self, earlier_id: str, stored: Any, store_id: str, value: bytes, seconds: int
    ) -> bool:
        return bool(self.client.eval(MOVE, 2, earlier_id, store_id, stored, value, seconds))


# How long a request whose session another request moved looks for it where it went.
MOVE_WAIT, MOVE_LOOKS = 0.05, 10

# KEYS[1] to KEYS[2], as one step: only if KEYS[1] still holds what was read (ARGV[1]).
MOVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""


def refuse_without_store() -> None:
    if getattr(current_session(), "store_unavailable", False):
        raise RedisConnectionError("session store unavailable")


def init_sessions(app: Flask) -> None:
    app.before_request(refuse_without_store)
    options = {
        "key_prefix": app.config["SESSION_KEY_PREFIX"],
        "permanent": app.config["SESSION_PERMANENT"],
    }
    kind = app.config["SESSION_TYPE"]
    interface: SessionLifetimeMixin
    if kind == "redis":
        # A rediss:// URL is TLS, and a user and password in it sign in to a Redis ACL user.
        client = redis.Redis.from_url(app.config["REDIS_URL"], **redis_options(app.config))
        interface = RedisSessions(app, client=client, **options)
    elif kind in ("cachelib", "filesystem"):
        directory = app.config["SESSION_FILE_DIR"] or os.path.join(app.instance_path, "sessions")
        # Past the threshold cachelib deletes expired sessions first, then the oldest ones.
        cache = JSONFileCache(directory, threshold=app.config["SESSION_FILE_THRESHOLD"], mode=0o600)
        interface = FileSessionInterface(app, client=cache, **options)
    else:
        raise RuntimeError(f"Unsupported SESSION_TYPE {kind!r}: use 'cachelib' or 'redis'.")
    interface.serializer = JSONSessions()
    id_keys, value_keys = keys_for(app, "session store id"), keys_for(app, "session store value")
    interface.id_key, interface.value_key = id_keys[0], value_keys[0]
    interface.earlier_keys = list(zip(id_keys[1:], value_keys[1:], strict=True))
    app.session_interface = interface  # type: ignore[assignment]
