"""Turns for an engine that runs one reply at a time: callers wait in arrival order and can see their place."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


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
