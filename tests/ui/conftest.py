"""UI fixtures: a qasync loop on the test QApplication, and main windows on an isolated home.

Tests drive the window inside one coroutine (``qloop.run_until_complete``) so that every task step runs
while the loop is running, as in the app, where the loop runs for the window's whole life.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.waiting import until


@pytest.fixture(scope="session")
def _session_loop(qapp):
    """One qasync loop for the whole run: creating and closing one per test leaves Qt notifiers behind."""
    import qasync

    from app.ui.app import install_asyncgen_hooks

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    install_asyncgen_hooks(loop)
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()  # also stops qasync's executor threads, which would abort the interpreter at exit
    asyncio.set_event_loop(None)


@pytest.fixture
def qloop(_session_loop):
    asyncio.set_event_loop(_session_loop)
    yield _session_loop
    _session_loop.run_until_complete(_settle())


async def _settle(timeout: float = 10.0) -> None:
    """Let background tasks a test started finish (cancel them after ``timeout``), so none runs on a closed loop."""
    from app.ui.tasks import running_tasks

    pending = running_tasks()
    if pending:
        _done, late = await asyncio.wait(pending, timeout=timeout)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=timeout)


@pytest.fixture
def make_window(qloop):
    """``await make_window()`` builds a started main window; all are shut down after the test."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.main_window import MainWindow

    windows = []

    async def make():
        paths = app_paths().ensure()
        context = Workstation.create(paths, install_logging("INFO", None))
        window = MainWindow(context)
        window.show()
        windows.append(window)
        await window.chat_panel.start()
        return window

    yield make

    async def close_all():
        await _settle()
        for window in windows:  # shut down before pytest-qt's own clean-up, which would only close the window
            await window.shutdown_panels()
            window.close()
            window.deleteLater()

    qloop.run_until_complete(close_all())


@pytest.fixture
def make_standalone_panel(qloop, qtbot):
    """Build a panel outside the main window, with its own Workstation: ``await make(build, size)`` where
    ``build(context)`` returns the panel. Every panel is shut down and the spawned tasks drained at the end."""
    import shiboken6

    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.tasks import running_tasks

    panels, workstations = [], []

    async def make(build, size=(1100, 800)):
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        workstations.append(context)
        panel = build(context)
        qtbot.addWidget(panel)
        panel.resize(*size)
        panel.show()
        panels.append(panel)
        return panel

    yield make

    async def finish():
        for panel in panels:
            if shiboken6.isValid(panel):
                await panel.shutdown()
        for workstation in workstations:
            await workstation.close()
        await until(lambda: not running_tasks(), timeout=60)

    qloop.run_until_complete(finish())
