"""The one reply shape every engine's ``stream_chat`` returns (``ReplyHandle`` in ``app.backends.protocol``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable

from app.backends.protocol import Delta
from app.core.chat.conversation import ReplyStats


class StreamedReply(AsyncIterator[Delta]):
    """One streamed reply: ``async for delta in reply``; ``stop()`` ends it at the next token; ``stats`` are its own
    figures once it has ended; ``aclose()`` ends it early. Also an async context manager that closes it on exit.

    Built as ``StreamedReply(lambda reply: engine_generator(reply, ...))``: the engine's generator is given the
    reply, sets its ``stats`` when it ends and says how to stop it (``on_stop``) once it runs."""

    def __init__(self, run: Callable[[StreamedReply], AsyncGenerator[Delta, None]]) -> None:
        self.stats: ReplyStats | None = None
        self.stopping = False
        self._stop_action: Callable[[], None] | None = None
        self._run = run(self)

    @property
    def done(self) -> bool:
        return self.stats is not None

    def on_stop(self, action: Callable[[], None]) -> None:
        """How to stop this reply now that it runs (called at once when ``stop()`` came first)."""
        self._stop_action = action
        if self.stopping:
            action()

    def stop(self) -> None:
        self.stopping = True
        if self._stop_action is not None:
            self._stop_action()

    def __aiter__(self) -> StreamedReply:
        return self

    async def __anext__(self) -> Delta:
        return await self._run.__anext__()

    async def aclose(self) -> None:
        await self._run.aclose()

    async def __aenter__(self) -> StreamedReply:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
