"""Read-only views of a process's output: a bounded log tail, and start-up phases with their seconds."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QPlainTextEdit, QWidget

from app.core.vllm.log import Phase, PhaseEvent

DEFAULT_MAX_LINES = 500


class LogTail(QPlainTextEdit):
    """The last ``max_lines`` lines, in a fixed-width font; follows new lines while scrolled to the bottom."""

    def __init__(self, max_lines: int = DEFAULT_MAX_LINES, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setMaximumBlockCount(max_lines)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setUndoRedoEnabled(False)

    def add_line(self, line: str) -> None:
        bar = self.verticalScrollBar()
        following = bar.value() >= bar.maximum() - 2
        self.appendPlainText(line)
        if following:
            bar.setValue(bar.maximum())

    def set_lines(self, lines: Iterable[str]) -> None:
        self.setPlainText("\n".join(lines))
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def lines(self) -> list[str]:
        return self.toPlainText().splitlines()


class PhaseList(QListWidget):
    """One row per start-up phase: when it began and how long it took; the current one counts its seconds."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.events: list[PhaseEvent] = []
        self._failed = ""

    def clear_phases(self) -> None:
        self.events = []
        self._failed = ""
        self.clear()

    def add_phase(self, event: PhaseEvent, now_s: float | None = None) -> None:
        self.events.append(event)
        self.addItem("")
        self.tick(now_s if now_s is not None else event.at_s)

    def fail(self, reason: str = "stopped") -> None:
        """The server stopped: the phase it was in did not finish."""
        self._failed = reason
        self.tick(None)

    def phases(self) -> list[Phase]:
        return [event.phase for event in self.events]

    def tick(self, now_s: float | None) -> None:
        """Rewrite the rows; the phase in progress shows the seconds spent in it so far (``now_s``: since start)."""
        for row, event in enumerate(self.events):
            later = self.events[row + 1].at_s if row + 1 < len(self.events) else None
            item = self.item(row)
            if item is not None:
                item.setText(_row_text(event, later, now_s, self._failed))


def _row_text(event: PhaseEvent, next_at: float | None, now_s: float | None, failed: str) -> str:
    at = f"at {event.at_s:5.1f} s"
    if event.phase is Phase.READY:
        return f"✗  ready after {event.at_s:.1f} s, then {failed}" if failed else f"●  ready after {event.at_s:.1f} s"
    if next_at is not None:
        return f"✓  {event.phase}  —  {at}, took {max(0.0, next_at - event.at_s):.1f} s"
    if failed:
        return f"✗  {event.phase}  —  {at}, {failed}"
    so_far = f", {max(0.0, now_s - event.at_s):.0f} s so far" if now_s is not None else ""
    return f"…  {event.phase}  —  {at}{so_far}"
