"""The chat's system prompt behind a disclosure: one line ("System prompt ▸ Be brief.") until opened."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QPlainTextEdit, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.ui.style.icons import icon, icon_size

SUMMARY_CHARS = 90


class SystemPromptBox(QWidget):
    """``toPlainText``/``setPlainText`` as a text edit; ``edited`` when the person changed it."""

    edited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.toggle = QPushButton()
        self.toggle.setObjectName("system_prompt_toggle")
        self.toggle.setFlat(True)
        self.toggle.setStyleSheet(
            "QPushButton#system_prompt_toggle { text-align: left; border: none; padding: 3px 4px; background: none; }"
        )
        self.toggle.setIconSize(icon_size(14))
        self.toggle.setCheckable(True)
        self.toggle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.toggle.setToolTip("How the assistant should behave in this chat")
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("system_prompt")
        self.editor.setPlaceholderText("How the assistant should behave in this chat (optional)")
        self.editor.setFixedHeight(72)
        self.editor.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.toggle)
        layout.addWidget(self.editor)
        self.toggle.toggled.connect(self._opened)
        self.editor.textChanged.connect(self._summarize)
        self.editor.textChanged.connect(self.edited)
        self._summarize()

    def toPlainText(self) -> str:
        return self.editor.toPlainText()

    def setPlainText(self, text: str) -> None:
        if text != self.editor.toPlainText():
            self.editor.blockSignals(True)
            self.editor.setPlainText(text)
            self.editor.blockSignals(False)
            self._summarize()

    @property
    def is_open(self) -> bool:
        return self.toggle.isChecked()

    def set_open(self, opened: bool) -> None:
        self.toggle.setChecked(opened)

    def _opened(self, opened: bool) -> None:
        self.editor.setVisible(opened)
        self._summarize()
        if opened:
            self.editor.setFocus()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._summarize()

    def _summarize(self) -> None:
        """The toggle reads "System prompt · <its first words>", elided to the width."""
        text = " ".join(self.editor.toPlainText().split())[: SUMMARY_CHARS * 4]
        label = f"System prompt · {text}" if text and not self.is_open else "System prompt"
        label = label if text else "System prompt (none)"
        room = max(self.width() - self.toggle.iconSize().width() - 24, 80)
        self.toggle.setText(self.toggle.fontMetrics().elidedText(label, Qt.TextElideMode.ElideRight, room))
        self.toggle.setIcon(icon("chevron-down" if self.is_open else "chevron-right"))
