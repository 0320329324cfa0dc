"""The non-modal dialog that reports unhandled exceptions, one dialog for a whole burst."""

from __future__ import annotations

import platform
import sys
from collections import deque
from collections.abc import Iterable

import PySide6
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QStyle,
    QVBoxLayout,
    QWidget,
)

import app
from app.services.logbuffer import redact

MAX_KEPT_ERRORS = 20  # Older tracebacks of a burst are counted but not kept.
SEPARATOR = "\n" + "-" * 72 + "\n"


def diagnostics_report(tracebacks: Iterable[str]) -> str:
    """Version and platform facts followed by the tracebacks, with secrets redacted."""
    lines = [
        f"LLM Workstation {app.__version__}",
        f"Python {sys.version.replace(chr(10), ' ')}",
        f"Platform {platform.platform()}",
        f"PySide6 {PySide6.__version__}, Qt {qVersion()}",
        "",
        SEPARATOR.join(tracebacks),
    ]
    return redact("\n".join(lines))


class ErrorDialog(QDialog):
    """Shows a summary of the latest error, a count, expandable tracebacks and "Copy diagnostics"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setModal(False)
        self.setWindowTitle("LLM Workstation — Error")
        self._summaries: list[str] = []
        self._details: deque[str] = deque(maxlen=MAX_KEPT_ERRORS)
        self._build_ui()

    def _build_ui(self) -> None:
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical).pixmap(32, 32))
        self.summary_label = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Show details")
        self.details_button.setCheckable(True)
        self.details_view = QPlainTextEdit(readOnly=True)
        self.details_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.details_view.setVisible(False)
        self.copy_button = QPushButton("Copy diagnostics")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(self.details_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.close)
        self.details_button.toggled.connect(self.set_details_visible)
        self.copy_button.clicked.connect(self.copy_diagnostics)

        top = QHBoxLayout()
        top.addWidget(icon, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.summary_label, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.details_view, 1)
        layout.addWidget(buttons)

    def add_error(self, summary: str, details: str) -> None:
        """Record one more error; the dialog shows the latest summary and the count."""
        self._summaries.append(redact(summary))
        self._details.append(redact(details))
        self._refresh()

    def error_count(self) -> int:
        """How many errors this dialog has received."""
        return len(self._summaries)

    def summary_text(self) -> str:
        """The summary line as shown."""
        return self.summary_label.text()

    def details_text(self) -> str:
        """The kept tracebacks, newest last."""
        return self.details_view.toPlainText()

    def set_details_visible(self, visible: bool) -> None:
        """Expand or collapse the tracebacks."""
        self.details_view.setVisible(visible)
        self.details_button.setChecked(visible)
        self.details_button.setText("Hide details" if visible else "Show details")
        self.adjustSize()

    def diagnostics(self) -> str:
        """The text "Copy diagnostics" puts on the clipboard."""
        return diagnostics_report(self._details)

    def copy_diagnostics(self) -> None:
        """Copy versions, platform and tracebacks (redacted) to the clipboard."""
        QGuiApplication.clipboard().setText(self.diagnostics())

    def _refresh(self) -> None:
        latest = self._summaries[-1]
        count = len(self._summaries)
        if count == 1:
            self.summary_label.setText(f"An unexpected error occurred:\n{latest}")
        else:
            self.summary_label.setText(f"{count} unexpected errors occurred. The latest:\n{latest}")
        dropped = count - len(self._details)
        note = f"({dropped} earlier error(s) not kept)\n" if dropped else ""
        self.details_view.setPlainText(note + SEPARATOR.join(self._details))
