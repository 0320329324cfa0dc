"""Model turns for one engine: any number of requests may use the model it has loaded; a request for another model
waits until those end, in arrival order, and then its model is loaded. Requests for the loaded model that arrive
after it wait behind it, so a model switch is never starved."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Hashable


class ModelGate:
    def __init__(self) -> None:
        self._active: Hashable | None = None
        self._holders = 0
        self._line: deque[tuple[Hashable, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._line)

    @property
    def holders(self) -> int:
        return self._holders

    @property
    def active(self) -> Hashable | None:
        """The model the holders use (None when nobody holds the gate)."""
        return self._active if self._holders else None

    @contextlib.asynccontextmanager
    async def use(self, key: Hashable) -> AsyncIterator[None]:
        await self._enter(key)
        try:
            yield
        finally:
            self._holders -= 1
            self._admit()

    async def _enter(self, key: Hashable) -> None:
        if not self._line and (self._holders == 0 or self._active == key):
            self._take(key)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append((key, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # admitted just as it was cancelled: give the turn back
                self._holders -= 1
            with contextlib.suppress(ValueError):
                self._line.remove((key, turn))
            self._admit()
            raise

    def _take(self, key: Hashable) -> None:
        if self._holders == 0:
            self._active = key
        self._holders += 1

    def _admit(self) -> None:
        while self._line:
            key, turn = self._line[0]
            if turn.done():
                self._line.popleft()
                continue
            if self._holders and key != self._active:
                return
            self._line.popleft()
            self._take(key)
            turn.set_result(None)
