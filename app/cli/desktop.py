"""``llm-workstation install-desktop [--uninstall] [--prefix DIR] [--exec PATH]``: the app in the desktop menu."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.cli.common import EXIT_BAD_INPUT, fail, fail_error
from app.core.errors import ErrorKind
from app.services.desktop_install import (
    DesktopInstallError,
    DesktopResult,
    current_launcher,
    install,
    uninstall,
    xdg_data_home,
)

VERBS = ("install-desktop",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "install-desktop",
        help="add the app to the desktop menu (.desktop entry, icons, AppStream metainfo in your XDG folders)",
    )
    parser.add_argument("--uninstall", action="store_true", help="remove what install-desktop added")
    parser.add_argument(
        "--prefix",
        metavar="DIR",
        default=None,
        help="install under DIR/share instead of $XDG_DATA_HOME (~/.local/share); e.g. /usr/local for all users",
    )
    parser.add_argument("--exec", dest="exec_path", metavar="PATH", help="the program the entry starts (default: this)")
    parser.add_argument("--no-refresh", action="store_true", help="do not run update-desktop-database and friends")


def run(args: argparse.Namespace) -> int:
    if not (sys.platform.startswith("linux") or "bsd" in sys.platform):
        return fail("install-desktop is for Linux desktops; on Windows and macOS use the installer.", EXIT_BAD_INPUT)
    data_dir = Path(args.prefix).expanduser().absolute() / "share" if args.prefix else xdg_data_home()
    try:
        if args.uninstall:
            result = uninstall(data_dir, run_tools=not args.no_refresh)
            _report("removed", result, data_dir)
            return 0
        launcher = _launcher(args.exec_path)
        result = install(data_dir, launcher, run_tools=not args.no_refresh)
    except DesktopInstallError as exc:
        return fail_error(exc)
    _report("installed", result, data_dir)
    print(f"LLM Workstation is in the desktop menu; it starts {launcher}")
    return 0


def _launcher(exec_path: str | None) -> Path:
    if exec_path is None:
        return current_launcher()
    path = Path(exec_path).expanduser().absolute()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise DesktopInstallError(f"--exec {exec_path}: not an executable file.", kind=ErrorKind.INVALID_INPUT)
    return path


def _report(verb: str, result: DesktopResult, data_dir: Path) -> None:
    if not result.files:
        print(f"nothing to remove: no LLM Workstation desktop files under {data_dir}")
    for path in result.files:
        print(f"{verb} {path}")
    for tool in result.tools_run:
        print(f"ran {tool}")
    for warning in result.warnings:
        print(f"llm-workstation: warning: {warning}", file=sys.stderr)
