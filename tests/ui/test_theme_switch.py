"""Live theme switches after every page has been shown (the Library with a model listed and chosen): the app stays
alive, and what caches colours follows — the transcript, the charts, the icons. Once in a real X window (a program
on Xvfb, so that a crash is a dead process with its exit status), once offscreen in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.theme_probe import show_every_page, switch_many
from tests.support.waiting import until
from tests.support.xvfb import xvfb_display

REPO = Path(__file__).resolve().parents[2]
SWITCHES = 10


def assert_follows_the_theme(results: list[dict], switches: int) -> None:
    """After each switch to dark: a dark transcript with light text, dark charts, light icons; the reverse after
    each switch to light."""
    assert [r["theme"] for r in results] == ["dark" if i % 2 == 0 else "light" for i in range(switches)]
    for turn, result in enumerate(results):
        dark = result["theme"] == "dark"
        assert result["ink_pixels"] > 200, (turn, result)  # the messages are drawn
        if dark:
            assert result["background"] < 80 and result["lighter_share"] > 0.9, (turn, result)
            assert result["charts"] and max(result["charts"]) < 80, (turn, result)
            assert result["nav_icon"] > 170, (turn, result)
        else:
            assert result["background"] > 200 and result["lighter_share"] < 0.1, (turn, result)
            assert result["charts"] and min(result["charts"]) > 200, (turn, result)
            assert 0 <= result["nav_icon"] < 90, (turn, result)


@pytest.mark.slow
def test_ten_switches_in_a_real_window(model_folder, tmp_path):
    shots = tmp_path / "shots"
    shots.mkdir()
    result_file = tmp_path / "result.json"
    with xvfb_display() as display:
        env = dict(
            os.environ,
            DISPLAY=display,
            QT_QPA_PLATFORM="xcb",
            LLMW_PROBE_MODELS=str(model_folder),
            LLMW_PROBE_SWITCHES=str(SWITCHES),
        )
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-m", "tests.support.theme_probe", str(result_file), str(shots)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-4000:]}"
    assert_follows_the_theme(json.loads(result_file.read_text()), SWITCHES)
    assert len(list(shots.glob("transcript-*.png"))) == SWITCHES


def test_switches_offscreen_keep_the_app_alive_and_are_saved(qloop, make_window, model_folder):
    from PySide6.QtWidgets import QApplication

    from app.ui.style.theme import apply_style_sheet
    from tests.support.page_frame import themed

    app = QApplication.instance()

    async def scenario():
        window = await make_window()
        window.workstation.settings.model_folders = [str(model_folder)]
        apply_style_sheet(app)  # as the app does once its window is built
        style = app.style()
        await show_every_page(window)
        results = await switch_many(window, 4)
        assert_follows_the_theme(results, 4)
        assert app.style() is style  # only the palette and the style sheet changed
        settings_file = window.workstation.paths.settings_file
        await until(lambda: settings_file.exists() and json.loads(settings_file.read_text())["theme"] == "light")
        library = window.models_panel
        assert library.selected_entry() is not None  # the chosen model is still chosen after the reloads

    with themed("light"):
        qloop.run_until_complete(scenario())
