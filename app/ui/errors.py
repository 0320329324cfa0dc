"""The single path for unhandled exceptions: log them, then show them in one non-modal dialog.

Call :func:`install_exception_hook` once the ``QApplication`` exists. It covers ``sys.excepthook``
(including exceptions raised in Qt slots) and ``threading.excepthook``; pass
:func:`handle_loop_exception` to ``loop.set_exception_handler`` for asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal
from PySide6.QtWidgets import QWidget

from app.services.logbuffer import redact

if TYPE_CHECKING:
    from app.ui.dialogs.error_dialog import ErrorDialog

log = logging.getLogger("app.errors")

MAX_SUMMARY_CHARS = 500
ParentGetter = Callable[[], QWidget | None]
ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
ThreadExceptHook = Callable[[threading.ExceptHookArgs], Any]


def _summary(exc_type: type[BaseException], exc: BaseException | None) -> str:
    text = f"{exc_type.__name__}: {exc}" if exc is not None and str(exc) else exc_type.__name__
    if len(text) > MAX_SUMMARY_CHARS:
        text = text[: MAX_SUMMARY_CHARS - 1] + "…"
    return redact(text)


class ErrorReporter(QObject):
    """Logs exceptions from any thread and shows them on the GUI thread in one reused ErrorDialog."""

    _reported = Signal(str, str)  # summary, details; always delivered on this object's (GUI) thread

    def __init__(self, parent_getter: ParentGetter) -> None:
        super().__init__()
        app = QCoreApplication.instance()
        if app is not None:
            self.moveToThread(app.thread())
        self._parent_getter = parent_getter
        self._dialog: ErrorDialog | None = None
        self._reported.connect(self._show, Qt.ConnectionType.QueuedConnection)

    def report(
        self,
        exc_type: type[BaseException],
        exc: BaseException | None,
        tb: TracebackType | None,
        context: str | None = None,
    ) -> None:
        """Log the exception to ``app.errors`` and queue it for the dialog. Safe from any thread."""
        where = f" ({context})" if context else ""
        if exc is not None:
            log.error("Unhandled exception%s", where, exc_info=(exc_type, exc, tb))
        else:
            log.error("Unhandled exception%s: %s", where, exc_type.__name__)
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        if context:
            details = f"{context}\n{details}"
        self._reported.emit(_summary(exc_type, exc), redact(details))

    def dialog(self) -> ErrorDialog | None:
        """The dialog currently showing errors, if any."""
        if self._dialog is not None and shiboken6.isValid(self._dialog):
            return self._dialog
        return None

    def _show(self, summary: str, details: str) -> None:
        # Never let a failure here go back to the excepthook: that would loop.
        try:
            self._dialog_for_new_error().add_error(summary, details)
        except Exception:
            log.exception("Could not show the error dialog")

    def _dialog_for_new_error(self) -> ErrorDialog:
        dialog = self.dialog()
        if dialog is not None and dialog.isVisible():
            return dialog  # A burst goes into the open dialog.
        if dialog is not None:
            dialog.deleteLater()
        from app.ui.dialogs.error_dialog import ErrorDialog  # built on the first error, not at start-up

        dialog = ErrorDialog(self._parent_getter())
        self._dialog = dialog
        dialog.show()
        return dialog


@dataclass
class _Installed:
    reporter: ErrorReporter
    previous_excepthook: ExceptHook
    previous_thread_excepthook: ThreadExceptHook


_installed: _Installed | None = None


def install_exception_hook(parent_getter: ParentGetter) -> ErrorReporter:
    """Route unhandled exceptions (main thread, Qt slots, other threads) to the log and the dialog.

    ``parent_getter`` returns the window to parent a new dialog to (or None). Installing again
    replaces the reporter without stacking hooks.
    """
    global _installed
    if _installed is not None:
        uninstall_exception_hook()
    _installed = _Installed(ErrorReporter(parent_getter), sys.excepthook, threading.excepthook)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    return _installed.reporter


def uninstall_exception_hook() -> None:
    """Restore the hooks that were in place before :func:`install_exception_hook`."""
    global _installed
    if _installed is None:
        return
    sys.excepthook = _installed.previous_excepthook
    threading.excepthook = _installed.previous_thread_excepthook
    _installed = None


def current_reporter() -> ErrorReporter | None:
    """The installed reporter, or None."""
    return _installed.reporter if _installed is not None else None


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    reporter = current_reporter()
    if reporter is None or issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    try:
        reporter.report(exc_type, exc, tb)
    except Exception:
        sys.__excepthook__(exc_type, exc, tb)


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    reporter = current_reporter()
    if reporter is None or issubclass(args.exc_type, KeyboardInterrupt | SystemExit):
        threading.__excepthook__(args)
        return
    name = args.thread.name if args.thread is not None else "unknown"
    try:
        reporter.report(args.exc_type, args.exc_value, args.exc_traceback, context=f"in thread {name}")
    except Exception:
        threading.__excepthook__(args)


def handle_loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An asyncio exception handler: ``loop.set_exception_handler(handle_loop_exception)``."""
    reporter = current_reporter()
    if reporter is None:
        loop.default_exception_handler(context)
        return
    message = str(context.get("message") or "Unhandled exception in the event loop")
    exc = context.get("exception")
    if isinstance(exc, BaseException):
        reporter.report(type(exc), exc, exc.__traceback__, context=message)
        return
    extra = ", ".join(f"{key}={value!r}" for key, value in context.items() if key != "message")
    log.error("Event loop: %s%s", message, f" ({extra})" if extra else "")
