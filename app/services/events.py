"""One shape for every long-lived service's news: ``subscribe(listener)`` returns the function that unsubscribes,
``emit(event)`` tells every listener (on the caller's thread: the services' loop). Events are frozen dataclasses."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("app.services")

EventT = TypeVar("EventT")


class EventHub(Generic[EventT]):
    def __init__(self) -> None:
        self._listeners: list[Callable[[EventT], None]] = []

    def subscribe(self, listener: Callable[[EventT], None]) -> Callable[[], None]:
        """Call ``listener`` with every event from now on; returns the function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def emit(self, event: EventT) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # one broken client must not stop the others hearing of it
                log.exception("a listener failed on %s", type(event).__name__)

    @property
    def listeners(self) -> int:
        return len(self._listeners)
