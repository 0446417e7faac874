"""Answers that may stream only so many at once in a process: CSV exports (EXPORTS_AT_ONCE).

An export streams for as long as writing every row takes, and all that time holds one of
the worker's threads, a database connection and the process's CPU (its cells are written
in Python, under the GIL). Twenty at once held every thread of a worker and left /health
waiting 11 s (issue 28). So a process streams at most `EXPORTS_AT_ONCE` exports; one more
is answered 429 with `Retry-After` at once, before anything else is done for it, and
gunicorn's other threads stay free for every other request.

A slot is taken before the rate limit counts, so a request turned away for want of one
spends none of its client's allowance. It is given back exactly once: when the view fails
or answers without a stream (a 404, a 422, a 429 of the rate limit), else when the server
closes the stream (it ended, it failed, or its client went away), or when the request
fails after the view returned (an after-request hook raised: the answer that streams is
replaced by a 500, and never closed), or at the latest when the stream is dropped
unclosed.
"""

import weakref
from collections.abc import Callable, Iterable, Iterator
from threading import Lock
from typing import Any

from flask import Flask, Response, current_app, g, got_request_exception
from werkzeug.exceptions import TooManyRequests

RETRY_AFTER = 5  # seconds; an export of 30,000 rows takes about one when it runs alone
BUSY = "Too many exports are running at once; try again in a few seconds."


class Slot:
    """One place among a process's `Slots`, given back once however often it is."""

    def __init__(self, slots: "Slots") -> None:
        self.slots = slots
        self.given_back = False

    def give_back(self) -> None:
        with self.slots.lock:
            if not self.given_back:
                self.given_back = True
                self.slots.taken -= 1


class Slots:
    """At most `setting` (read when one is asked for) taken at once, by any of the
    process's threads."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        self.taken = 0
        self.lock = Lock()

    def take(self) -> Slot:
        """A free slot; 429 with `Retry-After` when there is none."""
        with self.lock:
            if self.taken >= current_app.config[self.setting]:
                raise TooManyRequests(BUSY, retry_after=RETRY_AFTER)
            self.taken += 1
        return Slot(self)

    def streaming(self, view: Callable[..., Response], **path: Any) -> Response:
        """`view`'s answer, given in a slot kept for as long as its body streams."""
        slot = g.streaming_slot = self.take()
        try:
            response = view(**path)
        except BaseException:
            slot.give_back()
            raise
        if response.is_streamed:
            response.response = SlotStream(response.response, slot)
        else:
            slot.give_back()
        return response


class SlotStream:
    """A streamed body that gives its slot back when the server closes it (gunicorn and
    Werkzeug close the iterable they were handed, however the stream ended), or when it is
    dropped unclosed."""

    def __init__(self, chunks: Iterable[bytes], slot: Slot) -> None:
        self.chunks = iter(chunks)
        self.give_back = weakref.finalize(self, slot.give_back)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self.chunks)

    def close(self) -> None:
        try:
            close = getattr(self.chunks, "close", None)
            if close is not None:
                close()
        finally:
            self.give_back()


EXPORTS = Slots("EXPORTS_AT_ONCE")


def give_back_after_failure(_app: Flask, **_extra: Any) -> None:
    """A request that failed after its view took a slot: the stream it made will never be
    sent, nor closed; give its slot back now (once: a closed stream gave it back already)."""
    slot = g.pop("streaming_slot", None)
    if slot is not None:
        slot.give_back()


def init_slots(app: Flask) -> None:
    # A signal, sent only for a request that fails: the others pay nothing for it.
    got_request_exception.connect(give_back_after_failure, app)
