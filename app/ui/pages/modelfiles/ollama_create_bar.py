"""Create in Ollama: the inline strip that names the new model and creates it, with progress and a status line."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QLineEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.core.modelfile.parser import Modelfile, ModelfileError
from app.services.ollama.client import OllamaError
from app.services.ollama.create import CreateProgress, build_create_request, create_model
from app.ui.pages.modelfiles.files import InlineBar
from app.ui.style.theme import set_role
from app.ui.tasks import spawn

if TYPE_CHECKING:
    from app.services.ollama.shared import SharedOllama

log = logging.getLogger("app.ui.modelfiles")


class OllamaCreateBar(QWidget):
    """``bar`` (the name, Create, progress, Close) shows on :meth:`offer`; ``status`` stays below it.

    Create and Return in the name field emit ``create_requested``: the panel answers with :meth:`create_from` and
    the Modelfile on screen. ``created`` carries the new model's name once Ollama says "success".
    """

    create_requested = Signal()
    created = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar = InlineBar("Create the model in Ollama as")
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("my-model:latest")
        self.go = QPushButton("Create")
        self.close_button = QPushButton("Close")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(200)
        self.progress.hide()
        for widget in (self.name_edit, self.go, self.progress, self.close_button):
            self.bar.buttons.addWidget(widget)
        self.status = QLabel()
        self.status.setObjectName("create_status")
        self.status.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        self.go.clicked.connect(self.create_requested)
        self.name_edit.returnPressed.connect(self.create_requested)
        self.close_button.clicked.connect(self.bar.hide)

    def offer(self, stem: str) -> None:
        """Show the bar; an empty name is filled from ``stem`` (the Modelfile's name), made a valid model name."""
        if not self.name_edit.text():
            self.name_edit.setText(re.sub(r"[^A-Za-z0-9._:-]+", "-", stem).strip("-").lower())
        self.status.setText("")
        self.bar.show()
        self.name_edit.setFocus()

    def create_from(self, modelfile: Modelfile, base: Path, ollama: SharedOllama) -> None:
        """Create the typed name from ``modelfile`` (its FROM and ADAPTER paths start at ``base``) in Ollama."""
        name = self.name_edit.text().strip()
        if not name:
            self.status.setText("Type a name for the new Ollama model.")
            return
        spawn(self._create(name, modelfile, base, ollama), "create in Ollama")

    async def _create(self, name: str, modelfile: Modelfile, base: Path, ollama: SharedOllama) -> None:
        loop = asyncio.get_running_loop()
        self.go.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.show()
        self._say(f"Preparing {name}: reading the files that FROM and ADAPTER name…")
        try:
            plan = await loop.run_in_executor(None, build_create_request, modelfile, base)
            async with ollama.use() as service:
                await create_model(service, name, plan, self._progress)
        except (OllamaError, ModelfileError, OSError) as exc:
            log.warning("create %s failed: %s", name, exc)
            self._say(f"{name} was not created: {exc}", error=True)
        else:
            self._say(f"Created {name} in Ollama. It is ready for ollama run {name}.")
            self.created.emit(name)
        finally:
            self.go.setEnabled(True)
            self.progress.hide()

    def _progress(self, progress: CreateProgress) -> None:
        if progress.total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * progress.completed / progress.total))
        else:
            self.progress.setRange(0, 0)
        self._say(progress.status)

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        set_role(self.status, "error" if error else "")
