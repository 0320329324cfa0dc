"""The check before Qt starts: a missing libxcb-cursor or no display is one clear line and exit 1, not Qt's abort."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.ui.platform_check import INSTALL_XCB_CURSOR, NO_DISPLAY, platform_problem


def _missing(_name: str) -> None:
    return None


def _present(name: str) -> str:
    return f"lib{name}.so.0"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"DISPLAY": ":0"}, INSTALL_XCB_CURSOR),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, INSTALL_XCB_CURSOR),
        ({}, NO_DISPLAY),
        ({"QT_QPA_PLATFORM": "xcb"}, NO_DISPLAY),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, None),  # Qt picks wayland: xcb is not loaded
        ({"WAYLAND_DISPLAY": "wayland-0"}, None),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, None),
        ({"QT_QPA_PLATFORM": "wayland"}, None),
    ],
)
def test_a_missing_xcb_cursor_library_is_named_only_where_xcb_would_load(environ, expected):
    assert platform_problem(environ, _missing, "linux") == expected


def test_nothing_is_said_when_the_library_is_there_or_not_on_linux():
    assert platform_problem({"DISPLAY": ":0"}, _present, "linux") is None
    assert platform_problem({}, _missing, "darwin") is None


def test_the_launcher_prints_one_line_and_exits_1():
    script = (
        "import sys, ctypes.util; ctypes.util.find_library = lambda name: None; "
        "from app.cli import main; sys.exit(main([]))"
    )
    env = {"PATH": "/usr/bin:/bin", "DISPLAY": ":99", "HOME": "/tmp", "LLMW_HOME": "/tmp/llmw-platform-check"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "libxcb-cursor0" in lines[0] and "sudo apt install" in lines[0]
    assert "PySide6" not in done.stderr
