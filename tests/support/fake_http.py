"""What the local test servers share: a threaded HTTP server on 127.0.0.1 that records its own bugs, a handler
that tracks open connections and answers (``_send``, ``_json``, ``_die``), start/stop that drops those
connections and joins every thread, and the record of a request and of a fault to inject."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, NoReturn, Self


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any = None
    body_size: int = 0
    request_id: str | None = None  # "chatcmpl-N" / "cmpl-N" for an OpenAI-style generation request


@dataclass
class Fault:
    """What goes wrong with the next request or stream on a route.

    ``after=None``: the request is refused with HTTP ``status`` and an error body (the OpenAI-style fake).
    ``after=N``: the stream sends N lines or chunks, then an error event with ``error`` (or, with ``die``, drops
    the connection).
    """

    error: str | None = "an error was encountered while running the model"
    die: bool = False
    after: int | None = None
    status: int = 400
    error_type: str = "BadRequestError"


class Abort(Exception):
    """The response ended early: the client went away, the server died on purpose, or it is stopping."""


class FakeHttpServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins only non-daemon handler threads
    request_queue_size = 128  # socketserver's 5 drops connections a burst of 32 clients makes (uvicorn's is 2048)
    block_on_close = True
    fake: Any

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client dropping its connection is normal; anything else is a bug in the fake, kept for the test."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        if exc is not None:
            self.fake.handler_errors.append(exc)
        super().handle_error(request, client_address)


class TrackedHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; registers its connection so ``stop()`` can cut it."""

    protocol_version = "HTTP/1.1"
    server: FakeHttpServer
    timeout = 5  # an idle keep-alive connection never blocks stop() for long
    json_content_type = "application/json"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go does; no 40 ms stalls
        fake = self.server.fake
        with fake._lock:
            fake._connections.add(self.connection)

    def _send(self, status: int, data: bytes, content_type: str | None = None) -> None:
        """A whole response; an empty 200 goes without a Content-Type, a HEAD without its body."""
        self.send_response(status)
        if data or status != 200:
            self.send_header("Content-Type", content_type or self.json_content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _client_gone(self) -> bool:
        """True once the client closed its end (checked between streamed lines)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _die(self) -> NoReturn:
        """Drop the connection mid-response, as a crashed server would."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        raise Abort

    def answer_raw(self, path: str) -> bool:
        """Send the raw answer queued for ``path`` (see ``FakeServer.send_raw``), if any; True when it did."""
        body = self.server.fake._take_raw(path)
        if body is None:
            return False
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def finish(self) -> None:
        fake = self.server.fake
        with fake._lock:
            fake._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()


class FakeServer:
    """A test server's lifecycle on a free loopback port. Subclasses set ``handler_class``."""

    handler_class: ClassVar[type[TrackedHandler]]

    def __init__(self) -> None:
        self.handler_errors: list[BaseException] = []  # exceptions the fake itself raised while answering
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: FakeHttpServer | None = None
        self._thread: threading.Thread | None = None
        self._raw: dict[str, list[bytes]] = {}
        self.port = 0
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[str] = []  # the routes (Ollama) or request ids (OpenAI) whose client left early
        self.disconnected = threading.Event()

    def requests_to(self, path: str, method: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path and (method is None or r.method == method)]

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _note_disconnect(self, what: str) -> None:
        with self._lock:
            self.disconnects.append(what)
        self.disconnected.set()

    def send_raw(self, path: str, body: bytes) -> None:
        """Answer the next request to ``path`` with HTTP 200 and ``body`` as it is: a broken or hostile server.

        Several queue up in order; the request is still recorded."""
        with self._lock:
            self._raw.setdefault(path, []).append(body)

    def _take_raw(self, path: str) -> bytes | None:
        with self._lock:
            queue = self._raw.get(path)
            return queue.pop(0) if queue else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> Self:
        server = FakeHttpServer(("127.0.0.1", self.port), self.handler_class)
        server.fake = self
        self.port = server.server_address[1]
        self._stopping.clear()
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (later connections are refused), drop open connections and join every thread."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def unused_url() -> str:
        """A loopback URL on which nothing listens (connections are refused)."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return f"http://127.0.0.1:{port}"
