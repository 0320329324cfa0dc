"""Logs every stall of the Qt thread longer than a threshold, with the stack that caused it."""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback

from PySide6.QtCore import QObject, QTimer

log = logging.getLogger("app.ui.watchdog")

STALL_THRESHOLD_S = 0.1
HEARTBEAT_MS = 25


class StallWatchdog(QObject):
    """A GUI-thread timer beats; a daemon thread notices when the beat is late and logs the GUI stack."""

    def __init__(self, threshold_s: float = STALL_THRESHOLD_S, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.threshold_s = threshold_s
        self.stalls = 0
        self.longest_s = 0.0  # the longest stall seen (how late a beat came), for benchmarks
        self._beat = time.monotonic()
        self._gui_thread = threading.get_ident()
        self._stop = threading.Event()
        self._timer = QTimer(self)
        self._timer.setInterval(HEARTBEAT_MS)
        self._timer.timeout.connect(self._on_beat)
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)

    def start(self) -> None:
        self._beat = time.monotonic()
        self._timer.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._timer.stop()

    def _on_beat(self) -> None:
        now = time.monotonic()
        self.longest_s = max(self.longest_s, now - self._beat - HEARTBEAT_MS / 1000)
        self._beat = now

    def reset_longest(self) -> float:
        """The longest stall so far (seconds), and start counting afresh."""
        longest, self.longest_s = self.longest_s, 0.0
        self._beat = time.monotonic()
        return longest

    def _watch(self) -> None:
        reported_beat = None
        while not self._stop.wait(self.threshold_s / 2):
            beat = self._beat
            late = time.monotonic() - beat - HEARTBEAT_MS / 1000
            if late > self.threshold_s and beat != reported_beat:
                reported_beat = beat
                self.stalls += 1
                frame = sys._current_frames().get(self._gui_thread)
                stack = "".join(traceback.format_stack(frame)) if frame else "(no stack)"
                log.warning("The window was blocked for more than %.0f ms, here:\n%s", late * 1000, stack)
