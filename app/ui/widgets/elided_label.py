"""A one-line label that shrinks: the text is elided in the middle (names and paths keep both ends) and the full
text is its tooltip, so a long name never widens the window."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    """``full_text()`` is what was set; ``text()`` is what fits the width now."""

    def __init__(self, text: str = "", parent: QWidget | None = None, mode: Qt.TextElideMode | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._mode = mode if mode is not None else Qt.TextElideMode.ElideMiddle
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.set_full_text(text)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance(self._full) + 4, super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = max(self.contentsRect().width(), 0)
        self.setText(self.fontMetrics().elidedText(self._full, self._mode, width) if width else self._full)
