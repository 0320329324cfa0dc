"""The Models → Library page: every local model in one table, its metadata and chat template, the memory
estimate against this machine, and Load in chat / Show in file manager / Delete.

Scans, header reads, machine memory and deletes run in the executor; the Qt thread only fills widgets.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.units import format_bytes
from app.services.library.details import EntryDetails, entry_details
from app.services.library.index import (
    KIND_GGUF,
    SOURCE_OLLAMA,
    LibraryEntry,
    LibraryError,
    LibraryScan,
    ModelLibrary,
)
from app.services.workstation import Workstation
from app.ui.pages.models.estimator import ModelEstimator
from app.ui.pages.models.table import ENTRY_ROLE, LibraryFilter, LibraryTableModel, make_table_view
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.factories import wrapped_label
from app.ui.widgets.palette import error_color, muted_color, set_text_color

log = logging.getLogger("app.ui.models")


def _monospace(name: str) -> QPlainTextEdit:
    edit = QPlainTextEdit()
    edit.setObjectName(name)
    edit.setReadOnly(True)
    edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    return edit


class ModelsPanel(QWidget):
    load_in_chat_requested = Signal(str)  # a GGUF path
    serve_in_vllm_requested = Signal(str)  # an HF-format folder

    def __init__(self, context: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.entries: list[LibraryEntry] = []
        self.last_scan: LibraryScan | None = None
        self.details: EntryDetails | None = None
        self.delete_box: QMessageBox | None = None
        self._scan_task: asyncio.Task[Any] | None = None
        self._scan_again = False
        self._build()

    # --- layout ------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search models: name, architecture, quantization, path…")
        self.search.setClearButtonEnabled(True)
        self.rescan_button = QPushButton("Rescan")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setFixedWidth(120)
        self.progress.hide()
        self.status_label = wrapped_label("", "library_status", selectable=True)
        self.model = LibraryTableModel(self)
        self.proxy = LibraryFilter(self)
        self.proxy.setSourceModel(self.model)
        self.table = make_table_view(self.proxy)
        self.problems_label = wrapped_label("", "library_problems", selectable=True)
        self.problems_label.hide()
        self.title = wrapped_label("Choose a model to see its details.", "model_title", selectable=True)
        self.load_button = QPushButton("Load in chat")
        self.show_button = QPushButton("Show in file manager")
        self.delete_button = QPushButton("Delete…")
        self.notice = wrapped_label("", "models_notice", selectable=True)
        self.notice.hide()
        self.estimator = ModelEstimator()
        self.metadata_view = _monospace("metadata_view")
        self.template_view = _monospace("template_view")
        self.detail_tabs = QTabWidget()
        self.detail_tabs.addTab(self.metadata_view, "Metadata")
        self.detail_tabs.addTab(self.template_view, "Chat template")
        self._lay_out()
        self._connect()
        self._style()
        self._selection_changed()

    def _lay_out(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.search, 1)
        top.addWidget(self.progress)
        top.addWidget(self.rescan_button)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addLayout(top)
        left_layout.addWidget(self.status_label)
        left_layout.addWidget(self.table, 1)
        left_layout.addWidget(self.problems_label)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.title)
        actions = QHBoxLayout()
        for button in (self.load_button, self.show_button, self.delete_button):
            actions.addWidget(button)
        actions.addStretch(1)
        right_layout.addLayout(actions)
        right_layout.addWidget(self.notice)
        right_layout.addWidget(self.estimator)
        right_layout.addWidget(self.detail_tabs, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([780, 520])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)

    def _connect(self) -> None:
        self.search.textChanged.connect(self.proxy.set_search)
        self.rescan_button.clicked.connect(self.rescan)
        self.table.selectionModel().selectionChanged.connect(self._selection_changed)
        self.table.doubleClicked.connect(self.load_selected)
        self.load_button.clicked.connect(self.load_selected)
        self.show_button.clicked.connect(self.show_selected)
        self.delete_button.clicked.connect(self.ask_delete)

    def _style(self) -> None:
        set_text_color(self.status_label, muted_color(self.palette()))
        set_text_color(self.problems_label, error_color(self.palette()))
        if self.entries:
            self.model.set_entries(self.entries, error_color(self.palette()))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._style()

    # --- scanning ----------------------------------------------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        """The first show scans the library (and reads this machine's memory for the estimator)."""
        super().showEvent(event)
        if not loop_running():
            return
        if self._scan_task is None and self.last_scan is None:
            self.rescan()
        spawn(self.estimator.refresh_machine(), "models: machine memory")  # free memory changes: read it again

    def start(self) -> object:
        """The first show scans the library (``showEvent`` does it)."""
        return self._scan_task

    async def shutdown(self) -> None:
        """Let a scan in progress finish (it only reads files; its result is dropped)."""
        if self._scan_task is not None and not self._scan_task.done():
            await asyncio.wait({self._scan_task}, timeout=10)

    def settings_changed(self) -> None:
        """Model folders may have changed: scan again if the library was shown once."""
        if self.last_scan is not None or self._scan_task is not None:
            self.rescan()

    def rescan(self) -> asyncio.Task[Any]:
        """Index the library again (off the Qt thread); a call during a scan runs one more after it."""
        if self._scan_task is not None and not self._scan_task.done():
            self._scan_again = True
            return self._scan_task
        self._scan_task = spawn(self._rescan(), "models: scan library")
        return self._scan_task

    async def _rescan(self) -> None:
        loop = asyncio.get_running_loop()
        self.progress.show()
        self.rescan_button.setEnabled(False)
        self.status_label.setText("Scanning…")

        def progress(count: int, _path: str) -> None:
            if count % 25 == 0:
                loop.call_soon_threadsafe(self.status_label.setText, f"Scanning… {count} files")

        try:
            while True:
                self._scan_again = False
                library = ModelLibrary.for_app(self.context.settings, self.context.paths)
                scan = await loop.run_in_executor(None, library.scan, progress)
                self._show_scan(scan)
                if not self._scan_again:
                    break
        finally:
            self.progress.hide()
            self.rescan_button.setEnabled(True)

    def _show_scan(self, scan: LibraryScan) -> None:
        selected = self.selected_entry()
        self.last_scan = scan
        self.entries = scan.entries
        self.model.set_entries(scan.entries, error_color(self.palette()))
        total = sum(e.size_bytes for e in scan.entries if not e.error)
        broken = sum(1 for e in scan.entries if e.error)
        count = len(scan.entries)
        text = f"{count} model{'' if count == 1 else 's'}, {format_bytes(total)}" if scan.entries else ""
        text = text + (f"; {broken} unusable (shown in red)" if broken else "")
        self.status_label.setText(text or "No models yet. Add a model folder in Settings, or download one.")
        self.problems_label.setText("\n".join(scan.problems))
        self.problems_label.setVisible(bool(scan.problems))
        if selected is not None:
            self.select_path(selected.path)

    # --- selection and details -----------------------------------------------------------------------------------
    def select_path(self, path: str) -> bool:
        for row in range(self.proxy.rowCount()):
            entry = self.proxy.index(row, 0).data(ENTRY_ROLE)
            if isinstance(entry, LibraryEntry) and entry.path == path:
                self.table.selectRow(row)
                return True
        return False

    def selected_entry(self) -> LibraryEntry | None:
        rows = self.table.selectionModel().selectedRows(0) if self.table.selectionModel() else []
        entry = rows[0].data(ENTRY_ROLE) if rows else None
        return entry if isinstance(entry, LibraryEntry) else None

    def _selection_changed(self, *_args: object) -> None:
        entry = self.selected_entry()
        for button in (self.load_button, self.show_button, self.delete_button):
            button.setEnabled(entry is not None)
        self.load_button.setEnabled(entry is not None and entry.error is None)
        self.notice.hide()
        self.details = None
        self.metadata_view.setPlainText("")
        self.template_view.setPlainText("")
        self.estimator.set_header(None)
        if entry is None:
            self.title.setText("Choose a model to see its details.")
            return
        where = entry.repo_id or str(Path(entry.path).parent)
        self.title.setText(f"<b>{entry.name}</b> — {entry.backend} · {format_bytes(entry.size_bytes)} · {where}")
        if entry.error:
            self.metadata_view.setPlainText(f"{entry.path}\n\n{entry.error}")
            return
        self.metadata_view.setPlainText("Reading…")
        if loop_running():
            spawn(self._read_details(entry), "models: read details")

    async def _read_details(self, entry: LibraryEntry) -> None:
        details = await asyncio.get_running_loop().run_in_executor(None, entry_details, entry)
        if self.selected_entry() != entry:
            return  # the selection moved on while the header was read
        self.details = details
        if details.error:
            self.metadata_view.setPlainText(details.error)
            return
        width = max((len(k) for k, _v in details.metadata), default=0)
        self.metadata_view.setPlainText("\n".join(f"{k.ljust(width)}  {v}" for k, v in details.metadata))
        self.template_view.setPlainText(details.chat_template or "This model has no chat template in its metadata.")
        self.estimator.set_header(details.header)

    # --- actions ---------------------------------------------------------------------------------------------
    def _say(self, text: str, error: bool = False) -> None:
        self.notice.setText(text)
        set_text_color(self.notice, error_color(self.palette()) if error else self.palette().windowText().color())
        self.notice.show()

    def load_selected(self, *_args: object) -> None:
        entry = self.selected_entry()
        if entry is None or entry.error:
            return
        if entry.kind == KIND_GGUF:
            self.load_in_chat_requested.emit(entry.path)
            return
        self._say(
            "This is a Hugging Face-format model: vLLM serves it, not llama.cpp. Its folder is now in the vLLM "
            "page's model field (Batch → vLLM server): start the server there, then chat with it."
        )
        self.serve_in_vllm_requested.emit(entry.path)

    def show_selected(self) -> None:
        entry = self.selected_entry()
        if entry is None:
            return
        path = Path(entry.path)
        folder = path if entry.kind != KIND_GGUF and path.is_dir() else path.parent
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self._say(f"No file manager could open {folder}.", error=True)

    def ask_delete(self) -> None:
        entry = self.selected_entry()
        if entry is None:
            return
        if entry.source == SOURCE_OLLAMA:
            self._say(
                f"{entry.name} belongs to Ollama: delete it on the Ollama tab (or run `ollama rm {entry.name}`), "
                "so Ollama's manifests and shared blobs stay consistent.",
                error=True,
            )
            return
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Delete model",
            f"Delete {entry.name} from disk?\n\n{entry.path}\n\nThis frees {format_bytes(entry.size_bytes)} "
            "and cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.button(QMessageBox.StandardButton.Yes).setText("Delete")
        box.finished.connect(lambda result: self._delete_answered(box, entry, result))
        self.delete_box = box
        box.open()

    def _delete_answered(self, box: QMessageBox, entry: LibraryEntry, result: int) -> None:
        box.deleteLater()
        if self.delete_box is box:
            self.delete_box = None
        if result == QMessageBox.StandardButton.Yes.value:
            spawn(self._delete(entry), "models: delete")

    async def _delete(self, entry: LibraryEntry) -> None:
        library = ModelLibrary.for_app(self.context.settings, self.context.paths)
        try:
            removed = await asyncio.get_running_loop().run_in_executor(None, library.delete, entry.path)
        except LibraryError as exc:
            self._say(str(exc), error=True)
            return
        log.info("Deleted %s (%d files)", entry.name, len(removed))
        await self.rescan()
        self._say(f"Deleted {entry.name}.")
