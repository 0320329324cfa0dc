"""A lean HTTP/1.1 POST for whole (non-streamed) JSON answers from a local server, over kept-alive connections.

At high concurrency next to a vLLM on the same CPU cores, every millisecond spent per request in this process is
taken from the engine; httpx's request machinery (its pool, models and anyio layers) costs a few per request.
This sends one prepared request and reads one ``Content-Length`` answer, nothing more. Plain ``http://`` only
(TLS and anything unusual go through httpx). Failures are raised as the httpx exceptions they correspond to, so
callers handle both the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.core.lazy_import import lazy_import

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")

CONNECT_TIMEOUT_S = 5.0
MAX_HEADER_LINES = 100
MAX_ANSWER_BYTES = 256 * 1024 * 1024  # a whole answer larger than this is not a chat completion
_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def usable_for(base_url: str) -> bool:
    """Whether ``base_url`` is a plain-HTTP address this poster can speak to."""
    parts = urlsplit(base_url)
    return parts.scheme == "http" and bool(parts.hostname) and parts.path in ("", "/")


class KeptAlivePoster:
    """POSTs of JSON bodies to one ``http://host:port`` server; idle connections are kept for the next request."""

    def __init__(self, base_url: str, api_key: str | None, keep: int = 64) -> None:
        parts = urlsplit(base_url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        authority = parts.netloc.rsplit("@", 1)[-1].encode("ascii")
        auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""
        self._headers = b"Host: " + authority + b"\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
        self._headers += auth
        self._idle: list[_Connection] = []
        self._keep = keep

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """(status, answer bytes) of POST ``path`` with the JSON ``body``; raises httpx.ConnectError when the
        server cannot be reached and httpx.RemoteProtocolError / ReadError when the answer breaks off."""
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            path.encode(),
            self._headers,
            len(body),
            body,
        )
        while self._idle:  # a kept connection the server has since closed fails before any answer: try the next
            connection = self._idle.pop()
            with contextlib.suppress(_StaleConnection):
                return await self._exchange(connection, request, reused=True)
        return await self._exchange(await self._connect(), request, reused=False)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for _reader, writer in idle:
            writer.close()

    async def _connect(self) -> _Connection:
        try:
            return await asyncio.wait_for(asyncio.open_connection(self._host, self._port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise httpx.ConnectError(f"cannot connect to {self._host}:{self._port}: {exc}") from exc

    async def _exchange(self, connection: _Connection, request: bytes, reused: bool) -> tuple[int, bytes]:
        reader, writer = connection
        done = False
        try:
            writer.write(request)
            status_line = await reader.readline()
            if not status_line and reused:
                raise _StaleConnection
            status, keep_alive, length = await _read_head(reader, status_line)
            answer = await reader.readexactly(length)
            done = keep_alive
            return status, answer
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            if reused and isinstance(exc, ConnectionResetError):
                raise _StaleConnection from exc
            raise httpx.ReadError(f"the connection broke off: {exc}") from exc
        finally:  # cancelled, failed or told to close: the connection is not reused
            if done and len(self._idle) < self._keep:
                self._idle.append(connection)
            else:
                writer.close()


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed; the request was not answered and can go on another."""


async def _read_head(reader: asyncio.StreamReader, status_line: bytes) -> tuple[int, bool, int]:
    """The status, whether the connection stays open, and the answer's length (it must say it)."""
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP answer: {status_line[:80]!r}")
    keep_alive, length = parts[0] == b"HTTP/1.1", None
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length" and value.isdigit():
            length = int(value)
        elif name == b"connection":
            keep_alive = value != b"close"
        elif name == b"transfer-encoding" and value != b"identity":
            raise httpx.RemoteProtocolError("the answer is chunked; a whole answer with a length was expected")
    else:
        raise httpx.RemoteProtocolError("the answer's header has too many lines")
    if length is None or length > MAX_ANSWER_BYTES:
        raise httpx.RemoteProtocolError("the answer does not say its length (or it is implausibly long)")
    return int(parts[1]), keep_alive, length
