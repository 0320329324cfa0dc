"""A server-sent-events response that stops its source the moment the client goes away: the body is pumped while
another task waits for ``http.disconnect``; whichever ends first cancels the other, and the source generator is
closed (which closes the engine host's reply, so the engine stops at its next token)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.responses import Response

T = TypeVar("T")

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
DONE = b"data: [DONE]\n\n"


def data_event(data: Any) -> bytes:
    """One ``data:`` event (OpenAI's streams)."""
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def named_event(name: str, data: Any) -> bytes:
    """One ``event:`` + ``data:`` event (Anthropic's streams)."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    return b"event: " + name.encode() + b"\ndata: " + body + b"\n\n"


class EventStream(Response):
    """An ASGI response streaming ``source``'s byte chunks; ``closed`` runs once it ends in any way (also when the
    client left before the source began, so the source's own ``finally`` never ran)."""

    def __init__(
        self, source: AsyncGenerator[bytes, None], closed: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        super().__init__(status_code=200)
        self.source = source
        self._closed = closed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, gone):
                task.cancel()
            for task in (pump, gone):
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
            await self.source.aclose()
            if self._closed is not None:
                await self._closed()

    async def _pump(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        async for chunk in self.source:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


async def unless_disconnected(receive: Any, work: Awaitable[T]) -> T:
    """Await ``work``; when the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientGone()
    return task.result()
