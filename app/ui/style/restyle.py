"""Following a theme change safely. Qt delivers palette and style changes to every widget while it walks its list of
all widgets; a handler that builds or deletes widgets right then (a table reloaded, a pane rebuilt) leaves that walk
a dangling pointer, and the app crashes. Handlers ask for their work on the next event-loop turn instead, once
however many change events arrive (a switch sends a palette change, then a style change per widget)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer

PALETTE_EVENTS = frozenset({QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange})


class NextTurn:
    """``callback`` run once on the next event-loop turn, however often it is asked for before then; owned by
    ``owner``, so it never runs once the owner is gone."""

    def __init__(self, owner: QObject, callback: Callable[[], object]) -> None:
        self._timer = QTimer(owner)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(callback)
        self._callback = callback

    def __call__(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def pending(self) -> bool:
        return self._timer.isActive()

    def flush(self) -> None:
        """Run it now if it is waiting (for a caller that needs the result at once)."""
        if self._timer.isActive():
            self._timer.stop()
            self._callback()


def is_palette_change(event: QEvent) -> bool:
    return event.type() in PALETTE_EVENTS
