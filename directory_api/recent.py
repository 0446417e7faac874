"""What a process remembers of recent answers, by what determined them: bounded, and keyed
by digests, so that a hostile client varying its URLs only evicts.

`caching.py` keeps the ETag answered for a list revision and URL (a 304 before the work);
`pagination.py` keeps where the pages of a list revision start (a deep page without the
walk over the rows before it). A key names the data's revision, so a change makes the
entries for the old data unreachable rather than wrong.
"""

import hashlib
from collections import OrderedDict
from collections.abc import Hashable
from threading import Lock
from typing import Any

from flask import request


class RecentlyUsed:
    """The most recently used `size` entries (gunicorn's threads share one per process)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self.entries: OrderedDict[bytes, Any] = OrderedDict()
        self.lock = Lock()

    def get(self, key: bytes) -> Any:
        with self.lock:
            value = self.entries.get(key)
            if value is not None:
                self.entries.move_to_end(key)
            return value

    def put(self, key: bytes, value: Any) -> None:
        with self.lock:
            self.entries[key] = value
            self.entries.move_to_end(key)
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)


def request_key(*state: Hashable, skip_arg: str | None = None) -> bytes:
    """A digest of the request's path and query (less `skip_arg`) and `state`."""
    query: Any = request.query_string
    if skip_arg is not None:
        query = sorted(item for item in request.args.items(multi=True) if item[0] != skip_arg)
    return hashlib.blake2b(repr((request.path, query, state)).encode(), digest_size=20).digest()
