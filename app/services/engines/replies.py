"""One reply asked of the engine host: it waits for its turn on a single-sequence engine (or runs in a turn its
caller holds, ``EngineHost.use``), then streams the engine's ``ReplyHandle``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from app.backends.protocol import Backend, Delta, ReplyHandle, TextCompletion
from app.core.chat.conversation import ReplyStats
from app.core.errors import InvalidInputError
from app.core.params import GenerationOptions, SamplingParams

if TYPE_CHECKING:
    from app.services.engines.gate import Turnstile


class ReplyStream:
    """``async for delta in reply``; ``place`` is its place in line (0 while it generates, None when it runs
    on an engine that takes replies concurrently or has ended); ``stop()`` ends it at the next token or takes it
    out of the line; ``stats`` are its figures once it has ended. With ``prompt`` it is a raw text completion
    (``messages`` unused); ``options`` go to the engine with the request. Without a ``turnstile`` it starts at
    once (a concurrent engine, or a turn its caller holds). ``prepare`` is awaited when its turn comes, before the
    engine is asked (the worker's copy of a model the chats run on in the parallel engine is loaded then)."""

    def __init__(
        self,
        backend: Backend,
        messages: list[dict[str, Any]],
        sampling: SamplingParams,
        turnstile: Turnstile | None,
        finished: Callable[[ReplyStream], None],
        *,
        options: GenerationOptions | None = None,
        prompt: str | None = None,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.backend = backend
        self._prepare = prepare
        self._messages = messages
        self._sampling = sampling
        self._options = options
        self._prompt = prompt
        self._turnstile = turnstile
        self._ticket: asyncio.Future[None] | None = turnstile.ticket() if turnstile is not None else None
        self._finished = finished
        self._inner: ReplyHandle | None = None
        self._stopped = False
        self._closed = False
        self.stats: ReplyStats | None = None
        self.on_queued: Callable[[int], None] | None = None  # unused here: its place in line is ``place``

    @property
    def place(self) -> int | None:
        if self._turnstile is None or self._ticket is None:
            return None
        return self._turnstile.place(self._ticket)

    @property
    def waiting(self) -> bool:
        return self._ticket is not None and not self._ticket.done()

    def stop(self) -> None:
        self._stopped = True
        if self._ticket is not None and not self._ticket.done():
            self._ticket.cancel()  # out of the line: the next __anext__ ends the reply
        elif self._inner is not None:
            self._inner.stop()

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> Delta:
        try:
            if self._inner is None:
                await self._begin()
            assert self._inner is not None
            return await self._inner.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise
        except BaseException:
            await self.aclose()
            raise

    async def _begin(self) -> None:
        if self._ticket is not None:
            try:
                await self._ticket
            except asyncio.CancelledError:
                if not self._stopped:
                    await self.aclose()
                    raise
        if self._stopped or self._closed:
            self.stats = ReplyStats(finish_reason="stopped")
            await self.aclose()
            raise StopAsyncIteration
        if self._prepare is not None:
            await self._prepare()
        self._inner = self._open()

    def _open(self) -> ReplyHandle:
        if self._prompt is None:
            return self.backend.stream_chat(self._messages, self._sampling, self._options)
        if not isinstance(self.backend, TextCompletion):
            raise InvalidInputError(f"The {self.backend.kind} engine cannot complete raw text; send a chat instead.")
        return self.backend.stream_completion(self._prompt, self._sampling, self._options)

    async def aclose(self) -> None:
        """End the reply (idempotent): the engine's stream is closed and the turn passes on."""
        if self._closed:
            return
        self._closed = True
        inner, self._inner = self._inner, None
        try:
            if inner is not None:
                await inner.aclose()
                self.stats = self.stats or inner.stats
        finally:
            if self._turnstile is not None and self._ticket is not None:
                self._turnstile.leave(self._ticket)
            self._finished(self)
