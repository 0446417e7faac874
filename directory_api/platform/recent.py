"""What a process remembers of recent answers, by what determined them: bounded, and keyed
by digests, so that a hostile client varying its URLs only evicts.

`caching.py` keeps the ETag answered for a list revision and URL (a 304 before the work),
and the most recent answers themselves (the page again, before the work);
`page_queries.py` keeps where the pages of a list revision start (a deep page without the
walk over the rows before it). A key names the data's revision, so a change made through
the app makes the entries for the old data unreachable rather than wrong. A change that
bypasses the app's events (SQL by hand, a worker of the previous release during a rolling
deploy) does not turn the revision: entries live `PUBLIC_MAX_AGE` seconds, so such a
change is seen within the time any public cache may keep the page anyway (0: none kept).
"""

import hashlib
from collections import OrderedDict
from collections.abc import Hashable
from threading import Lock
from time import monotonic
from typing import Any

from .current import current_application, current_request


class RecentlyUsed:
    """The most recently used `size` entries (gunicorn's threads share one per process)."""

    def __init__(self, size: int = 10_000, *, lifetime: bool = True) -> None:
        self.size = size
        self.lifetime = lifetime
        self.entries: OrderedDict[Hashable, Any] = OrderedDict()
        self.lock = Lock()

    def get(self, key: Hashable) -> Any:
        """The value kept for `key`, if it was kept less than `PUBLIC_MAX_AGE` s ago (or,
        without `lifetime`, at all)."""
        lifetime = current_application().config["PUBLIC_MAX_AGE"] if self.lifetime else None
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                return None
            value, kept_at = entry
            if lifetime is not None and monotonic() - kept_at >= lifetime:
                del self.entries[key]
                return None
            self.entries.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self.lock:
            self.entries[key] = (value, monotonic())
            self.entries.move_to_end(key)
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)


def request_key(*state: Hashable, skip_arg: str | None = None) -> bytes:
    """A digest of the request's path and query (less `skip_arg`) and `state`."""
    req = current_request()
    query: Any = req.query_string
    if skip_arg is not None:
        query = sorted(item for item in req.args.items(multi=True) if item[0] != skip_arg)
    return hashlib.blake2b(repr((req.path, query, state)).encode(), digest_size=20).digest()
