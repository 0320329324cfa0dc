"""UI fixtures: a qasync loop on the test QApplication, and main windows on an isolated home.

Tests drive the window inside one coroutine (``qloop.run_until_complete``) so that every task step runs
while the loop is running, as in the app, where the loop runs for the window's whole life.
"""

from __future__ import annotations

import asyncio
import time

import pytest


@pytest.fixture
def qloop(qapp):
    import qasync

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()  # also stops qasync's executor threads, which would abort the interpreter at exit
    asyncio.set_event_loop(None)


async def until(predicate, timeout: float = 30.0) -> None:
    """Let the loop run until ``predicate()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


@pytest.fixture
def make_window(qloop):
    """``await make_window()`` builds a started main window; all are shut down after the test."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.ui.context import AppContext
    from app.ui.main_window import MainWindow

    windows = []

    async def make():
        paths = app_paths().ensure()
        context = AppContext.create(paths, install_logging("INFO", None))
        window = MainWindow(context)
        window.show()
        windows.append(window)
        await window.chat_panel.start()
        return window

    yield make

    async def close_all():
        for window in windows:  # shut down before pytest-qt's own clean-up, which would only close the window
            await window.chat_panel.shutdown()
            window.close()
            window.deleteLater()

    qloop.run_until_complete(close_all())
