"""Starting the GUI: QApplication, the qasync event loop, logging, the error hook and the main window."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.ui.lifecycle import QUIT, QuitRequest, phase

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
    """The window (SIGINT/SIGTERM from here on, or from the entry point's first line, end it with exit 0), or with
    ``screenshot`` or ``smoke`` one offscreen pass (signals as for any command)."""
    if screenshot or smoke:
        QUIT.release()
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    else:
        QUIT.catch()
    phase("started")
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
    from app.ui.widgets.wheel_guard import install_wheel_guard

    if QUIT.requested is not None:  # before anything is opened: nothing to save
        return 0
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
    install_wheel_guard(app)  # before any widget is polished: unfocused controls leave the wheel to the page
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    install_asyncgen_hooks(loop)
    loop.set_exception_handler(handle_loop_exception)
    phase("building")
    window = MainWindow(workstation)
    apply_style_sheet(app)  # once the window is built: see apply_theme
    install_exception_hook(lambda: window)
    watchdog = StallWatchdog(parent=window)
    watchdog.start()
    if screenshot:
        window.resize(*screenshot.size)
    elif not smoke:
        window.restore_window_state()  # size, place and panes as left last time, fitted to this screen
    phase("built")
    window.show()
    with loop:
        if screenshot or smoke:
            return loop.run_until_complete(_render_once(app, window, screenshot))
        _run_until_quit(app, window, loop)
        phase("closed")
    return 0


def window_icon(svg: Path) -> QIcon:
    """The app icon from its rendered PNG sizes (no SVG plugin needed), plus the SVG for any other size."""
    from PySide6.QtGui import QIcon

    icon = QIcon()
    for png in sorted(svg.parent.glob(f"{svg.stem}-*.png")):
        icon.addFile(str(png))
    icon.addFile(str(svg))
    return icon


def _run_until_quit(app: QApplication, window: MainWindow, loop: asyncio.AbstractEventLoop) -> None:
    """Run the window until the app quits. Quitting may come at any moment of the start-up (a SIGTERM, the window
    closed): the loop runs until the quit itself, not until the start-up's steps, so it never ends half-way."""
    from PySide6.QtCore import QTimer

    from app.ui.tasks import spawn

    quit_ = loop.create_future()

    def quitting() -> None:
        if not quit_.done():
            quit_.set_result(None)

    app.aboutToQuit.connect(quitting)
    QTimer.singleShot(0, lambda: spawn(_start(window), "start the window"))
    close_on_quit(QUIT, window)
    try:
        loop.run_until_complete(quit_)
    finally:
        QUIT.close_with(None)  # the window is gone: a signal from now on only lets the exit go on


def close_on_quit(request: QuitRequest, window: MainWindow) -> None:
    """A quit request (made already, or to come) closes ``window`` the normal way, from the event loop: the signal
    handler that makes it runs between any two Python lines, where a close cannot begin."""
    from PySide6.QtCore import QTimer

    from app.ui.tasks import spawn

    def close() -> None:
        QTimer.singleShot(0, lambda: spawn(_close_after_start(window), "close on a signal"))

    request.close_with(close)


async def _close_after_start(window: MainWindow) -> None:
    """Close the window the normal way once its start-up is done (a shutdown racing the history's opening would
    close what is being opened)."""
    phase("closing")
    with contextlib.suppress(Exception):  # a start-up that failed was reported; the window closes all the same
        await asyncio.shield(window.chat_panel.start())
    window.close()


async def _start(window: MainWindow) -> None:
    phase("starting")
    shown_at = time.time()
    await window.chat_panel.start()
    _write_startup_report(shown_at)
    phase("ready")


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
