"""A chat's reply on the parallel llama.cpp engine (``EngineHost.stream_chat`` when the chat's model runs there), in
the shape of the host's ``ReplyStream``: ``async for delta in reply``, ``stop()``, ``aclose()``, ``stats``.

It holds the parallel engine with the chat's model loaded while it runs (``ParallelSlots.use``: loaded again if
the API server loaded another model there meanwhile), so it generates side by side with the other chats' replies
and the API's requests on that model. Beyond N it waits in the engine's queue: ``on_queued`` hears its place.
A crash of the engine's child ends the reply with the reason; what was generated stays with the caller."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from app.backends.llamacpp.parallel_chats import ParallelReply
from app.backends.protocol import Backend, Delta, GenerationError, RequestRefusedError
from app.core.chat.conversation import ReplyStats
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.services.engines.parallel_slots import ParallelSlots

CLIENT = "chat"  # who asked, as the slots view shows it


class ParallelReplyStream:
    def __init__(
        self,
        slots: ParallelSlots,
        backend: Backend,
        load: tuple[str, LoadParams, int],
        messages: list[dict[str, Any]],
        sampling: SamplingParams,
        finished: Callable[[ParallelReplyStream], None],
        *,
        options: GenerationOptions | None = None,
        prompt: str | None = None,
    ) -> None:
        """``load``: the chat's model (entry, load params, N); ``backend``: the engine kind's single worker (the
        host counts and stops a kind's replies by it); with ``prompt`` a raw completion."""
        self.backend = backend
        self._slots = slots
        self._load = load
        self._messages = messages
        self._sampling = sampling
        self._options = options
        self._prompt = prompt
        self._finished = finished
        self._hold = contextlib.AsyncExitStack()
        self._inner: ParallelReply | None = None
        self._stopped = False
        self._closed = False
        self.stats: ReplyStats | None = None
        self.queued: int = 0  # its place in the engine's queue when it was sent (0: it got a slot at once)
        self.on_queued: Callable[[int], None] | None = None

    @property
    def place(self) -> int | None:
        """None: the parallel engine has no line of turns (its queue is the child's: ``queued``)."""
        return None

    @property
    def waiting(self) -> bool:
        return False

    def stop(self) -> None:
        self._stopped = True
        if self._inner is not None:
            self._inner.stop()

    def __aiter__(self) -> ParallelReplyStream:
        return self

    async def __anext__(self) -> Delta:
        try:
            if self._inner is None:
                await self._begin()
            assert self._inner is not None
            return await self._inner.__anext__()
        except GenerationError as exc:
            await self.aclose()
            if not isinstance(exc, RequestRefusedError) and self._slots.loaded is None:  # the child is gone
                raise GenerationError(f"{_sentence(str(exc))} The reply so far is kept; send again to start the "
                                      "parallel engine again.") from exc  # fmt: skip
            raise
        except BaseException:  # the end of the reply (StopAsyncIteration) included
            await self.aclose()
            raise

    async def _begin(self) -> None:
        entry, params, slots = self._load
        if not self._stopped and not self._closed:
            await self._hold.enter_async_context(self._slots.use(entry, params, slots))
        if self._stopped or self._closed:
            self.stats = ReplyStats(finish_reason="stopped")
            await self.aclose()
            raise StopAsyncIteration
        if self._prompt is None:
            self._inner = self._slots.stream_chat(self._messages, self._sampling, self._options, client=CLIENT)
        else:
            self._inner = self._slots.complete(self._prompt, self._sampling, self._options, client=CLIENT)
        self.queued = self._slots.queued_place(self._inner)
        if self.queued and self.on_queued is not None:
            self.on_queued(self.queued)

    async def aclose(self) -> None:
        """End the reply (idempotent): its sequence is cancelled in the child and the hold on the engine ends."""
        if self._closed:
            return
        self._closed = True
        inner, self._inner = self._inner, None
        try:
            if inner is not None:
                await inner.aclose()
                self.stats = self.stats or inner.stats or (ReplyStats(finish_reason="stopped") if self._stopped
                                                           else None)  # fmt: skip
        finally:
            try:
                await self._hold.aclose()
            finally:
                self._finished(self)


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
