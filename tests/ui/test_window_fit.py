"""The window fits the screen it opens on: the first time sized to it (1200×780 at most, never larger than its free
area), later as the person left it — size, place, maximized, panes — brought back onto a smaller screen whole. The
chat's settings drawer starts closed on a window narrower than ~1200 px.

The screens are the offscreen platform's (a config file gives their size), one process per start: a screen's size is
read when the QApplication starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QByteArray, QMargins, QRect

from app.ui import window_state
from app.ui.window_state import WindowState, first_rect, fit_rect
from tests.support.window_probe import offscreen_screen

ROOT = Path(__file__).resolve().parents[2]
FRAME = QMargins(4, 32, 4, 4)


def start(tmp_path: Path, screen: tuple[int, int], *options: str) -> dict:
    """Start the window on a ``screen`` of that size (the state kept in ``tmp_path``), report, close it."""
    platform = offscreen_screen(tmp_path, *screen)
    env = {**os.environ, "LLMW_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": platform}
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "tests.support.window_probe", str(report), "--restore", *options]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text(encoding="utf-8"))


def inside(inner: list[int], outer: list[int]) -> bool:
    return QRect(*outer).contains(QRect(*inner))


def assert_fits_screen(report: dict) -> None:
    screen = report["available"]
    assert inside(report["frame"], screen), report
    for part in ("send", "status"):
        assert report[f"{part}_visible"] and inside(report[part], screen), (part, report)
        assert inside(report[part], report["geometry"]), (part, report)


# -- the rules ------------------------------------------------------------------------------------------------------


def test_a_first_window_takes_the_default_size_on_a_large_screen():
    rect = first_rect(QRect(0, 0, 1920, 1080), FRAME)
    assert (rect.width(), rect.height()) == (1200, 780)
    assert QRect(0, 0, 1920, 1080).marginsRemoved(FRAME).contains(rect)


@pytest.mark.parametrize("screen", [QRect(0, 0, 1024, 700), QRect(0, 0, 800, 600), QRect(1920, 24, 1366, 744)])
def test_a_first_window_never_exceeds_a_small_screen(screen):
    rect = first_rect(screen, FRAME)
    assert screen.marginsRemoved(FRAME).marginsRemoved(window_state.SCREEN_MARGIN).contains(rect)
    assert rect.width() == min(1200, screen.width() - 56) and rect.height() == screen.height() - 84  # a margin around


def test_a_saved_place_is_brought_onto_the_screen_and_shrunk_to_it():
    screen = QRect(0, 0, 1024, 700)
    big = fit_rect(QRect(300, 200, 1920, 1080), screen, FRAME)
    assert screen.marginsRemoved(FRAME) == big
    off = fit_rect(QRect(1500, 900, 800, 500), screen, FRAME)  # on a screen to the right that is gone
    assert screen.marginsRemoved(FRAME).contains(off) and off.size() == QRect(0, 0, 800, 500).size()
    kept = QRect(50, 60, 700, 500)
    assert fit_rect(kept, screen, FRAME) == kept  # what fits stays where the person put it


def test_the_state_file_round_trips(tmp_path):
    path = window_state.state_file(tmp_path)
    assert window_state.load(path) == WindowState()  # nothing saved yet
    state = WindowState(QRect(10, 20, 900, 600), True, {"chat_splitter": QByteArray(b"\x00\xffsizes")})
    window_state.save(path, state)
    assert window_state.load(path) == state


# -- real windows on screens of a given size ------------------------------------------------------------------------


def test_the_first_window_fits_a_small_laptop_screen_with_the_drawer_closed(tmp_path):
    report = start(tmp_path, (1024, 700))
    assert_fits_screen(report)
    assert not report["drawer_open"]  # below ~1200 px the transcript gets the width


def test_the_first_window_on_a_wider_screen_opens_the_drawer(tmp_path):
    report = start(tmp_path, (1366, 768))
    assert_fits_screen(report)
    assert report["geometry"][2] >= 1200 and report["drawer_open"]


def test_size_place_and_panes_come_back_fitted_to_a_smaller_screen(tmp_path):
    first = start(tmp_path, (1920, 1080), "--geometry", "40,60,1860,1000", "--chats-width", "260")
    assert first["before_close"]["geometry"] == [40, 60, 1860, 1000]
    again = start(tmp_path, (1920, 1080))
    assert again["geometry"] == [40, 60, 1860, 1000] and again["splitter"][0] == 260  # as left
    small = start(tmp_path, (1024, 700))
    assert_fits_screen(small)
    assert small["geometry"][2] > 1000 and small["splitter"][0] == 260  # as much of the screen as fits


def test_a_maximized_window_comes_back_maximized(tmp_path):
    start(tmp_path, (1366, 768), "--maximize")
    report = start(tmp_path, (1366, 768))
    assert report["maximized"]
    assert_fits_screen(report)
