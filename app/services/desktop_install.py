"""Put the app into the desktop menu: the .desktop entry, the icons and the AppStream metainfo in XDG folders.

``llm-workstation install-desktop`` writes them under ``$XDG_DATA_HOME`` (default ``~/.local/share``), or under
``PREFIX/share`` with ``--prefix``; ``--uninstall`` removes exactly those files. The entry's Exec is the absolute
path of the launcher that runs now (the venv's ``llm-workstation`` script, or a frozen bundle's executable).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from app.core.errors import AppError, ErrorKind

log = logging.getLogger("app.services.desktop_install")

DESKTOP_ID = "io.github.llmworkstation.LLMWorkstation"
LAUNCHER_NAME = "llm-workstation"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
_TOOL_TIMEOUT_S = 30
# Characters that force quoting of an Exec argument (Desktop Entry Specification, "The Exec key").
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


class DesktopInstallError(AppError):
    """A problem the user can fix; the message says how. Kind: invalid input when the user named a wrong path
    (``setting`` says which), unavailable when a folder cannot be written."""

    kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class DesktopTargets:
    """Where each file goes under one XDG data folder (``.../share``)."""

    data_dir: Path

    @property
    def desktop_file(self) -> Path:
        return self.data_dir / "applications" / f"{DESKTOP_ID}.desktop"

    @property
    def metainfo_file(self) -> Path:
        return self.data_dir / "metainfo" / f"{DESKTOP_ID}.metainfo.xml"

    @property
    def icon_theme_dir(self) -> Path:
        return self.data_dir / "icons" / "hicolor"

    def icon_files(self) -> dict[str, Path]:
        """Target path by source name: each PNG size and the scalable SVG."""
        apps = {f"{LAUNCHER_NAME}-{n}.png": self.icon_theme_dir / f"{n}x{n}" / "apps" for n in ICON_SIZES}
        targets = {name: folder / f"{DESKTOP_ID}.png" for name, folder in apps.items()}
        targets[f"{LAUNCHER_NAME}.svg"] = self.icon_theme_dir / "scalable" / "apps" / f"{DESKTOP_ID}.svg"
        return targets

    def all_files(self) -> list[Path]:
        return [self.desktop_file, self.metainfo_file, *self.icon_files().values()]


@dataclass
class DesktopResult:
    """What an install or uninstall did: files written/removed, cache tools run, and any warnings."""

    files: list[Path] = field(default_factory=list)
    tools_run: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def xdg_data_home(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME`` when set to an absolute path (the spec ignores relative ones), else ~/.local/share."""
    value = env.get("XDG_DATA_HOME", "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path(env.get("HOME") or Path.home()) / ".local" / "share"


def current_launcher() -> Path:
    """The absolute path of the launcher running now: the frozen executable, or the ``llm-workstation`` script
    installed next to this interpreter (a venv's bin/), or the one on PATH."""
    if getattr(sys, "frozen", False):
        return Path(sys.executable).resolve()
    beside = Path(sys.executable).parent / LAUNCHER_NAME
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside.absolute()
    found = shutil.which(LAUNCHER_NAME)
    if found:
        return Path(found).absolute()
    raise DesktopInstallError(
        f"Cannot find the {LAUNCHER_NAME} launcher: install the app with pip (it creates the launcher), "
        "or name the program to start.",
        kind=ErrorKind.INVALID_INPUT,
        setting="exec",
    )


def exec_quote(path: str) -> str:
    """One Exec argument, quoted and escaped as the Desktop Entry Specification requires."""
    if any(ch in _EXEC_RESERVED for ch in path):
        inner = "".join("\\" + ch if ch in '"`$\\' else ch for ch in path)
        path = f'"{inner}"'
    # The key's value is itself a string: a backslash is escaped once more, a % (field codes) is doubled.
    return path.replace("\\", "\\\\").replace("%", "%%")


def desktop_entry(launcher: Path | str | None = None) -> str:
    """The shipped .desktop text; with ``launcher``, Exec and TryExec point at that absolute path."""
    text = _resource("desktop", f"{DESKTOP_ID}.desktop").read_text(encoding="utf-8")
    if launcher is None:
        return text
    quoted = exec_quote(str(launcher))
    lines = []
    for line in text.splitlines():
        if line.startswith("Exec="):
            line = f"Exec={quoted}"
        elif line.startswith("TryExec="):
            line = f"TryExec={str(launcher).replace(chr(92), chr(92) * 2)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def metainfo_text() -> str:
    return _resource("desktop", f"{DESKTOP_ID}.metainfo.xml").read_text(encoding="utf-8")


def install(data_dir: Path, launcher: Path, *, run_tools: bool = True) -> DesktopResult:
    """Write the entry, icons and metainfo under ``data_dir`` (a ``share`` folder), then refresh the desktop
    database and icon cache when those tools exist. Raises :class:`DesktopInstallError` when it cannot write."""
    targets = DesktopTargets(_usable_dir(data_dir))
    result = DesktopResult()
    try:
        _write(targets.desktop_file, desktop_entry(launcher).encode("utf-8"), result)
        _write(targets.metainfo_file, metainfo_text().encode("utf-8"), result)
        for source, target in targets.icon_files().items():
            _write(target, _resource("icons", source).read_bytes(), result)
    except OSError as exc:
        raise DesktopInstallError(f"Cannot write {exc.filename or data_dir}: {exc.strerror or exc}.") from exc
    if run_tools:
        _refresh_caches(targets, result)
    return result


def uninstall(data_dir: Path, *, run_tools: bool = True) -> DesktopResult:
    """Remove the files :func:`install` writes (and nothing else) from ``data_dir``."""
    targets = DesktopTargets(Path(data_dir).expanduser())
    result = DesktopResult()
    owner = _package_owning(targets.desktop_file)
    if owner:
        raise DesktopInstallError(
            f"{targets.desktop_file} belongs to the installed package {owner!r}: remove it with your package "
            f"manager (e.g. `apt remove {owner}`) instead.",
            kind=ErrorKind.INVALID_INPUT,
        )
    for path in targets.all_files():
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise DesktopInstallError(f"Cannot remove {path}: {exc.strerror or exc}.") from exc
        result.files.append(path)
    if run_tools and result.files:
        _refresh_caches(targets, result)
    return result


def _package_owning(path: Path) -> str | None:
    """The Debian package that installed ``path`` (``dpkg -S``), or None (not dpkg-managed, or no dpkg)."""
    dpkg = shutil.which("dpkg")
    if dpkg is None or not path.exists():
        return None
    try:
        found = subprocess.run([dpkg, "-S", str(path)], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if found.returncode != 0 or ":" not in found.stdout:
        return None
    return found.stdout.split(":", 1)[0].strip() or None


def _resource(*parts: str) -> Path:
    return Path(str(files("app").joinpath("resources", *parts)))


def _usable_dir(data_dir: Path) -> Path:
    data_dir = Path(data_dir).expanduser()
    blocked = next((p for p in (data_dir, *data_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise DesktopInstallError(
            f"{blocked} is a file, not a folder: choose another folder.", kind=ErrorKind.INVALID_INPUT, setting="prefix"
        )
    return data_dir


def _write(target: Path, data: bytes, result: DesktopResult) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:  # a fresh file: never writes through a link planted at a fixed name
            out.write(data)
        os.chmod(partial, 0o644)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    result.files.append(target)


def _refresh_caches(targets: DesktopTargets, result: DesktopResult) -> None:
    """update-desktop-database and gtk-update-icon-cache, when installed; a failure is a warning only."""
    commands = {
        "update-desktop-database": [str(targets.desktop_file.parent)],
        # -t: a user's hicolor folder has no index.theme; -f: rebuild even when it looks up to date.
        "gtk-update-icon-cache": ["-f", "-t", "-q", str(targets.icon_theme_dir)],
    }
    for tool, args in commands.items():
        program = shutil.which(tool)
        if program is None or not Path(args[-1]).is_dir():
            continue
        try:
            done = subprocess.run([program, *args], capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            result.warnings.append(f"{tool} did not run: {exc}")
            continue
        result.tools_run.append(tool)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            result.warnings.append(f"{tool} exited with {done.returncode}: {detail[-1] if detail else 'no output'}")
