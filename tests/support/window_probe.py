"""The main window opened as the app opens it, in a process of its own (a screen of a chosen size, a scale factor:
both are read when the QApplication starts), reporting where things ended up.

Usage: python -m tests.support.window_probe REPORT.json [--size WxH | --restore] [--saved-chat]
       [--geometry X,Y,W,H] [--maximize] [--chats-width N]

``--restore`` restores the window's state as the app does at start (the first time: fitted to the screen); ``--size``
sizes it instead. ``--saved-chat`` stores a chat first and reports which of its rows on screen do not hold their
text, as restored and after a resize. ``--geometry`` / ``--maximize`` / ``--chats-width`` change the window after
the report; then the window is closed the normal way (its state saved). Run it with ``offscreen_screen`` in the
environment to choose the screen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path


def offscreen_screen(folder: Path, width: int, height: int, dpr: float = 1.0) -> str:
    """A ``QT_QPA_PLATFORM`` value: the offscreen platform with one screen ``width``×``height`` (its config file is
    written in ``folder``)."""
    config = folder / f"screen-{width}x{height}.json"
    screen = {"name": "probe", "x": 0, "y": 0, "width": width, "height": height, "dpr": dpr}
    config.write_text(json.dumps({"screens": [screen]}), encoding="utf-8")
    return f"offscreen:configfile={config}"


def _rect(widget) -> list[int]:
    """A widget's rectangle in screen coordinates."""
    top_left = widget.mapToGlobal(widget.rect().topLeft())
    return [top_left.x(), top_left.y(), widget.width(), widget.height()]


def _geometry(rect) -> list[int]:
    return [rect.x(), rect.y(), rect.width(), rect.height()]


async def _settle(window) -> None:
    from tests.support.waiting import until

    await until(lambda: window.isVisible() and window.chat_panel.composer.send_button.isVisible())
    # A few turns of the loop, not a time: the frame's own fitting (a zero timer), the layouts' requests. Qt runs its
    # events between the loop's turns (qasync); a nested processEvents() here would re-enter other tasks' steps.
    for _ in range(10):
        await asyncio.sleep(0)


def _report(window) -> dict:
    panel = window.chat_panel
    screen = window.screen()
    return {
        "available": _geometry(screen.availableGeometry()),
        "frame": _geometry(window.frameGeometry()),
        "geometry": _geometry(window.geometry()),
        "maximized": window.isMaximized(),
        "device_pixel_ratio": window.devicePixelRatioF(),
        "send": _rect(panel.composer.send_button),
        "send_visible": panel.composer.send_button.isVisible(),
        "status": _rect(window.status),
        "status_visible": window.status.isVisible(),
        "drawer_open": panel.drawer.isVisible(),
        "splitter": panel.splitter.sizes(),
    }


async def _rows(window, count: int) -> tuple[dict, int]:
    """Row problems as restored and after a narrower window (see tests/support/transcript_fit.py)."""
    from tests.support.transcript_fit import row_problems
    from tests.support.waiting import until

    view = window.chat_panel.view
    await until(lambda: view.isVisible() and view.message_count() == count and view.live_rows())
    rows = {"restored": row_problems(view)}
    checked = len(view.live_rows())
    before = view.viewport().width()
    window.resize(int(window.width() * 0.8), window.height())
    await until(lambda: view.viewport().width() != before)
    rows["resized"] = row_problems(view)
    return rows, checked


async def _probe(window, options) -> dict:
    await window.chat_panel.start()
    await _settle(window)
    report = _report(window)
    if options.saved_chat:
        report["rows"], report["rows_checked"] = await _rows(window, options.saved_chat)
    if options.chats_width:
        splitter = window.chat_panel.splitter
        sizes = splitter.sizes()
        splitter.setSizes([options.chats_width, sum(sizes) - options.chats_width - sizes[2], sizes[2]])
    if options.geometry:
        x, y, w, h = (int(part) for part in options.geometry.split(","))
        window.setGeometry(x, y, w, h)
    if options.maximize:
        window.showMaximized()
    if options.geometry or options.maximize or options.chats_width:
        await _settle(window)
        report["before_close"] = _report(window)
    window.close()  # the normal way: the state saved, the pages shut down, then the window closes
    from tests.support.waiting import until

    await until(lambda: not window.isVisible())
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("report", type=Path)
    parser.add_argument("--size")
    parser.add_argument("--restore", action="store_true")
    parser.add_argument("--saved-chat", action="store_true")
    parser.add_argument("--geometry")
    parser.add_argument("--maximize", action="store_true")
    parser.add_argument("--chats-width", type=int)
    options = parser.parse_args(argv)

    import qasync
    from PySide6.QtWidgets import QApplication

    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.app import install_asyncgen_hooks
    from app.ui.main_window import MainWindow
    from app.ui.style.theme import apply_style_sheet, apply_theme
    from tests.support.transcript_fit import save_chat

    app = QApplication([sys.argv[0]])
    app.setQuitOnLastWindowClosed(False)  # the probe ends when its report is written
    paths = app_paths().ensure()
    if options.saved_chat:
        options.saved_chat = save_chat(paths.conversations_db)
    workstation = Workstation.create(paths, install_logging("INFO", None))
    apply_theme(app, "light", with_style_sheet=False)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    install_asyncgen_hooks(loop)
    window = MainWindow(workstation)
    apply_style_sheet(app)  # as the app does: once the window is built
    if options.size:
        window.resize(*(int(part) for part in options.size.split("x")))
    if options.restore:
        window.restore_window_state()
    window.show()
    with loop:
        report = loop.run_until_complete(_probe(window, options))
    options.report.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
