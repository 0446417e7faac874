"""Real faults for the fault tests: a TCP proxy that can be cut or frozen, a Redis server of
the test's own that can be killed or frozen, and an SMTP server that never answers.

Every one listens on a free loopback port and is stopped by its fixture; none touches the
machine's shared PostgreSQL or Redis beyond forwarding connections to them.
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from .conftest import free_port


class TcpProxy:
    """Forwards 127.0.0.1:<port> to `target`.

    `cut()` resets every connection and refuses new ones (a crashed server or a broken
    network); `freeze()` keeps accepting and forwards nothing, in either direction (a
    server that hangs, a network that drops packets: TCP keeps the connections up);
    `restore()` forwards again.
    """

    def __init__(
        self,
        target: tuple[str, int],
        watch_replies: Callable | None = None,
        watch_requests: Callable | None = None,
    ) -> None:
        self.target = target
        # Called for each connection: returns what is fed every chunk the server sends
        # (the client sends).
        self.watch_replies = watch_replies
        self.watch_requests = watch_requests
        self.port = free_port()
        self.flowing = threading.Event()
        self.flowing.set()
        self.lock = threading.Lock()
        self.sockets: set[socket.socket] = set()
        self.listener: socket.socket | None = None
        self.closed = False
        self._listen()

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed: cut() or close()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets.update((client, upstream))
            watch = self.watch_replies() if self.watch_replies else None
            asked = self.watch_requests() if self.watch_requests else None
            for source, sink, seen in ((client, upstream, asked), (upstream, client, watch)):
                threading.Thread(target=self._pump, args=(source, sink, seen), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, seen: Callable | None) -> None:
        try:
            while True:
                self.flowing.wait()
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # frozen while this was read: hold it back
                if seen is not None:
                    seen(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.discard(sock)
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def freeze(self) -> None:
        self.flowing.clear()

    def cut(self) -> None:
        if self.listener is not None:
            # shutdown() first: on Linux a plain close() leaves a blocked accept() accepting.
            with suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            # SO_LINGER 0: close with a reset, as a crashed host's kernel would answer.
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
            self._close(sock)
        self.flowing.set()

    def restore(self) -> None:
        self.flowing.set()
        if self.listener is None and not self.closed:
            self._listen()

    def close(self) -> None:
        self.closed = True
        self.cut()


def postgresql_messages(
    on_message: Callable[[str, bytes], None], *, untyped_first: bool
) -> Callable[[bytes], None]:
    """A reader of one direction of one connection, fed its bytes chunk by chunk, calling
    `on_message(type, body)` for each message: a 1-byte type, a 4-byte length, the rest. A
    client's first message (start-up) has no type (`untyped_first`). Needs a connection
    without TLS (`sslmode=disable`), whose bytes are the protocol."""
    buffer = bytearray()
    typed = not untyped_first

    def seen(data: bytes) -> None:
        nonlocal typed
        buffer.extend(data)
        while True:
            header = 5 if typed else 4
            if len(buffer) < header:
                return
            size = int.from_bytes(buffer[header - 4 : header], "big") + header - 4
            if len(buffer) < size:
                return
            if typed:
                on_message(chr(buffer[0]), bytes(buffer[header:size]))
            typed = True
            del buffer[:size]

    return seen


class SentToPostgreSQL:
    """What clients send PostgreSQL, message by message: (type, body) after each
    connection's start-up message."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()

    def watcher(self) -> Callable[[bytes], None]:
        def keep(kind: str, body: bytes) -> None:
            with self.lock:
                self.messages.append((kind, body))

        return postgresql_messages(keep, untyped_first=True)

    def of_type(self, *types: str) -> list[bytes]:
        with self.lock:
            return [body for kind, body in self.messages if kind in types]


class RoundTrips:
    """Counts round trips to PostgreSQL in its replies: each ends with one ReadyForQuery
    message (a simple query, an extended-protocol Sync, and the start-up exchange alike)."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def watcher(self) -> Callable[[bytes], None]:
        def ready(kind: str, _body: bytes) -> None:
            if kind == "Z":
                with self.lock:
                    self.count += 1

        return postgresql_messages(ready, untyped_first=False)


@contextmanager
def tcp_proxy(
    host: str,
    port: int,
    watch_replies: Callable | None = None,
    watch_requests: Callable | None = None,
) -> Iterator[TcpProxy]:
    proxy = TcpProxy((host, port), watch_replies, watch_requests)
    try:
        yield proxy
    finally:
        proxy.close()


class RedisServer:
    """A redis-server of the test's own, in memory, on a free port."""

    def __init__(self, directory: str) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arguments(self) -> list[str]:
        return ["--port", str(self.port)]

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        self.process = subprocess.Popen(  # noqa: S603 (our own arguments)
            [
                binary,
                *self.arguments(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.directory,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.answers():
                return
            time.sleep(0.05)
        raise AssertionError(f"redis-server on {self.port} did not start")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as probe:
                probe.sendall(b"PING\r\n")
                return probe.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def freeze(self) -> None:
        """SIGSTOP: the kernel still accepts connections; nothing ever answers."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            self.thaw()
            self.kill()


class SecureRedisServer(RedisServer):
    """A redis-server as production should run one: TLS only (a self-signed certificate the
    client is told to trust) and an ACL user of the service's own (the default user off)."""

    USER, PASSWORD = "directory", "a-long-redis-password-for-tests"

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.certificate = os.path.join(directory, "redis-cert.pem")
        key = os.path.join(directory, "redis-key.pem")
        subprocess.run(  # noqa: S603
            [  # noqa: S607
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-keyout", key, "-out", self.certificate, "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        self.key = key

    def arguments(self) -> list[str]:
        return [
            "--port", "0", "--tls-port", str(self.port),
            "--tls-cert-file", self.certificate, "--tls-key-file", self.key,
            "--tls-ca-cert-file", self.certificate, "--tls-auth-clients", "no",
            "--user", "default", "off",
            "--user", self.USER, "on", f">{self.PASSWORD}", "~*", "+@all", "-@dangerous",
        ]  # fmt: skip

    def url_with(self, password: str) -> str:
        return (
            f"rediss://{self.USER}:{password}@127.0.0.1:{self.port}/0"
            f"?ssl_ca_certs={self.certificate}"
        )

    @property
    def url(self) -> str:
        return self.url_with(self.PASSWORD)

    def answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=0.5).ping())
        except redis.RedisError:
            return False


class SilentSMTP:
    """Accepts TCP connections and never says a word (not even the greeting)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(16)  # the kernel completes the handshakes; nobody accepts

    def close(self) -> None:
        self.listener.close()
