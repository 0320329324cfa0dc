"""The model bar above the chat: pick a model (the recent ones, then the library's GGUFs, then other engines'
models, or a file from the dialog), load/unload with progress. Its status text ("Loaded in 0.8 s · context 4,096")
is elided, so it never widens the window."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from app.services.engines.entries import OLLAMA_PREFIX, engine_prefix, entry_label
from app.ui.style.icons import icon
from app.ui.style.theme import set_role
from app.ui.widgets.elided_label import ElidedLabel

PICKER_TIP = "Recent models, the library's models and other engines' models. Use Open… for another .gguf file."


class ModelBar(QWidget):
    """Emits requests; the chat panel does the work and reports back with ``set_loading``/``set_loaded``."""

    load_requested = Signal(str)
    unload_requested = Signal()
    selection_changed = Signal(str)  # the person picked another model (not loaded yet); "" for none
    shown = Signal()  # on screen (each show): the chat lists the library then, not before

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.models = QComboBox()
        self.models.setObjectName("model_picker")
        self.models.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.models.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.models.setMinimumContentsLength(14)
        self.models.setMaximumWidth(420)
        self.models.setToolTip(PICKER_TIP)
        self.models.setPlaceholderText("No model chosen — open a .gguf file")
        self.open_button = QToolButton()
        self.open_button.setIcon(icon("folder"))
        self.open_button.setToolTip("Open a .gguf model file… (Ctrl+O)")
        self.load_button = QPushButton("Load")
        set_role(self.load_button, "accent")
        self.unload_button = QPushButton("Unload")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(90)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.elapsed = ElidedLabel(mode=Qt.TextElideMode.ElideRight)
        self.elapsed.setObjectName("model_status")
        set_role(self.elapsed, "muted")
        self._started = 0.0
        self._timer = QTimer(self)
        self._timer.setInterval(200)
        self._timer.timeout.connect(self._tick)
        self._dialog: QFileDialog | None = None
        self._recent: list[str] = []
        self._library: list[str] = []
        self._engines: dict[str, list[str]] = {}  # prefix -> entries (``ollama:NAME`` …)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        for widget in (self.models, self.open_button, self.load_button, self.unload_button, self.progress):
            layout.addWidget(widget)
        layout.addWidget(self.elapsed, 1)
        self.open_button.clicked.connect(self.choose_file)
        self.load_button.clicked.connect(self._request_load)
        self.unload_button.clicked.connect(self.unload_requested)
        self.models.currentIndexChanged.connect(self._update_buttons)
        self.models.activated.connect(lambda _index: self.selection_changed.emit(self.current_path() or ""))
        self.set_loaded(None)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.shown.emit()

    def set_recent(self, paths: list[str]) -> None:
        """The recent models, first (the first is chosen when nothing is)."""
        self._recent = list(paths)
        self._fill()

    def set_library(self, paths: list[str]) -> None:
        """The library's GGUFs, after the recent models (those already recent are not listed twice)."""
        self._library = list(paths)
        self._fill()

    def set_ollama_models(self, names: list[str], status: str) -> None:
        """Offer Ollama's models after the local files (entries ``ollama:NAME``)."""
        self.set_engine_models(OLLAMA_PREFIX, names)
        self.models.setToolTip(f"{PICKER_TIP}\n{status}")

    def set_engine_models(self, prefix: str, names: list[str]) -> None:
        """Replace one engine's entries (``prefix`` + name) in the picker."""
        self._engines[prefix] = [prefix + name for name in names]
        self._fill()

    def _fill(self) -> None:
        """Rebuild the list: recent, library, other engines; the chosen model stays chosen while it is offered (a
        file chosen with Open… always is)."""
        current = self.current_path()
        recent = set(self._recent)
        library = [path for path in self._library if path not in recent]
        engines = [entry for entries in self._engines.values() for entry in entries]
        self.models.blockSignals(True)
        self.models.clear()
        for entry, tip in (
            *((path, path) for path in self._recent),
            *((path, f"{path}\nIn the library") for path in library),
            *((entry, entry_label(entry)) for entry in dict.fromkeys(engines) if entry not in recent),
        ):
            self.models.addItem(entry_label(entry), entry)
            self.models.setItemData(self.models.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        if current and (self.models.findData(current) >= 0 or not engine_prefix(current)):
            self.select(current)
        elif self._recent:
            self.models.setCurrentIndex(0)
        self.models.blockSignals(False)
        self._update_buttons()

    def select(self, path: str) -> None:
        index = self.models.findData(path)
        if index < 0:
            self.models.insertItem(0, entry_label(path), path)
            index = 0
        self.models.setCurrentIndex(index)

    def current_path(self) -> str | None:
        data = self.models.currentData()
        return str(data) if data else None

    def choose_file(self) -> None:
        """A non-blocking file dialog; picking a file loads it."""
        self._dialog = QFileDialog(self, "Open a GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(self._file_chosen)
        self._dialog.open()

    def _file_chosen(self, path: str) -> None:
        if path:
            self.select(path)
            self.load_requested.emit(path)

    def _request_load(self) -> None:
        path = self.current_path()
        if path:
            self.load_requested.emit(path)

    def set_loading(self, name: str) -> None:
        self._started = time.monotonic()
        self.progress.show()
        self.elapsed.set_full_text(f"Loading {name}…")
        self._timer.start()
        self.load_button.setEnabled(False)

    def _tick(self) -> None:
        self.elapsed.set_full_text(f"Loading… {time.monotonic() - self._started:.1f} s")

    def set_loaded(self, loaded_path: str | None, note: str = "") -> None:
        self._timer.stop()
        self.progress.hide()
        self.loaded_path = loaded_path
        self.elapsed.set_full_text(note)
        self._update_buttons()

    @property
    def loading(self) -> bool:
        return self._timer.isActive()

    def _update_buttons(self) -> None:
        current = self.current_path()
        loaded = getattr(self, "loaded_path", None)
        self.load_button.setEnabled(bool(current))
        self.load_button.setText("Reload" if current and current == loaded else "Load")
        self.unload_button.setEnabled(loaded is not None)
        self.unload_button.setVisible(loaded is not None)
