"""What the Batch runner shows before it has an input file: the two formats it reads, an example, and the two ways
to start (open the example, or choose a file)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout

from app.ui.style.theme import SPACE_M, SPACE_S, set_role

EXAMPLE_NAME = "batch-example.jsonl"
EXAMPLE_JSONL = (
    '{"id": "capital", "messages": [{"role": "user", "content": "What is the capital of France?"}], '
    '"max_tokens": 32}\n'
    '{"id": "primes", "messages": [{"role": "user", "content": "Name three prime numbers."}], "max_tokens": 32}\n'
    '{"id": "story", "prompt": "Once upon a time, a small robot", "max_tokens": 48}\n'
)
EXAMPLE_CSV = "id,prompt,max_tokens\nhaiku,Write a haiku about rain.,40\n"


def write_example(folder: Path) -> Path:
    """Write the example requests into ``folder`` (runs in an executor); returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / EXAMPLE_NAME
    path.write_text(EXAMPLE_JSONL, encoding="utf-8")
    return path


class BatchEmptyState(QFrame):
    """A card: what a batch file is, an example of each format, Open example and Choose file…"""

    def __init__(self, open_example: Callable[[], object], choose_file: Callable[[], object]) -> None:
        super().__init__()
        self.setObjectName("batch_empty")
        set_role(self, "card")
        title = QLabel("Run many requests at once")
        set_role(title, "empty-title")
        text = QLabel(
            "Choose a JSONL file with one request per line (chat messages or a prompt), or a CSV file with a "
            "prompt column. Results are appended to a JSONL file as they finish; a re-run skips the finished ones."
        )
        text.setWordWrap(True)
        set_role(text, "muted")
        self.example = QPlainTextEdit(EXAMPLE_JSONL + "\n# or CSV:\n" + EXAMPLE_CSV)
        self.example.setObjectName("batch_example")
        self.example.setReadOnly(True)
        self.example.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.example.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        lines = self.example.toPlainText().count("\n") + 1
        self.example.setFixedHeight(self.example.fontMetrics().lineSpacing() * (lines + 2) + 2 * SPACE_M)
        self.open_example_button = QPushButton("Open example")
        set_role(self.open_example_button, "accent")
        self.open_example_button.clicked.connect(lambda _checked=False: open_example())
        self.choose_button = QPushButton("Choose file…")
        self.choose_button.clicked.connect(lambda _checked=False: choose_file())
        buttons = QHBoxLayout()
        buttons.addWidget(self.open_example_button)
        buttons.addWidget(self.choose_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
        layout.setSpacing(SPACE_S)
        layout.addWidget(title)
        layout.addWidget(text)
        layout.addWidget(self.example)
        layout.addLayout(buttons)
