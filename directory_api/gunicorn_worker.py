"""gunicorn's gthread worker, hardened against slow clients, answering its own errors in JSON.

`gunicorn.conf.py` selects it. Three changes to gthread:

- A thread only takes a request that has arrived. gthread hands a connection to a thread
  once its first byte is there, and the thread then blocks reading the rest: a few clients
  sending a byte a second held every thread. Here the worker's event loop gathers the head
  and a body of up to BUFFER_LIMIT bytes; a client gets `client_timeout` seconds from its
  first byte (a new connection: from connecting) to deliver them, then a 408. What a
  thread still reads from the socket (a larger body, or one sent after "100 Continue") is
  bound by the same deadline.
- gunicorn closes a connection by waiting, in its event loop, up to 2 s for the client to
  close its side: a client that never did stalled every other connection of the worker.
  Here the poller waits instead.
- gunicorn's own answers (a malformed request, a line or head too long, a failure outside
  the app) are RFC 9457 problems, and the app's `Connection: close` is honoured.
"""

import contextlib
import json
import re
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from http import HTTPStatus
from ssl import SSLError
from typing import Any

from gunicorn import util
from gunicorn.errors import AppImportError
from gunicorn.http.errors import (
    ConfigurationProblem,
    ExpectationFailed,
    ForbiddenProxyRequest,
    InvalidResponseHeader,
    InvalidResponseHeaderName,
    LimitRequestHeaders,
    LimitRequestLine,
    ParseException,
    UnsupportedTransferCoding,
)
from gunicorn.http.parser import RequestParser
from gunicorn.http.unreader import SocketUnreader
from gunicorn.http2 import negotiation
from gunicorn.workers.gthread import TConn, ThreadWorker
from werkzeug.exceptions import RequestTimeout

from config import SettingsError

# A request is handed to a thread once this much of it is here, whole or not (the default
# MAX_CONTENT_LENGTH twice over): buffering per connection stays bounded.
BUFFER_LIMIT = 128 * 1024
RECEIVE_SIZE = 64 * 1024
# As gunicorn's own graceful close: how long, and how much, to read from a closing client.
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 * 1024

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

FRAMING_FIELD = re.compile(
    rb"^(content-length|transfer-encoding|expect)[ \t]*:[ \t]*(.*?)[ \t]*\r?$", re.I | re.M
)


class ClientTimeout(RequestTimeout):
    """The client did not deliver its request within the client timeout."""

    description = "The request did not arrive in time."


# gunicorn's refusals and their statuses, in its order; other parse errors are 400s, as there.
REFUSALS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int], ...] = (
    (ClientTimeout, 408),
    # The application's own faults, which gunicorn words as request errors.
    ((InvalidResponseHeader, InvalidResponseHeaderName, ConfigurationProblem), 500),
    (LimitRequestLine, 414),
    (LimitRequestHeaders, 431),
    (ExpectationFailed, 417),
    (UnsupportedTransferCoding, 501),
    (ForbiddenProxyRequest, 403),
    ((ParseException, SSLError), 400),
)
TITLES = {414: "URI Too Long"}  # RFC 9110's name, where Python 3.11 has the older one


def refusal_status(error: BaseException) -> int:
    """The status gunicorn answers `error` with: a refusal of the request, else 500."""
    return next((status for kinds, status in REFUSALS if isinstance(error, kinds)), 500)


def problem_answer(status: int, detail: str) -> bytes:
    """A whole HTTP/1.1 answer carrying an RFC 9457 problem, after which the server closes."""
    title = TITLES.get(status) or HTTPStatus(status).phrase
    body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail})
    head = (
        f"HTTP/1.1 {status} {title}\r\n"
        "Content-Type: application/problem+json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        "X-Content-Type-Options: nosniff\r\n\r\n"
    )
    return (head + body).encode("ascii")


def printable(value: object) -> str:
    """`value` with control and non-ASCII characters escaped, so that a log line stays one."""
    return str(value).encode("unicode_escape").decode("ascii")


def chunks_ended(data: bytearray, position: int, seen: int) -> tuple[bool, int]:
    """Whether the chunked body whose next chunk starts at `position` is complete (or
    malformed: gunicorn refuses it then, so there is nothing more to wait for), and where
    the first chunk not yet whole starts. Bytes before `seen` were looked at already."""
    while True:
        line_end = data.find(b"\r\n", position)
        if line_end < 0:
            return False, position
        try:
            size = int(data[position:line_end].split(b";", 1)[0], 16)
        except ValueError:
            return True, position
        if size == 0:  # the last chunk; then trailer fields up to an empty line
            return data.find(b"\r\n\r\n", max(line_end, seen - 3)) >= 0, position
        if line_end + 2 + size + 2 > len(data):
            return False, position
        position = line_end + 2 + size + 2


class Arrival:
    """A request on its way in: its bytes so far, and where they say it ends. Each call of
    `add` looks at the new bytes only, however thinly a client slices its request."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray()
        self.body_start = 0  # until the head is whole
        self.end: int | None = None  # the end of a body of announced length
        self.next_chunk = 0  # or the first chunk not yet whole, of a chunked body
        self.whole = self.add(data)

    def add(self, data: bytes) -> bool:
        """Take more bytes; whether the request is whole now, or all of it that this worker
        buffers, or one that gunicorn will refuse as it stands."""
        seen = len(self.data)
        self.data += data
        if len(self.data) >= BUFFER_LIMIT:
            return True
        if not self.body_start:
            head_end = self.data.find(b"\r\n\r\n", max(seen - 3, 0))
            stop = len(self.data) if head_end < 0 else head_end + 2
            crlf = self.data.count(b"\r\n", max(seen - 1, 0), stop)
            if self.data.count(b"\n", seen, stop) != crlf:
                return True  # a bare LF ends no head gunicorn accepts: it refuses it now
            if head_end < 0:
                return False
            self.body_start = self.next_chunk = head_end + 4
            if not self.framed(self.data[:head_end]):
                return True
        if self.end is not None:
            return len(self.data) >= self.end
        ended, self.next_chunk = chunks_ended(self.data, self.next_chunk, seen)
        return ended

    def framed(self, head: bytearray) -> bool:
        """Learn where the body ends from `head`; False if the request should go now."""
        fields = {name.lower(): value.lower() for name, value in FRAMING_FIELD.findall(head)}
        if b"expect" in fields:
            return False  # the client waits for gunicorn's "100 Continue" to send a body
        coding = fields.get(b"transfer-encoding")
        if coding is not None:
            return coding == b"chunked" and b"content-length" not in fields  # else refused
        length = fields.get(b"content-length", b"0")
        if not length.isdigit() or self.body_start + int(length) > BUFFER_LIMIT:
            return False  # refused, or too large to buffer: read by the thread, if at all
        self.end = self.body_start + int(length)
        return True


class DeadlineUnreader(SocketUnreader):
    """gunicorn's socket reader, waiting for the client no later than `deadline`."""

    deadline: float | None = None

    def chunk(self, size_hint: int | None = None) -> bytes:
        if self.deadline is None:
            return super().chunk(size_hint)
        before = self.sock.gettimeout()
        # Past the deadline, bytes already received are still read; the client is not waited for.
        self.sock.settimeout(max(self.deadline - time.monotonic(), 0.001))
        try:
            return super().chunk(size_hint)
        except TimeoutError:
            raise ClientTimeout() from None
        finally:
            self.sock.settimeout(before)


class DeadlineParser(RequestParser):
    """gunicorn's HTTP/1 parser, reading through a DeadlineUnreader."""

    def __init__(self, cfg: Any, source: socket.socket, source_addr: Any) -> None:
        super().__init__(cfg, source, source_addr)
        self.unreader = DeadlineUnreader(source)


def honour_connection_close(app: WSGIApp) -> WSGIApp:
    """gunicorn drops the hop-by-hop headers an app sets, `Connection` among them; when the
    app asks to close, tell gunicorn's response, which then says so and closes."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if any(
                name.lower() == "connection" and "close" in value.lower() for name, value in headers
            ):
                response = getattr(start_response, "__self__", None)
                if hasattr(response, "force_close"):
                    response.force_close()
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return application


def peer(conn: TConn) -> str:
    """The client's address, for the log ("-" on a Unix socket)."""
    return conn.client[0] if conn.client else "-"


class BoundedThreadWorker(ThreadWorker):
    """gthread: threads for whole requests only, bounded slow clients, JSON errors."""

    client_timeout = 10.0  # seconds; gunicorn.conf.py sets it from GUNICORN_CLIENT_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Connections in the event loop's hands, each deque in deadline order.
        self.arriving: deque[TConn] = deque()  # sending a request
        self.closing: deque[TConn] = deque()  # answered; waiting for the client to close

    def load_wsgi(self) -> None:
        """Load the app, wrapped so that its `Connection: close` is honoured.

        Settings the app refuses are gunicorn's "App failed to load": their one line on
        stderr and the server stops, instead of a traceback and a worker booted again."""
        try:
            super().load_wsgi()
        except SettingsError as error:
            raise AppImportError(error.format_message()) from None
        self.wsgi = honour_connection_close(self.wsgi)

    def buffers(self, conn: TConn) -> bool:
        """TLS and HTTP/2 are left as gunicorn has them (a proxy in front speaks those)."""
        if conn.parser is not None:
            return isinstance(conn.parser, DeadlineParser)
        return not self.cfg.is_ssl and not negotiation.prior_knowledge_allowed(
            self.cfg, conn.client
        )

    def enqueue_req(self, conn: TConn) -> None:
        """Gather the connection's next request in the event loop; a thread takes it whole."""
        if not self.buffers(conn):
            super().enqueue_req(conn)
            return
        if conn.parser is None:  # gthread's TConn.init() keeps a parser it finds set
            conn.parser = DeadlineParser(self.cfg, conn.sock, conn.client)
        # Bytes read ahead behind the previous request (pipelining) count as received.
        conn.arrival = Arrival(conn.parser.unreader.take_buffered())
        conn.deadline = time.monotonic() + self.client_timeout
        conn.parser.unreader.deadline = conn.deadline
        conn.sock.setblocking(False)
        # A kept-alive connection usually has its whole request there already.
        if self.receive(conn):
            self.settle(conn)
        else:
            self.arriving.append(conn)
            self.poller.register(
                conn.sock, selectors.EVENT_READ, partial(self.on_request_data, conn)
            )

    def on_request_data(self, conn: TConn, _sock: Any = None) -> None:
        """The poller's call: more of a request, or the client gone."""
        if self.receive(conn):
            self.let_go(conn, self.arriving)
            self.settle(conn)

    def receive(self, conn: TConn) -> bool:
        """Take what the client sent; whether the request is whole now, or the client gone."""
        try:
            data = conn.sock.recv(RECEIVE_SIZE)
        except (BlockingIOError, InterruptedError):
            data = None
        except OSError:
            data = b""
        if data:
            conn.arrival.whole = conn.arrival.add(data)
        return conn.arrival.whole or data == b""

    def settle(self, conn: TConn) -> None:
        """A whole request goes to a thread; a client gone before sending one is let go."""
        if conn.arrival.whole:
            conn.parser.unreader.unread(bytes(conn.arrival.data))
            conn.arrival = None
            conn.data_ready = True  # gthread need not wait for a first byte: all is here
            super().enqueue_req(conn)
        else:
            self.nr_conns -= 1
            conn.close()

    def let_go(self, conn: TConn, queue: deque[TConn]) -> None:
        """Stop watching `conn` in the event loop."""
        self.poller.unregister(conn.sock)
        queue.remove(conn)

    def handle_request(self, req: Any, conn: TConn) -> bool:
        """gthread's, then the read deadline is lifted."""
        try:
            return super().handle_request(req, conn)
        finally:
            # The deadline was for the request; draining an unread body is gunicorn's, bounded.
            if isinstance(conn.parser, DeadlineParser):
                conn.parser.unreader.deadline = None

    def finish_request(self, conn: TConn, fs: Any) -> None:
        """gthread's, except that a connection to close lingers in the poller."""
        if not fs.cancelled() and fs.exception() is None and fs.result() is False:
            self.nr_conns -= 1
            self.linger(conn)
        else:
            super().finish_request(conn, fs)

    def linger(self, conn: TConn) -> None:
        """Close as gunicorn does, without its wait in the event loop: FIN, then read what
        the client still sends until it closes too, so that unread bytes never make the
        kernel reset the connection under the answer."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            conn.close()
            return
        conn.deadline = time.monotonic() + LINGER_SECONDS
        conn.drained = 0
        self.closing.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_closing_data, conn))

    def on_closing_data(self, conn: TConn, _sock: Any = None) -> None:
        """Swallow what a closing client still sends; close once it is done (or too much)."""
        try:
            data = conn.sock.recv(RECEIVE_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        conn.drained += len(data)
        if not data or conn.drained >= LINGER_BYTES:
            self.let_go(conn, self.closing)
            conn.close()

    def murder_pending(self) -> None:
        """gthread's expiry of idle connections, and of those sending or closing too slowly."""
        super().murder_pending()
        now = time.monotonic()
        while self.arriving and self.arriving[0].deadline <= now:
            conn = self.arriving[0]
            self.let_go(conn, self.arriving)
            self.nr_conns -= 1
            if conn.arrival.data:  # one that never sent a byte is closed quietly, as gunicorn does
                self.log.info(
                    "Request incomplete after %gs from ip=%s", self.client_timeout, peer(conn)
                )
                with contextlib.suppress(OSError):  # a short answer, into an empty send buffer
                    conn.sock.send(problem_answer(408, ClientTimeout.description))
            self.linger(conn)
        while self.closing and self.closing[0].deadline <= now:
            conn = self.closing[0]
            self.let_go(conn, self.closing)
            conn.close()

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        """gunicorn's own answers, as problem+json (gunicorn writes an HTML page)."""
        status = refusal_status(exc)
        ip = addr[0] if addr else "-"
        if status == 408:
            self.log.info("Request incomplete after %gs from ip=%s", self.client_timeout, ip)
            detail = ClientTimeout.description
        elif status < 500:
            self.log.warning("Invalid request from ip=%s: %s", ip, printable(exc))
            detail = str(exc)  # gunicorn's words; JSON escapes whatever they quote
        else:
            # Never the path: tokens travel in some (see gunicorn.conf.py, accesslog).
            self.log.exception("Error handling request %s", getattr(req, "method", ""))
            detail = "An unexpected error occurred."
        try:
            util.write_nonblock(client, problem_answer(status, detail))
        except OSError:
            self.log.debug("Failed to send error message.")
