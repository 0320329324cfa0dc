from __future__ import annotations

import logging
import time

from app.ui.watchdog import StallWatchdog


def blocking_slot():
    time.sleep(0.35)


def test_stall_is_logged_with_stack(qtbot, caplog):
    watchdog = StallWatchdog(threshold_s=0.1)
    watchdog.start()
    try:
        qtbot.wait(100)
        with caplog.at_level(logging.WARNING, logger="app.ui.watchdog"):
            blocking_slot()
            qtbot.waitUntil(lambda: watchdog.stalls >= 1)
        assert watchdog.stalls == 1
        message = caplog.records[-1].getMessage()
        assert "blocked for more than" in message and "blocking_slot" in message
    finally:
        watchdog.stop()


def test_idle_window_is_not_reported(qtbot):
    watchdog = StallWatchdog(threshold_s=0.25)
    watchdog.start()
    try:
        qtbot.wait(400)
        assert watchdog.stalls == 0
    finally:
        watchdog.stop()
