"""The stall watchdog's longest-stall figure, which ``bench history`` reports."""

from __future__ import annotations

import time

from app.ui.watchdog import StallWatchdog


def test_the_longest_stall_is_measured_and_reset(qtbot) -> None:
    watchdog = StallWatchdog(threshold_s=10.0)  # never logs here: only the figure is under test
    watchdog.start()
    try:
        qtbot.wait(100)
        idle = watchdog.reset_longest()
        assert idle < 0.05
        time.sleep(0.12)  # the Qt thread blocked
        qtbot.wait(60)
        longest = watchdog.reset_longest()
        assert 0.12 - 0.03 <= longest < 0.5  # how late the beat came: the stall, less up to one beat interval
        qtbot.wait(60)
        assert watchdog.longest_s < 0.05  # counting started afresh
    finally:
        watchdog.stop()
