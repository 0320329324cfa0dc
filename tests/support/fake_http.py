"""What the local test servers share: a threaded HTTP server on 127.0.0.1 that records its own bugs, a handler
that tracks open connections, and start/stop that drops those connections and joins every thread."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


class FakeHttpServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins only non-daemon handler threads
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

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go does; no 40 ms stalls
        fake = self.server.fake
        with fake._lock:
            fake._connections.add(self.connection)

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
