"""A real HTTP receiver of webhooks on loopback, for the tests: it keeps every request it
gets and answers as the test scripts it (a status, headers, a body; after a wait, or never
until it is let go)."""

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    wait: float = 0.0  # seconds before answering
    hold: bool = False  # answer only once `Receiver.release` is called (a frozen receiver)
    drip: bool = False  # send the body a byte every `wait` seconds, for ever


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)


class QuietServer(ThreadingHTTPServer):
    """A client that went away mid-answer (a worker killed, or cut off at its timeout) is
    what these tests make happen: not worth a traceback."""

    def handle_error(self, request, client_address) -> None:
        pass


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: list[Answer] = []  # the next answers, in order; then `default`
        self.default = Answer()
        self.released = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    answer = receiver.script.pop(0) if receiver.script else receiver.default
                if answer.hold:
                    receiver.released.wait(60)
                if answer.drip:
                    self.send_response(answer.status)
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                    for _ in range(600):
                        if receiver.released.wait(answer.wait):
                            return
                        self.wfile.write(b"x")
                        self.wfile.flush()
                    return
                if answer.wait:
                    receiver.released.wait(answer.wait)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, *args) -> None:
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def answer(self, *answers: Answer) -> None:
        with self.lock:
            self.script.extend(answers)

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    try:
        yield receiver
    finally:
        receiver.close()
