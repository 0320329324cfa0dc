"""Before Qt starts: is there a display, and can Qt's xcb plugin load? Qt's own failure is a core dump with
"Reinstalling the application may fix this problem"; this says what to install instead.

Qt ≥ 6.5's xcb plugin needs libxcb-cursor, which several distributions do not install with a desktop. Under
Wayland (Qt picks its wayland plugin) or offscreen nothing here applies."""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping

INSTALL_XCB_CURSOR = (
    "Qt cannot start: the library libxcb-cursor is missing. Install it: sudo apt install libxcb-cursor0 "
    "(Fedora: sudo dnf install xcb-util-cursor; Arch: sudo pacman -S xcb-util-cursor), then start again."
)
NO_DISPLAY = (
    "No display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset). The command-line verbs work "
    "without one: llm-workstation --help."
)


def platform_problem(
    environ: Mapping[str, str] | None = None,
    find_library: Callable[[str], str | None] = ctypes.util.find_library,
    platform: str = sys.platform,
) -> str | None:
    """Why the window cannot open on this desktop, in one line; None when Qt should start."""
    env = os.environ if environ is None else environ
    if not platform.startswith("linux"):
        return None
    chosen = env.get("QT_QPA_PLATFORM", "").split(":")[0].split(";")[0].strip().lower()
    if chosen and chosen != "xcb":
        return None  # offscreen, wayland, minimal, …: the xcb plugin is not loaded
    if not chosen and env.get("WAYLAND_DISPLAY"):
        return None  # Qt picks its wayland plugin
    if not env.get("DISPLAY"):
        return NO_DISPLAY
    if find_library("xcb-cursor") is None:
        return INSTALL_XCB_CURSOR
    return None
