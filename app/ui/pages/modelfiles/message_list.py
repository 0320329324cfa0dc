"""The MESSAGE list: a conversation the model starts with (role + text), reorderable."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

MESSAGE_ROLES = ("system", "user", "assistant")


def _summary(role: str, text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "(empty)"
    return f"{role}: {line[:80]}"


class MessageList(QWidget):
    """Edits a list of (role, text); ``changed`` fires on every user edit."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._messages: list[tuple[str, str]] = []
        self._loading = False
        self._read_only = False
        self.list = QListWidget()
        self.list.setObjectName("message_list")
        self.role = QComboBox()
        self.role.setEditable(True)  # a role Ollama refuses stays visible, and the parse error says why
        self.role.addItems(MESSAGE_ROLES)
        self.text = QPlainTextEdit()
        self.text.setPlaceholderText("Message text")
        self.text.setMaximumHeight(90)
        self.add_button = QPushButton("Add")
        self.remove_button = QPushButton("Remove")
        self.up_button = QPushButton("Up")
        self.down_button = QPushButton("Down")
        buttons = QHBoxLayout()
        for button in (self.add_button, self.remove_button, self.up_button, self.down_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        editor = QHBoxLayout()
        editor.addWidget(self.role, 0, Qt.AlignmentFlag.AlignTop)
        editor.addWidget(self.text, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list, 1)
        layout.addLayout(editor)
        layout.addLayout(buttons)
        self.add_button.clicked.connect(self.add_message)
        self.remove_button.clicked.connect(self.remove_message)
        self.up_button.clicked.connect(lambda: self.move_message(-1))
        self.down_button.clicked.connect(lambda: self.move_message(1))
        self.list.currentRowChanged.connect(self._show_current)
        self.role.currentTextChanged.connect(self._edited)
        self.text.textChanged.connect(self._edited)
        self._show_current(-1)

    def set_read_only(self, read_only: bool) -> None:
        """The list can still be browsed (each message shown in full), but not changed."""
        self._read_only = read_only
        self.text.setReadOnly(read_only)
        self.add_button.setEnabled(not read_only)
        self._show_current(self.list.currentRow())

    def set_messages(self, messages: list[tuple[str, str]]) -> None:
        row = max(self.list.currentRow(), 0)
        self._messages = list(messages)
        self._refresh_list(min(row, len(self._messages) - 1))

    def messages(self) -> list[tuple[str, str]]:
        return list(self._messages)

    def add_message(self) -> None:
        last = self._messages[-1][0] if self._messages else "assistant"
        self._messages.append(("assistant" if last == "user" else "user", ""))
        self._refresh_list(len(self._messages) - 1)
        self.text.setFocus()
        self.changed.emit()

    def remove_message(self) -> None:
        row = self.list.currentRow()
        if row < 0:
            return
        del self._messages[row]
        self._refresh_list(min(row, len(self._messages) - 1))
        self.changed.emit()

    def move_message(self, step: int) -> None:
        row = self.list.currentRow()
        target = row + step
        if row < 0 or not 0 <= target < len(self._messages):
            return
        self._messages[row], self._messages[target] = self._messages[target], self._messages[row]
        self._refresh_list(target)
        self.changed.emit()

    def _refresh_list(self, current: int) -> None:
        self._loading = True
        self.list.clear()
        for role, text in self._messages:
            self.list.addItem(_summary(role, text))
        self._loading = False
        self.list.setCurrentRow(current)
        self._show_current(current)

    def _show_current(self, row: int) -> None:
        if self._loading:
            return
        self._loading = True
        has = 0 <= row < len(self._messages)
        role, text = self._messages[row] if has else ("user", "")
        self.role.setCurrentText(role)
        if self.text.toPlainText() != text:
            self.text.setPlainText(text)
        self.text.setEnabled(has)
        for widget in (self.role, self.remove_button, self.up_button, self.down_button):
            widget.setEnabled(has and not self._read_only)
        self._loading = False

    def _edited(self) -> None:
        row = self.list.currentRow()
        if self._loading or not 0 <= row < len(self._messages):
            return
        role, text = self.role.currentText().strip(), self.text.toPlainText()
        if (role, text) == self._messages[row]:
            return
        self._messages[row] = (role, text)
        item = self.list.item(row)
        if item is not None:
            item.setText(_summary(role, text))
        self.changed.emit()
