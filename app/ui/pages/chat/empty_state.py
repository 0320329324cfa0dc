"""What an empty chat shows: the next step. No model yet: the starter model (or Open…). The starter model: what it
is, and example openings to click. Any other model: a short invitation to write."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent, QMouseEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.services import starter_model
from app.ui.style.theme import set_role
from app.ui.widgets.factories import wrapped_label

MAX_WIDTH = 560


class ExampleChip(QFrame):
    """A clickable example prompt (word-wrapped, so it never widens the page)."""

    clicked = Signal(str)

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prompt = text
        self.setObjectName("example_chip")
        set_role(self, "card")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setToolTip("Send this opening to the model")
        self.setAccessibleName(text)
        label = wrapped_label(f"{text} …")
        label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(label)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self.rect().contains(event.position().toPoint()):
            self.clicked.emit(self.prompt)
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space):
            self.clicked.emit(self.prompt)
            return
        super().keyPressEvent(event)


class EmptyState(QScrollArea):
    use_starter_requested = Signal()
    open_requested = Signal()
    example_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chat_empty_state")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.title = QLabel()
        self.title.setObjectName("empty_title")
        set_role(self.title, "empty-title")
        self.title.setWordWrap(True)
        self.text = wrapped_label(name="empty_text")
        set_role(self.text, "muted")
        self.starter_button = QPushButton("Use the starter model")
        set_role(self.starter_button, "accent")
        self.open_button = QPushButton("Open a model file…")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(240)
        self.progress.hide()
        self.examples_title = QLabel("Try an opening; the model continues it:")
        set_role(self.examples_title, "section")
        self.chips = [ExampleChip(text) for text in starter_model.EXAMPLE_PROMPTS]
        self._build()
        self.starter_button.clicked.connect(self._starter_clicked)
        self.open_button.clicked.connect(self.open_requested)
        for chip in self.chips:
            chip.clicked.connect(self.example_chosen)

    def _build(self) -> None:
        column = QWidget()
        column.setMaximumWidth(MAX_WIDTH)
        column.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        layout = QVBoxLayout(column)
        layout.setContentsMargins(16, 24, 16, 16)
        layout.setSpacing(10)
        layout.addWidget(self.title)
        layout.addWidget(self.text)
        buttons = QHBoxLayout()
        buttons.addWidget(self.starter_button)
        buttons.addWidget(self.open_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.examples_title)
        for chip in self.chips:
            layout.addWidget(chip)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(column, 100)
        row.addStretch(1)
        page = QWidget()
        outer = QVBoxLayout(page)
        outer.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)
        self.setWidget(page)

    # --- what it shows ------------------------------------------------------------------------------------------
    def show_no_model(self) -> None:
        """Nothing chosen yet: the starter model when its package is installed, else how to get one."""
        self.title.setText("Start with a model")
        if starter_model.package_installed():
            self.text.setText(
                f"Chat right away with the small starter model, {starter_model.DISPLAY_NAME} — no download — "
                "or open a .gguf file you have."
            )
        else:
            self.text.setText(f"Open a .gguf model file, or get the small starter model. {starter_model.INSTALL_HINT}")
        self.starter_button.setVisible(starter_model.package_installed())
        self.starter_button.setEnabled(True)
        self.open_button.show()
        self._show_examples(False)

    def show_model(self, name: str, starter: bool) -> None:
        """A model is chosen or loaded: an invitation, and the examples for the starter model."""
        self.starter_button.hide()
        self.open_button.hide()
        self.progress.hide()
        if starter:
            self.title.setText(f"{name} continues text")
            self.text.setText(
                f"{starter_model.NOTE} Write the start of a text, or click an opening below: it is sent at once "
                "(the model loads first when needed)."
            )
        else:
            self.title.setText("New chat")
            self.text.setText(f"Write a message below to chat with {name}.")
        self._show_examples(starter)

    def examples_shown(self) -> bool:
        return not self.examples_title.isHidden()

    def _show_examples(self, shown: bool) -> None:
        self.examples_title.setVisible(shown)
        for chip in self.chips:
            chip.setVisible(shown)

    # --- the starter model being written --------------------------------------------------------------------------
    def _starter_clicked(self) -> None:
        self.starter_button.setEnabled(False)
        self.progress.setValue(0)
        self.progress.show()
        self.use_starter_requested.emit()

    def show_progress(self, done: int, total: int) -> None:
        self.progress.show()
        self.progress.setMaximum(max(total, 1))
        self.progress.setValue(done)

    def show_error(self, text: str) -> None:
        self.progress.hide()
        self.starter_button.setEnabled(True)
        self.text.setText(text)
