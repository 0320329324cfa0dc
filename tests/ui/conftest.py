"""UI fixtures: a qasync loop on the test QApplication, and main windows on an isolated home.

Tests drive the window inside one coroutine (``qloop.run_until_complete``) so that every task step runs
while the loop is running, as in the app, where the loop runs for the window's whole life.

Every UI test holds the line: it fails on a Qt warning it did not declare (``expect_qt_warning``;
tests/support/qt_messages.py) and on an asyncio task still running after its teardown and a grace period.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from tests.support.leaked_tasks import GRACE_S, drain, settle
from tests.support.qt_messages import QtMessageRecorder

_HERE = Path(__file__).resolve().parent
PATIENT_MS = 30_000  # qtbot's waits fail after this by default (pytest-qt's own 5 s is short on a loaded machine)


def _patient(wait):
    @functools.wraps(wait)
    def waiting(self, *args, **kwargs):
        kwargs.setdefault("timeout", PATIENT_MS)
        return wait(self, *args, **kwargs)

    return waiting


for _name in ("waitUntil", "waitSignal", "waitSignals", "waitCallback", "waitExposed", "waitActive"):
    setattr(QtBot, _name, _patient(getattr(QtBot, _name)))


def pytest_collection_modifyitems(config, items):
    """pytest-qt's own Qt log capture stops before teardown; the recorder below covers teardown too."""
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.no_qt_log)


@pytest.fixture(autouse=True)
def _qt_messages():
    """Record Qt's warnings for the whole test, fixture teardown included (this fixture is set up first)."""
    recorder = QtMessageRecorder()
    recorder.install()
    yield recorder
    recorder.uninstall()
    problems = recorder.problems()
    if problems:
        pytest.fail("Qt warned during the test:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture
def expect_qt_warning(_qt_messages):
    """``expect_qt_warning(pattern)``: the test provokes a Qt warning matching the regex ``pattern`` on purpose."""
    return _qt_messages.expect


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
    """The session loop; after the test (and the fixtures that use this one) every task it started must end
    within ``GRACE_S``: one still running is cancelled and fails the test, named."""
    asyncio.set_event_loop(_session_loop)
    before = asyncio.all_tasks(_session_loop)
    yield _session_loop
    late = _session_loop.run_until_complete(settle(before))
    if late:
        pytest.fail(f"tasks left running {GRACE_S:.0f} s after the test: " + "; ".join(late), pytrace=False)


@pytest.fixture
def make_window(qloop):
    """``await make_window()`` builds a started main window; all are shut down after the test."""
    from PySide6.QtWidgets import QApplication

    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.main_window import MainWindow
    from app.ui.tasks import running_tasks
    from app.ui.widgets.wheel_guard import install_wheel_guard

    windows = []

    async def make():
        paths = app_paths().ensure()
        context = Workstation.create(paths, install_logging("INFO", None))
        install_wheel_guard(QApplication.instance())  # as app.run_gui does
        window = MainWindow(context)
        window.show()
        windows.append(window)
        await window.chat_panel.start()
        return window

    yield make

    async def close_all():
        if pending := running_tasks():  # what the UI started (a save, a refresh) ends before the shutdown
            await asyncio.wait(pending, timeout=GRACE_S)
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
        await drain(60)  # a task still running after that fails the test in qloop's teardown, named

    qloop.run_until_complete(finish())


@pytest.fixture
def make_framed_page(qloop):
    """``make_framed_page(build, context=None)``: ``build(workstation)`` in a frame shaped like the main window
    (menus, navigation, status bar) at 1024×700, on its own Workstation unless one is given; after the test the
    tasks it started end, then each page is shut down and its Workstation closed."""
    import contextlib

    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.tasks import running_tasks
    from tests.support.page_frame import window_frame
    from tests.support.waiting import until

    frames, pages = contextlib.ExitStack(), []

    def make(build, context=None):
        context = context or Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        page = build(context)
        frames.enter_context(window_frame(page))
        pages.append(page)
        return page

    yield make

    async def finish():
        await until(lambda: not running_tasks())
        for page in pages:
            await page.shutdown()
            await page.workstation.close()

    qloop.run_until_complete(finish())
    frames.close()


@pytest.fixture
def model_folder(tmp_path, monkeypatch, tiny_gguf) -> Path:
    """A model folder with one GGUF, and empty Hugging Face and Ollama stores (the Library lists only it)."""
    import shutil

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(tiny_gguf, folder / "tiny.gguf")
    return folder
