"""Starting the GUI: QApplication, the qasync event loop, logging, the error hook and the main window."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.ui.main_window import MainWindow

PROCESS_STARTED = time.time()
STARTUP_REPORT_ENV = "LLMW_STARTUP_REPORT"
HEAVY_MODULES = ("llama_cpp", "vllm", "torch", "pynvml", "huggingface_hub")
DEFAULT_SCREENSHOT_SIZE = (1366, 768)


@dataclass(frozen=True)
class Screenshot:
    """``--screenshot``: render ``page`` at ``size`` in ``palette``, after loading ``model`` and answering
    ``prompt`` when given, then save a PNG to ``path``."""

    path: str
    size: tuple[int, int] = DEFAULT_SCREENSHOT_SIZE
    page: str = "chat"
    palette: str | None = None
    model: str | None = None
    prompt: str | None = None


def run_gui(screenshot: Screenshot | None = None, smoke: bool = False) -> int:
    if screenshot or smoke:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from app.ui.platform_check import platform_problem

    if problem := platform_problem():
        print(f"llm-workstation: {problem}", file=sys.stderr)
        return 1
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.services.desktop_install import DESKTOP_ID
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.errors import handle_loop_exception, install_exception_hook
    from app.ui.main_window import WINDOW_CLASS, MainWindow
    from app.ui.resources import app_icon_path
    from app.ui.style.theme import apply_style_sheet, apply_theme
    from app.ui.watchdog import StallWatchdog

    app = QApplication.instance() or QApplication([sys.argv[0]])
    assert isinstance(app, QApplication)
    app.setApplicationName(WINDOW_CLASS)  # the X11 WM_CLASS class, matched by the .desktop StartupWMClass
    app.setApplicationDisplayName("LLM Workstation")
    app.setDesktopFileName(DESKTOP_ID)  # the Wayland app_id: the compositor finds <id>.desktop and its icon
    app.setWindowIcon(window_icon(app_icon_path()))
    paths = app_paths().ensure()
    buffer = install_logging("INFO", paths.log_file)
    workstation = Workstation.create(paths, buffer)  # the composition root: engines and history live here
    logging.getLogger("app").setLevel(workstation.settings.log_level)
    apply_theme(app, (screenshot.palette if screenshot else None) or workstation.settings.theme, with_style_sheet=False)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    install_asyncgen_hooks(loop)
    loop.set_exception_handler(handle_loop_exception)
    window = MainWindow(workstation)
    apply_style_sheet(app)  # once the window is built: see apply_theme
    install_exception_hook(lambda: window)
    watchdog = StallWatchdog(parent=window)
    watchdog.start()
    if screenshot:
        window.resize(*screenshot.size)
    else:
        _close_on_signals(window)  # before the window is mapped: a SIGTERM from then on closes it the normal way
    window.show()
    with loop:
        if screenshot or smoke:
            return loop.run_until_complete(_render_once(app, window, screenshot))
        loop.run_until_complete(_run_until_quit(app, window))
    return 0


def window_icon(svg: Path) -> QIcon:
    """The app icon from its rendered PNG sizes (no SVG plugin needed), plus the SVG for any other size."""
    from PySide6.QtGui import QIcon

    icon = QIcon()
    for png in sorted(svg.parent.glob(f"{svg.stem}-*.png")):
        icon.addFile(str(png))
    icon.addFile(str(svg))
    return icon


async def _run_until_quit(app: QApplication, window: MainWindow) -> None:
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    shown_at = time.time()
    await window.chat_panel.start()
    _write_startup_report(shown_at)
    await closed.wait()


def _close_on_signals(window: MainWindow) -> None:
    """SIGINT/SIGTERM close the window the normal way: the reply in flight is saved, the worker stopped."""
    from PySide6.QtCore import QTimer

    def close(_signum: int, _frame: object) -> None:
        QTimer.singleShot(0, window.close)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, close)


async def _render_once(app: QApplication, window: MainWindow, screenshot: Screenshot | None) -> int:
    """Let the window finish its start-up, then save a screenshot or a start-up report, and close.

    No ``app.processEvents()`` in here: a nested event pass inside a qasync coroutine can drop the first step
    of a task created during it (a panel's start-up task then never runs)."""
    await asyncio.sleep(0)
    shown_at = time.time()
    await asyncio.wait_for(window.chat_panel.start(), 10)
    await asyncio.sleep(0.3)  # idle a moment: the memory figure is the settled, idle window's
    _write_startup_report(shown_at)
    code = 0
    if screenshot:
        code = await _take_screenshot(window, screenshot)
    await window.shutdown_panels()
    return code


async def _take_screenshot(window: MainWindow, shot: Screenshot) -> int:
    """Load the model and answer the prompt (when given), open the page and let it finish starting (its first
    data shown), lay it out at the size and save."""
    from app.ui.page import Page

    if shot.model:
        if not await window.chat_panel.load_and_wait(shot.model):
            print(f"llm-workstation: could not load {shot.model}: {window.chat_panel.notice_text()}", file=sys.stderr)
            return 1
        if shot.prompt:
            await window.chat_panel.send_and_wait(shot.prompt)
    page = window.open_path(shot.page)
    if isinstance(page, Page) and isinstance(started := page.start(), asyncio.Future):
        with contextlib.suppress(Exception):  # a page that cannot finish its start still gets its picture
            await asyncio.wait_for(asyncio.shield(started), 15)
    minimum = window.minimumSizeHint()
    window.resize(max(shot.size[0], minimum.width()), max(shot.size[1], minimum.height()))
    for _ in range(5):  # a few passes: pages lay out and render what they show after being shown
        await asyncio.sleep(0.05)
    window.grab().save(shot.path)
    return 0


def install_asyncgen_hooks(loop: asyncio.AbstractEventLoop) -> None:
    """qasync's loop does not install asyncio's async-generator hooks; without them an abandoned stream
    (an HTTP response iterator left by an error) is finalized by the garbage collector, outside the loop."""
    firstiter = getattr(loop, "_asyncgen_firstiter_hook", None)
    finalizer = getattr(loop, "_asyncgen_finalizer_hook", None)
    if firstiter is not None and finalizer is not None:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)


def _write_startup_report(shown: float) -> None:
    """For ``bench startup``: when the window was shown, how much memory the idle process holds."""
    target = os.environ.get(STARTUP_REPORT_ENV)
    if not target:
        return
    import psutil

    report = {
        "window_shown_s": shown - PROCESS_STARTED,
        "window_shown_at": shown,
        "rss_bytes": psutil.Process().memory_info().rss,
        "heavy_modules": [name for name in HEAVY_MODULES if name in sys.modules],
    }
    with open(target, "w", encoding="utf-8") as out:
        json.dump(report, out)
