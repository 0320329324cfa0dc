"""Qt's own warnings in UI tests: a message handler records every QtWarningMsg, QtCriticalMsg and QtFatalMsg;
a test fails on one it did not declare (``expect(pattern)``) unless it is known platform noise (``HARMLESS``).

Qt reports misuse it survives (a bad connection, a painter on a dead device, a timer started from the wrong
thread) only through these messages, so a test that ignores them lets such bugs through."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from PySide6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler

# Messages the offscreen platform plugin prints for calls a real desktop honours: not a bug in the app.
# Each entry says why it is harmless; match as narrowly as the message allows.
HARMLESS: tuple[tuple[str, str], ...] = (
    # QWidget.show() passes size hints to the window manager; offscreen has none (QPlatformWindow's default).
    (r"^This plugin does not support propagateSizeHints\(\)$", "offscreen has no window manager"),
    # A popup (QMenu.popup/exec, a combo box's list) raises its window and grabs the keyboard; offscreen has
    # no window stack and no keyboard, and the popup works the same without either.
    (r"^This plugin does not support raise\(\)$", "offscreen has no window stack"),
    (r"^This plugin does not support grabbing the keyboard$", "offscreen has no keyboard"),
)

_LEVELS = {
    QtMsgType.QtWarningMsg: "warning",
    QtMsgType.QtCriticalMsg: "critical",
    QtMsgType.QtFatalMsg: "fatal",
}


@dataclass(frozen=True)
class QtMessage:
    level: str
    text: str
    category: str

    def __str__(self) -> str:
        category = f" [{self.category}]" if self.category and self.category != "default" else ""
        return f"Qt {self.level}{category}: {self.text}"


class QtMessageRecorder:
    """Installed for one test: ``messages`` are what Qt warned about; ``expect`` declares one as intended."""

    def __init__(self) -> None:
        self.messages: list[QtMessage] = []
        self._expected: list[re.Pattern[str]] = []
        self._harmless = [re.compile(pattern) for pattern, _why in HARMLESS]
        self._previous = None

    def install(self) -> None:
        self._previous = qInstallMessageHandler(self._handle)

    def uninstall(self) -> None:
        qInstallMessageHandler(self._previous)

    def expect(self, pattern: str) -> None:
        """The test means to provoke a Qt warning matching ``pattern`` (a regex, searched); it must occur."""
        self._expected.append(re.compile(pattern))

    def _handle(self, mode: QtMsgType, context: QMessageLogContext, text: str) -> None:
        level = _LEVELS.get(mode)
        if level is None:  # debug and info messages are not findings
            return
        message = QtMessage(level, text, context.category or "")
        self.messages.append(message)
        if mode == QtMsgType.QtFatalMsg:  # Qt aborts right after this returns: say why first
            print(message, file=sys.__stderr__, flush=True)

    def problems(self) -> list[str]:
        """Undeclared messages, and declared ones that never came; empty when the test held the line."""
        found = [
            str(m)
            for m in self.messages
            if not any(p.search(m.text) for p in self._expected) and not any(p.search(m.text) for p in self._harmless)
        ]
        missing = [
            f"expected a Qt warning matching {p.pattern!r}; none came"
            for p in self._expected
            if not any(p.search(m.text) for m in self.messages)
        ]
        return found + missing
