"""A POST to a URL that someone else chose (a webhook receiver), bounded in every way.

- Where: the URL's host is resolved (within the time given) and every address checked
  (ssrf.py) at each call, and the connection goes to a checked address, the name sent
  only as the Host header and the TLS server name (certificates are verified against
  it): a name that resolves elsewhere a moment later (DNS rebinding) is never reached.
- How long: each socket operation waits at most what is left of `timeout`, and a
  watchdog shuts the connection when the whole time is up (TLS included), so a receiver
  that trickles its answer a byte at a time cannot hold the caller past it either.
- How much: the status line and headers as http.client bounds them (100 headers of
  64 KiB at most), then `keep` bytes of the body, and nothing more is read.
- No redirects are followed: a 3xx is an answer like any other.
"""

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .ssrf import Address, Network, checked_addresses


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes  # its first `keep` bytes
    seconds: float


class TimeUp(TimeoutError):
    """The receiver did not answer within the time given."""


class PinnedConnection(http.client.HTTPSConnection):
    """http.client's connection to one checked address; TLS (with the URL's host as the
    server name) unless `tls` is False."""

    def __init__(
        self,
        host: str,
        port: int,
        address: Address,
        timeout: float,
        tls: bool,
        context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.address = address
        self.tls = tls
        # A second handle on the connection for the watchdog: http.client lets go of `sock`
        # once a response that closes the connection has begun, and wrapping a socket in
        # TLS detaches the plain one (shutting that would do nothing).
        self.raw: socket.socket | None = None

    def connect(self) -> None:
        sock = socket.create_connection((str(self.address), self.port), self.timeout)
        self.raw = sock.dup()
        if self.tls:
            sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]
        self.sock = sock

    def release(self) -> None:
        """Close it all, the watchdog's handle too (http.client's own `close` may come
        while the answer is still being read: that one must stay)."""
        self.close()
        if self.raw is not None:
            self.raw.close()
            self.raw = None


def _shut(connection: PinnedConnection) -> None:
    """Past the time given: shutting the socket wakes any blocked read or write."""
    sock = connection.raw
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    allow_http: bool,
    allowed: tuple[Network, ...],
    keep: int = 1024,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """POST `body` to `url`; its reply, whatever its status. Raises ssrf.Refused for a URL
    or address the service may not reach, TimeUp past `timeout`, OSError (and
    http.client's errors) when the receiver cannot be reached or answers nonsense."""
    started = time.monotonic()
    deadline = started + timeout
    addresses = checked_addresses(url, allow_http=allow_http, allowed=allowed, timeout=timeout)
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    last_error: Exception | None = None
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        connection = PinnedConnection(
            parts.hostname or "", port, address, left, tls, context or ssl.create_default_context()
        )
        watchdog = threading.Timer(left, _shut, [connection])
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                connection.connect()
            except OSError as error:  # refused, unreachable: the next address, if any
                last_error = error
                continue
            return _exchange(connection, target, body, headers, keep, started, deadline)
        except OSError as error:
            if time.monotonic() >= deadline:
                raise TimeUp(f"no answer within {timeout:g}s") from error
            raise
        finally:
            watchdog.cancel()
            connection.release()
    if last_error is not None and time.monotonic() < deadline:
        raise last_error
    raise TimeUp(f"no answer within {timeout:g}s")


def _exchange(
    connection: PinnedConnection,
    target: str,
    body: bytes,
    headers: dict[str, str],
    keep: int,
    started: float,
    deadline: float,
) -> Reply:
    connection.request("POST", target, body=body, headers=headers)
    response: Any = connection.getresponse()
    if time.monotonic() >= deadline:
        raise TimeUp("the answer came after the time given")
    try:  # the status is the answer; a body that never ends (nor comes) keeps none of it
        kept = response.read(keep) if keep else b""
    except (OSError, http.client.HTTPException):
        kept = b""
    return Reply(
        status=response.status,
        headers={name.lower(): value for name, value in response.getheaders()},
        body=kept,
        seconds=time.monotonic() - started,
    )
