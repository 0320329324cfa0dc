"""The shipped launcher files: .desktop entry, AppStream metainfo, icons; validated with the freedesktop tools."""

from __future__ import annotations

import configparser
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app import __version__
from app.services.desktop_install import DESKTOP_ID, ICON_SIZES, desktop_entry, exec_quote
from app.ui.main_window import WINDOW_CLASS

RESOURCES = Path(__file__).resolve().parents[2] / "app" / "resources"
DESKTOP = RESOURCES / "desktop" / f"{DESKTOP_ID}.desktop"
METAINFO = RESOURCES / "desktop" / f"{DESKTOP_ID}.metainfo.xml"
ROOT = RESOURCES.parents[1]


def _entry(text: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(text)
    return parser["Desktop Entry"]


def _validate_desktop(path: Path) -> None:
    tool = shutil.which("desktop-file-validate")
    if tool is None:
        pytest.skip("desktop-file-validate is not installed (Debian: apt-get install desktop-file-utils)")
    done = subprocess.run([tool, str(path)], capture_output=True, text=True)
    problems = [line for line in done.stdout.splitlines() if "error:" in line or "warning:" in line]
    assert done.returncode == 0 and not problems, done.stdout


def test_desktop_entry_passes_desktop_file_validate():
    _validate_desktop(DESKTOP)


def test_installed_entry_with_awkward_launcher_path_passes_validate(tmp_path):
    """Exec rewritten to an absolute path with a space, a quote and a % still validates and round-trips."""
    launcher = '/opt/My Apps/100% "llm"/llm-workstation'
    path = tmp_path / f"{DESKTOP_ID}.desktop"
    path.write_text(desktop_entry(launcher))
    _validate_desktop(path)
    assert _entry(path.read_text())["Exec"] == exec_quote(launcher)


def test_desktop_entry_names_the_window_class_icon_and_categories():
    entry = _entry(DESKTOP.read_text())
    assert entry["Type"] == "Application"
    assert entry["StartupWMClass"] == WINDOW_CLASS  # Qt: WM_CLASS class = applicationName (set in app/ui/app.py)
    assert entry["Icon"] == DESKTOP_ID
    assert entry["Terminal"] == "false"
    assert entry["Exec"] == "llm-workstation"  # the GUI takes no file arguments: no %F
    assert {"Development", "Science", "ArtificialIntelligence"} <= set(entry["Categories"].split(";"))


def test_exec_quote_follows_the_desktop_entry_spec():
    assert exec_quote("/usr/bin/llm-workstation") == "/usr/bin/llm-workstation"
    assert exec_quote("/home/a b/bin/x") == '"/home/a b/bin/x"'
    # inside quotes " ` $ \\ get a backslash; then the string value escapes each backslash once more
    assert exec_quote('/x/$HOME/"q"') == '"/x/\\\\$HOME/\\\\"q\\\\""'
    assert exec_quote("/x/100%") == "/x/100%%"


def test_metainfo_passes_appstreamcli_validate():
    tool = shutil.which("appstreamcli")
    if tool is None:
        pytest.skip("appstreamcli is not installed (Debian: apt-get install appstream)")
    done = subprocess.run([tool, "validate", "--no-net", str(METAINFO)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith(("E:", "W:"))], done.stdout


def test_metainfo_matches_the_desktop_entry_and_the_version():
    component = ET.parse(METAINFO).getroot()
    assert component.findtext("id") == DESKTOP_ID
    launchable = component.find("launchable")
    assert launchable is not None and launchable.text == f"{DESKTOP_ID}.desktop"
    assert component.findtext("provides/binary") == "llm-workstation"
    releases = component.findall("releases/release")
    assert releases and releases[0].get("version") == __version__, "add a <release> for the new version"
    assert component.find("content_rating") is not None


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_icons_exist_in_every_size_and_are_drawn(qapp):
    from PySide6.QtGui import QImage

    for size in ICON_SIZES:
        path = RESOURCES / "icons" / f"llm-workstation-{size}.png"
        assert _png_size(path.read_bytes()) == (size, size)
        image = QImage(str(path))
        centre, corner = image.pixelColor(size // 2, size // 2), image.pixelColor(0, 0)
        assert centre.alpha() == 255 and corner.alpha() < 255  # drawn, with the rounded transparent corner


def test_windows_and_macos_icons_hold_png_images():
    ico = (ROOT / "packaging" / "windows" / "llm-workstation.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1) and count >= 5
    size_byte, _, _, _, _, _, length, offset = struct.unpack("<BBBBHHII", ico[6 + 16 * (count - 1) : 6 + 16 * count])
    assert size_byte == 0 and _png_size(ico[offset : offset + length]) == (256, 256)  # 0 means 256
    icns = (ROOT / "packaging" / "macos" / "llm-workstation.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)
    assert b"ic09" in icns and b"icp4" in icns


def test_window_icon_carries_the_rendered_sizes(qapp):
    from app.ui.app import window_icon
    from app.ui.resources import app_icon_path

    sizes = {s.width() for s in window_icon(app_icon_path()).availableSizes()}
    assert set(ICON_SIZES) <= sizes


def test_gui_sets_desktop_id_window_class_and_icon(tmp_path):
    """In its own process (run_gui makes the QApplication): the names a desktop matches the window by."""
    import os
    import sys

    probe = (
        "from app.ui.app import run_gui; assert run_gui(smoke=True) == 0\n"
        "from PySide6.QtWidgets import QApplication; a = QApplication.instance()\n"
        "print(a.desktopFileName(), a.applicationName(), len(a.windowIcon().availableSizes()))"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", LLMW_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    desktop_id, app_name, icon_count = done.stdout.split()[-3:]
    assert (desktop_id, app_name) == (DESKTOP_ID, WINDOW_CLASS)
    assert int(icon_count) >= len(ICON_SIZES)
