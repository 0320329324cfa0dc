"""The unhandled-exception path: logged, shown in one non-modal dialog, marshalled to the GUI thread."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

import pytest
from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QWidget

import app
from app.ui import errors
from app.ui.dialogs.error_dialog import ErrorDialog
from app.ui.errors import handle_loop_exception, install_exception_hook, uninstall_exception_hook

# pytest-qt would otherwise swap sys.excepthook around each test phase and fail on slot exceptions.
pytestmark = pytest.mark.qt_no_exception_capture

HF_TOKEN = "hf_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"


@pytest.fixture
def reporter(qtbot):
    installed = install_exception_hook(lambda: None)
    yield installed
    uninstall_exception_hook()
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, ErrorDialog):
            widget.close()
            widget.deleteLater()


def _raise_to_hook(exc: BaseException) -> None:
    try:
        raise exc
    except BaseException:
        sys.excepthook(*sys.exc_info())


def _shown_dialog(qtbot, reporter) -> ErrorDialog:
    qtbot.waitUntil(lambda: reporter.dialog() is not None and reporter.dialog().isVisible())
    dialog = reporter.dialog()
    assert dialog is not None
    return dialog


def _open_error_dialogs() -> list[ErrorDialog]:
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, ErrorDialog) and w.isVisible()]


def test_install_sets_and_uninstall_restores_the_hooks(qtbot):
    before = (sys.excepthook, threading.excepthook)
    install_exception_hook(lambda: None)
    install_exception_hook(lambda: None)  # Installing twice does not stack.
    assert sys.excepthook is errors._excepthook
    assert threading.excepthook is errors._thread_excepthook
    uninstall_exception_hook()
    assert (sys.excepthook, threading.excepthook) == before


def test_excepthook_logs_and_shows_a_non_modal_dialog(qtbot, reporter, caplog):
    with caplog.at_level(logging.ERROR, logger="app.errors"):
        _raise_to_hook(ValueError("boom 42"))
        dialog = _shown_dialog(qtbot, reporter)
    assert not dialog.isModal()
    assert "ValueError: boom 42" in dialog.summary_text()
    assert "raise exc" in dialog.details_text()
    assert not dialog.details_view.isVisible()
    dialog.details_button.click()
    assert dialog.details_view.isVisible()
    (record,) = [r for r in caplog.records if r.name == "app.errors"]
    assert record.exc_info is not None and record.exc_info[0] is ValueError


def test_exception_in_a_qt_slot_reaches_the_dialog(qtbot, reporter):
    class Emitter(QObject):
        fired = Signal()

    def broken_slot() -> None:
        raise RuntimeError("slot failed")

    emitter = Emitter()
    emitter.fired.connect(broken_slot)
    emitter.fired.emit()
    dialog = _shown_dialog(qtbot, reporter)
    assert "RuntimeError: slot failed" in dialog.summary_text()
    assert "broken_slot" in dialog.details_text()


def test_dialog_uses_the_parent_getter(qtbot):
    window = QWidget()
    qtbot.addWidget(window)
    reporter = install_exception_hook(lambda: window)
    try:
        _raise_to_hook(KeyError("k"))
        dialog = _shown_dialog(qtbot, reporter)
        assert dialog.parent() is window
    finally:
        uninstall_exception_hook()


def test_copy_diagnostics_has_versions_and_a_redacted_traceback(qtbot, reporter):
    _raise_to_hook(PermissionError(f"401 for token {HF_TOKEN}"))
    dialog = _shown_dialog(qtbot, reporter)
    dialog.copy_button.click()
    copied = QApplication.clipboard().text()
    assert f"LLM Workstation {app.__version__}" in copied
    assert f"Python {sys.version.split()[0]}" in copied
    assert "Platform " in copied
    assert f"PySide6 {pyside_version}" in copied
    assert "Traceback (most recent call last)" in copied
    assert "PermissionError: 401 for token hf_[REDACTED]" in copied
    assert HF_TOKEN not in copied
    assert HF_TOKEN not in dialog.summary_text() + dialog.details_text()


def test_background_thread_exception_is_shown_on_the_gui_thread(qtbot, reporter, caplog):
    def work() -> None:
        raise OSError("worker crashed")

    worker = threading.Thread(target=work, name="model-loader")
    with caplog.at_level(logging.ERROR, logger="app.errors"):
        worker.start()
        worker.join()
        dialog = _shown_dialog(qtbot, reporter)
    assert dialog.thread() is QApplication.instance().thread()
    assert "OSError: worker crashed" in dialog.summary_text()
    assert "in thread model-loader" in dialog.details_text()
    assert any("model-loader" in r.getMessage() for r in caplog.records if r.name == "app.errors")


def test_a_burst_of_errors_makes_one_dialog(qtbot, reporter):
    def work(n: int) -> None:
        raise RuntimeError(f"burst {n}")

    workers = [threading.Thread(target=work, args=(n,)) for n in range(10)]
    for w in workers:
        w.start()
    for n in range(10, 20):
        _raise_to_hook(RuntimeError(f"burst {n}"))
    for w in workers:
        w.join()
    dialog = _shown_dialog(qtbot, reporter)
    qtbot.waitUntil(lambda: dialog.error_count() == 20)
    assert _open_error_dialogs() == [dialog]
    assert "20 unexpected errors" in dialog.summary_text()


def test_a_new_error_after_closing_opens_a_fresh_dialog(qtbot, reporter):
    _raise_to_hook(ValueError("first"))
    first = _shown_dialog(qtbot, reporter)
    first.close()
    _raise_to_hook(ValueError("second"))
    qtbot.waitUntil(lambda: reporter.dialog() is not first and reporter.dialog() is not None)
    second = _shown_dialog(qtbot, reporter)
    assert second.error_count() == 1
    assert "second" in second.summary_text()


def test_keyboard_interrupt_goes_to_the_default_hook(qtbot, reporter, monkeypatch):
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "__excepthook__", lambda t, v, tb: seen.append(t))
    _raise_to_hook(KeyboardInterrupt())
    qtbot.waitUntil(lambda: bool(seen))
    assert seen == [KeyboardInterrupt]
    assert reporter.dialog() is None


def test_asyncio_loop_handler_reports_exceptions(qtbot, reporter, caplog):
    loop = asyncio.new_event_loop()
    try:
        loop.set_exception_handler(handle_loop_exception)
        with caplog.at_level(logging.ERROR, logger="app.errors"):
            loop.call_exception_handler({"message": "Future exception was never retrieved"})
            loop.call_exception_handler(
                {"message": "Task exception was never retrieved", "exception": LookupError("in a task")}
            )
            dialog = _shown_dialog(qtbot, reporter)
    finally:
        loop.close()
    assert "LookupError: in a task" in dialog.summary_text()
    assert "Task exception was never retrieved" in dialog.details_text()
    assert dialog.error_count() == 1  # A message without an exception is logged only.
    assert any("Future exception was never retrieved" in r.getMessage() for r in caplog.records)


def test_signal_emit_keeps_true_alive():
    """Guards the PySide6 pin: 6.12.0 lost a reference to True on every emit and crashed Python 3.11."""

    class Emitter(QObject):
        fired = Signal()

    emitter = Emitter()
    before = sys.getrefcount(True)
    for _ in range(200):
        emitter.fired.emit()
    assert sys.getrefcount(True) >= before - 5
