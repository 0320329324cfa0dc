"""``llm-workstation install-desktop``: XDG folders, Exec at the running launcher, --uninstall, bad input."""

from __future__ import annotations

import configparser
import os
import shutil
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.services import desktop_install
from app.services.desktop_install import DESKTOP_ID, ICON_SIZES, DesktopTargets, current_launcher, xdg_data_home

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="freedesktop menus are Linux-only")


def _exec_of(desktop_file: Path) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(desktop_file)
    return parser["Desktop Entry"]["Exec"]


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    home = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home


def test_installs_entry_icons_and_metainfo_into_xdg_data_home(data_home, capsys):
    assert main(["install-desktop"]) == 0
    targets = DesktopTargets(data_home)
    for path in targets.all_files():
        assert path.is_file() and path.stat().st_size > 0, path
    assert targets.desktop_file == data_home / "applications" / f"{DESKTOP_ID}.desktop"
    for size in ICON_SIZES:
        assert (data_home / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{DESKTOP_ID}.png").is_file()
    assert (data_home / "metainfo" / f"{DESKTOP_ID}.metainfo.xml").is_file()
    launcher = Path(_exec_of(targets.desktop_file))
    assert launcher.is_absolute() and launcher == current_launcher()
    assert os.access(launcher, os.X_OK)
    out = capsys.readouterr().out
    assert f"it starts {launcher}" in out
    if shutil.which("update-desktop-database"):
        assert "ran update-desktop-database" in out
        assert (data_home / "applications" / "mimeinfo.cache").is_file()  # the tool really ran there
    if shutil.which("gtk-update-icon-cache"):
        assert (data_home / "icons" / "hicolor" / "icon-theme.cache").is_file()


def test_installed_launcher_really_starts_the_app(data_home, capsys):
    """The Exec line runs: ``<launcher> --version`` from the installed entry."""
    import subprocess

    assert main(["install-desktop", "--no-refresh"]) == 0
    launcher = _exec_of(DesktopTargets(data_home).desktop_file)
    done = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("llm-workstation ")


def test_uninstall_removes_only_what_install_wrote(data_home, capsys):
    other = data_home / "applications" / "org.example.Other.desktop"
    other.parent.mkdir(parents=True)
    other.write_text("[Desktop Entry]\nType=Application\nName=Other\nExec=other\n")
    assert main(["install-desktop", "--no-refresh"]) == 0
    assert main(["install-desktop", "--uninstall", "--no-refresh"]) == 0
    assert not any(path.exists() for path in DesktopTargets(data_home).all_files())
    assert other.read_text().startswith("[Desktop Entry]")
    capsys.readouterr()
    assert main(["install-desktop", "--uninstall"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


def test_prefix_installs_under_prefix_share(tmp_path, data_home, capsys):
    launcher = tmp_path / "bin" / "my launcher"
    launcher.parent.mkdir()
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
    prefix = tmp_path / "usr-local"
    assert main(["install-desktop", "--prefix", str(prefix), "--exec", str(launcher), "--no-refresh"]) == 0
    entry = prefix / "share" / "applications" / f"{DESKTOP_ID}.desktop"
    assert _exec_of(entry) == f'"{launcher}"'  # quoted: the path has a space
    assert not data_home.exists()


def test_prefix_that_is_a_file_is_bad_input(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["install-desktop", "--prefix", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-workstation: ") and "is a file, not a folder" in err and "Traceback" not in err


def test_exec_that_is_not_a_program_is_bad_input(tmp_path, data_home, capsys):
    assert main(["install-desktop", "--exec", str(tmp_path / "missing")]) == 2
    assert "not an executable file" in capsys.readouterr().err
    assert not data_home.exists()  # nothing half-written


def test_unwritable_folder_is_a_runtime_failure_with_a_message(monkeypatch, data_home, capsys):
    def refuse(target: Path, data: bytes, result: object) -> None:
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(desktop_install, "_write", refuse)
    assert main(["install-desktop", "--no-refresh"]) == 1
    err = capsys.readouterr().err
    assert "Cannot write" in err and "Permission denied" in err and "Traceback" not in err


def test_launcher_not_found_tells_what_to_do(monkeypatch, tmp_path, data_home, capsys):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["install-desktop"]) == 2
    assert "--exec PATH" in capsys.readouterr().err


def test_frozen_bundle_installs_its_own_executable(monkeypatch, tmp_path):
    exe = tmp_path / "llm-workstation"
    exe.write_text("")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(exe))
    assert current_launcher() == exe.resolve()


def test_xdg_data_home_rules(tmp_path):
    assert xdg_data_home({"XDG_DATA_HOME": str(tmp_path), "HOME": "/h"}) == tmp_path
    assert xdg_data_home({"XDG_DATA_HOME": "relative/dir", "HOME": "/h"}) == Path("/h/.local/share")
    assert xdg_data_home({"HOME": "/h"}) == Path("/h/.local/share")


def test_install_never_writes_through_a_link_planted_in_the_target_folder(data_home, tmp_path, capsys):
    """The files are written to fresh temporary names, so a symlink someone left at a predictable name
    (``<entry>.part``) cannot redirect the write to a file the app does not own."""
    outside = tmp_path / "not-ours.txt"
    outside.write_text("keep me")
    applications = data_home / "applications"
    applications.mkdir(parents=True)
    (applications / f"{DESKTOP_ID}.desktop.part").symlink_to(outside)
    assert main(["install-desktop"]) == 0
    assert outside.read_text() == "keep me"
    assert (applications / f"{DESKTOP_ID}.desktop").is_file()
    assert not list(applications.glob(f".{DESKTOP_ID}.desktop.*.part"))


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is missing (not a Debian-family system)")
def test_package_owner_lookup_uses_dpkg():
    owner = desktop_install._package_owning(Path("/usr/bin/dpkg"))
    assert owner == "dpkg"
    assert desktop_install._package_owning(Path("/nonexistent/thing.desktop")) is None


def test_uninstall_refuses_files_a_package_installed(data_home, capsys, monkeypatch):
    assert main(["install-desktop"]) == 0
    monkeypatch.setattr(desktop_install, "_package_owning", lambda path: "llm-workstation")
    assert main(["install-desktop", "--uninstall"]) == 2
    assert "apt remove llm-workstation" in capsys.readouterr().err
    assert (data_home / "applications" / f"{DESKTOP_ID}.desktop").is_file()
