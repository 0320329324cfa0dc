"""The stall watchdog's longest-stall figure, which ``bench history`` reports."""

from __future__ import annotations

import time

from app.ui.watchdog import StallWatchdog


def _stall(qtbot, watchdog: StallWatchdog, seconds: float) -> float:
    """Block the Qt thread for ``seconds``, wait for the late beat, and read (and reset) the longest stall."""
    watchdog.reset_longest()
    time.sleep(seconds)  # the Qt thread blocked: the stimulus, not a wait
    qtbot.waitUntil(lambda: watchdog.longest_s >= seconds * 0.75)
    return watchdog.reset_longest()


def test_the_longest_stall_is_measured_and_reset(qtbot) -> None:
    watchdog = StallWatchdog(threshold_s=10.0)  # never logs here: only the figure is under test
    watchdog.start()
    try:
        long = _stall(qtbot, watchdog, 0.5)
        assert watchdog.longest_s == 0.0  # counting starts afresh
        short = _stall(qtbot, watchdog, 0.1)
        # how late the beat came: the stall, less up to one beat interval (a load only adds to it)
        assert long >= 0.5 - 0.03 and short >= 0.1 - 0.03
        assert short < long  # the second figure is the second stall's, not the longest of both
    finally:
        watchdog.stop()
