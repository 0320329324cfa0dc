"""Offers the starter model when no model has been used yet."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from app.services import starter_model


class StarterBanner(QFrame):
    use_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.button = QPushButton("Use the starter model")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.hide()
        layout = QHBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.button)
        self.button.clicked.connect(self._clicked)
        self.hide()

    def refresh(self, recent_models: list[str], models_dir: Path) -> None:
        """Show the offer only while no model has been used."""
        if recent_models:
            self.hide()
            return
        if starter_model.package_installed():
            self.text.setText(
                f"<b>No model yet.</b> Chat right away with the starter model, {starter_model.DISPLAY_NAME}, "
                f"written to {models_dir} (no download). {starter_model.NOTE}"
            )
            self.button.show()
        else:
            self.text.setText(
                "<b>No model yet.</b> Open a .gguf file above, or get the small starter model: "
                f"{starter_model.INSTALL_HINT}"
            )
            self.button.hide()
        self.show()

    def _clicked(self) -> None:
        self.button.setEnabled(False)
        self.progress.setValue(0)
        self.progress.show()
        self.use_requested.emit()

    def show_progress(self, done: int, total: int) -> None:
        self.progress.setMaximum(max(total, 1))
        self.progress.setValue(done)

    def show_error(self, text: str) -> None:
        self.progress.hide()
        self.button.setEnabled(True)
        self.text.setText(text)
