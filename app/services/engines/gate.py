"""An engine's one line. ``Turnstile``: turns for an engine that runs one reply at a time — callers (replies, loads,
requests holding a turn) wait in arrival order and can see their place. ``ModelGate``: model turns for an engine
that runs replies concurrently — any number of requests use the model it has loaded; a request for another model
waits until those end, in arrival order, and requests for the loaded model that arrive after it wait behind it, so
a model switch is never starved."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable


class Turnstile:
    """A FIFO lock with visible places. ``place(ticket)`` is 0 for the holder, 1 for the next in line, …"""

    def __init__(self, on_change: Callable[[int], None] | None = None) -> None:
        self._line: deque[asyncio.Future[None]] = deque()
        self._on_change = on_change or (lambda _waiting: None)

    @property
    def busy(self) -> bool:
        return bool(self._line)

    @property
    def waiting(self) -> int:
        """Callers waiting for their turn (the holder not counted)."""
        return max(0, len(self._line) - 1)

    def ticket(self) -> asyncio.Future[None]:
        """Join the line; the ticket is done when it is this caller's turn. ``leave`` it in every case."""
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._line:
            ticket.set_result(None)
        self._line.append(ticket)
        self._on_change(self.waiting)
        return ticket

    def place(self, ticket: asyncio.Future[None]) -> int | None:
        try:
            return self._line.index(ticket)
        except ValueError:
            return None

    def leave(self, ticket: asyncio.Future[None]) -> None:
        """Give the turn up (or stop waiting for it); the next in line gets it."""
        if ticket not in self._line:
            return
        first = self._line[0] is ticket
        self._line.remove(ticket)
        if not ticket.done():
            ticket.cancel()
        if first and self._line and not self._line[0].done():
            self._line[0].set_result(None)
        self._on_change(self.waiting)


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
