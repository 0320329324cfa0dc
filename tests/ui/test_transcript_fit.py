"""A restored chat's rows hold their text: every message row on screen is at least as tall as its text laid out at
the row's real width — when the chat is restored at start-up, after a resize, after a font change and at 1.5× scale.

The restore is the case that clipped: the chat was measured while the transcript was hidden (the empty state shows
until the history is read), and a hidden text widget that was resized puts its old width back over the one it is
measured at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtWidgets import QApplication

from app.services.paths import app_paths
from tests.support.transcript_fit import row_problems, save_chat
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]


async def restored(make_window):
    count = save_chat(app_paths().ensure().conversations_db)
    window = await make_window()
    view = window.chat_panel.view
    await until(lambda: view.isVisible() and view.message_count() == count and view.live_rows())
    return window, view


async def problems_everywhere(view) -> list[str]:
    """Row problems at every scroll position, a page at a time from the top, then back at the bottom."""
    bar, found = view.verticalScrollBar(), []
    for value in [*range(0, bar.maximum(), max(1, bar.pageStep() // 2)), bar.maximum()]:
        bar.setValue(value)
        found += [f"at {value}: {p}" for p in row_problems(view)]
    return found


def test_a_restored_chat_holds_its_text(qloop, make_window):
    async def scenario():
        window, view = await restored(make_window)
        assert (window.width(), window.height()) == (1200, 780)
        assert row_problems(view) == []  # as restored, at the bottom, before anything else happens
        assert await problems_everywhere(view) == []

    qloop.run_until_complete(scenario())


def test_rows_follow_a_resize_and_a_font_change(qloop, make_window):
    app = QApplication.instance()
    sheet = app.styleSheet()

    async def scenario():
        window, view = await restored(make_window)
        for size in ((1000, 700), (1366, 768)):
            before = view.viewport().width()
            window.resize(*size)
            await until(lambda b=before: view.viewport().width() != b)
            assert await problems_everywhere(view) == [], size
        row = view.live_rows()[-1]
        item = view.message_widget(row)
        height = item.height()
        app.setStyleSheet("QTextBrowser#messageBody { font-size: 15pt; }")  # the texts only: the rows must follow
        await until(lambda: item.body.font().pointSizeF() == 15 and item.height() > height)
        assert await problems_everywhere(view) == []

    try:
        qloop.run_until_complete(scenario())
    finally:
        app.setStyleSheet(sheet)


def test_a_restored_chat_holds_its_text_at_scale_1_5(tmp_path):
    """QT_SCALE_FACTOR is read when the QApplication starts: a window of its own, in a process of its own."""
    home = tmp_path / "home"
    env = {**os.environ, "LLMW_HOME": str(home), "QT_SCALE_FACTOR": "1.5", "QT_QPA_PLATFORM": "offscreen"}
    report = tmp_path / "report.json"
    probe = [sys.executable, "-m", "tests.support.window_probe", str(report), "--size", "1200x780", "--saved-chat"]
    done = subprocess.run(probe, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["device_pixel_ratio"] == 1.5
    assert result["rows"]["restored"] == [] and result["rows"]["resized"] == []
    assert result["rows_checked"] >= 2
