"""A panel that says what it will hold, for parts of the app still being built."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class InfoPanel(QWidget):
    def __init__(self, title: str, summary: str, points: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(32, 24, 32, 24)
        heading = QLabel(f"<h2>{title}</h2>")
        body = QLabel(summary + "<ul>" + "".join(f"<li>{p}</li>" for p in points) + "</ul>")
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.RichText)
        body.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(heading)
        layout.addWidget(body)
        layout.addStretch(1)


PANELS = {
    "Models": (
        "The model library is coming next. Until then, open any .gguf file from the Chat panel; "
        "Ollama's models are in the Ollama tab.",
        [
            "Your GGUF files, the Hugging Face cache and Ollama's store in one list, with GGUF metadata",
            "A memory estimate checked against llama.cpp, and whether the model fits this machine",
            "Search and download from the Hugging Face Hub, with resume and verification",
        ],
    ),
    "Monitor": (
        "The live VRAM and KV-page monitor will live here. The status bar already shows the context used.",
        [
            "NVML per GPU and per process (and RAM/CPU on machines without a GPU)",
            "vLLM's KV block pool and llama.cpp's context cells, live",
            "Charts of memory, KV usage, tokens/s and requests, with alerts",
        ],
    ),
}
