"""What the Bench page shows before it has results: the next step, with a button that takes it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.ui.pages.bench.defaults import ENGINE_NAMES, model_name
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import SPACE_L, SPACE_S, set_role, tokens

FIRST_RUN = "Run a first benchmark"


def next_step(kind: str, model: str, levels: str, requests: int, max_tokens: int) -> str:
    """The empty state's sentence: what a first run measures, or what it still needs."""
    if model:
        return (
            f"Measure {model_name(kind, model)} on {ENGINE_NAMES[kind]}: output tokens/s and latency at concurrency "
            f"{levels or '—'}, {requests} requests of up to {max_tokens} tokens each."
        )
    if kind == "llamacpp":
        return "Load a model in Chat, or choose a .gguf file, to measure its tokens/s and latency here."
    if kind == "vllm":
        return "Start a vLLM server on the vLLM page, or type the address of a running one above."
    return "Type the name of an Ollama model above (the Models page's Ollama tab lists them)."


class BenchEmptyState(QFrame):
    """A title, one sentence and (when there is a next step to take here) a button."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("bench_empty")
        set_role(self, "card")
        self.icon = QLabel()
        self.icon.setPixmap(icon("bench", sizes=(32,)).pixmap(icon_size(32)))
        self.title = QLabel(FIRST_RUN)
        set_role(self.title, "empty-title")
        self.text = QLabel()
        set_role(self.text, "muted")
        self.text.setWordWrap(True)
        self.text.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.button = QPushButton()
        self.button.setObjectName("bench_empty_action")
        self._action: Callable[[], object] | None = None
        self.button.clicked.connect(self._clicked)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_L, SPACE_L, SPACE_L, SPACE_L)
        layout.setSpacing(SPACE_S)
        layout.addStretch(1)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addWidget(self.title, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addWidget(self.text)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(2)

    def show_state(
        self, title: str, text: str, action: tuple[str, str, Callable[[], object]] | None = None, accent: bool = True
    ) -> None:
        """``action``: (button text, icon name, what it does); None hides the button."""
        self.title.setText(title)
        self.text.setText(text)
        self.button.setVisible(action is not None)
        if action is not None:
            label, name, self._action = action
            self.button.setText(label)
            self.button.setIcon(icon(name, tokens(self.palette()).on_accent if accent else None))
            set_role(self.button, "accent" if accent else "")

    def _clicked(self) -> None:
        if self._action is not None:
            self._action()
