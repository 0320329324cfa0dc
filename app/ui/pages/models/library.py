"""The Models → Library page: every local model in one table (name over file, a "Loaded" badge, a Chat action per
row), and for the chosen model a human summary first — family, parameters, quantization, size, context, licence,
and whether it fits this machine — then the memory estimate, and the raw metadata and chat template under
"Advanced". With no model yet, an empty state offers the starter model, Discover and adding a folder.

The library is the workstation's (``workstation.library``): this page shows its last scan, asks for a fresh one on
its first show, and follows ``LibraryChanged`` (a finished download, a model folder added here or in Settings).
Scans, header reads, machine memory and deletes run off the Qt thread; the Qt thread only fills widgets. The
"Loaded" badge follows the engine host (``ModelLoaded`` / ``ModelUnloaded``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QModelIndex, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QFontDatabase
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.load_checks import draft_header
from app.core.params import LoadParams
from app.core.speculative import DRAFT_PREFIX
from app.core.units import format_bytes
from app.services.engines.entries import EngineKind
from app.services.engines.events import EngineEvent, ModelLoaded, ModelUnloaded
from app.services.library.details import EntryDetails, entry_details
from app.services.library.events import LibraryChanged, LibraryEvent, LibraryScanFailed, LibraryScanning
from app.services.library.index import (
    KIND_GGUF,
    SOURCE_OLLAMA,
    LibraryEntry,
    LibraryError,
    LibraryScan,
)
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.models.estimator import ModelEstimator
from app.ui.pages.models.table import (
    ACTION,
    ENTRY_ROLE,
    LibraryFilter,
    LibraryTableModel,
    make_table_view,
    secondary_text,
)
from app.ui.pages.models.widgets import (
    Disclosure,
    EmptyState,
    FactsGrid,
    badge,
    fit_role,
    icon_button,
    refresh_icons,
    short_verdict,
    shrinking_label,
)
from app.ui.style.restyle import NextTurn, is_palette_change
from app.ui.style.theme import SPACE_M, SPACE_S, set_role
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.notices import NoticeArea
from app.ui.widgets.palette import error_color, set_text_color

log = logging.getLogger("app.ui.models")
CONTENT, EMPTY, NO_MATCH = range(3)
NOTHING_CHOSEN = "Choose a model to see what it is and whether it fits here."


def _monospace(name: str) -> QPlainTextEdit:
    edit = QPlainTextEdit()
    edit.setObjectName(name)
    edit.setReadOnly(True)
    edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    edit.setMinimumHeight(160)
    return edit


class ModelsPanel(Page):
    load_in_chat_requested = Signal(str)  # a GGUF path (or "ollama:NAME" is never sent from here)
    serve_in_vllm_requested = Signal(str)  # an HF-format folder
    starter_requested = Signal()  # "Use the starter model" in the empty state (the chat page owns the flow)
    open_page_requested = Signal(str)  # a page path, e.g. "models/discover"

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.library = workstation.library
        self.entries: list[LibraryEntry] = []
        self.last_scan: LibraryScan | None = None
        self.details: EntryDetails | None = None
        self.delete_box: QMessageBox | None = None
        self.folder_dialog: QFileDialog | None = None
        self.loaded: dict[EngineKind, str] = {}
        self._scan_task: asyncio.Task[Any] | None = None
        self._start_task: asyncio.Task[Any] | None = None
        self._restyle = NextTurn(self, self._style)  # a theme change reloads the table: not while Qt restyles
        self._build()
        self._follow_the_host()
        self.follow(self.library.subscribe(self._library_event))

    # --- layout ------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.search = QLineEdit()
        self.search.setObjectName("library_search")
        self.search.setPlaceholderText("Search: name, file, family, quantization…")
        self.search.setClearButtonEnabled(True)
        self.rescan_button = icon_button("Rescan", "refresh", self.rescan)
        self.add_folder_button = icon_button("Add folder…", "folder", self.add_folder)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setFixedWidth(90)
        self.progress.hide()
        self.status_label = shrinking_label("", "library_status", "muted")
        self.notice = NoticeArea()
        self.model = LibraryTableModel(self)
        self.proxy = LibraryFilter(self)
        self.proxy.setSourceModel(self.model)
        self.table = make_table_view(self.proxy)
        self.problems_label = shrinking_label("", "library_problems")
        self.problems_label.hide()
        self.empty = EmptyState(
            "library_empty",
            "models",
            "No models yet",
            "Start with the small starter model, find one to download, or add a folder that already holds GGUF files.",
            [
                ("Use the starter model", self.starter_requested.emit),
                ("Discover models", lambda: self.open_page_requested.emit("models/discover")),
                ("Add a folder…", self.add_folder),
            ],
        )
        self.no_match = EmptyState(
            "library_no_match", "search", "No model matches", "Try other words.", [("Clear search", self.search.clear)]
        )
        self._build_detail()
        self._lay_out()
        self._connect()
        self._style()
        self._selection_changed()

    def _build_detail(self) -> None:
        self.title = shrinking_label(NOTHING_CHOSEN, "model_title", "section")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.loaded_badge = badge("Loaded", "loaded_badge")
        self.loaded_badge.setToolTip("The chat has this model loaded.")
        self.loaded_badge.hide()
        self.subtitle = shrinking_label("", "model_subtitle", "muted")
        self.load_button = icon_button("Chat", "chat", self.load_selected, accent=True)
        self.show_button = icon_button("Show in folder", "folder", self.show_selected)
        self.delete_button = icon_button("Delete…", "trash", self.ask_delete)
        self.fits_label = shrinking_label("", "model_fits", "muted")
        self.facts = FactsGrid("model_facts")
        self.estimator = ModelEstimator()
        self.metadata_view = _monospace("metadata_view")
        self.template_view = _monospace("template_view")
        self.detail_tabs = QTabWidget()
        self.detail_tabs.addTab(self.metadata_view, "Metadata")
        self.detail_tabs.addTab(self.template_view, "Chat template")
        self.estimate_section = Disclosure("Memory estimate", self.estimator, "estimate_section", expanded=True)
        self.defaults_section = self._defaults_section()
        self.advanced_section = Disclosure("Advanced: metadata and chat template", self.detail_tabs, "advanced_section")

    def _defaults_section(self) -> Disclosure:
        """The model's own chat defaults (the per-model settings store the chat and the server read)."""
        from app.ui.pages.models.defaults import ModelDefaultsBox

        self.defaults_box = ModelDefaultsBox(self.workstation)
        return Disclosure("Chat defaults for this model", self.defaults_box, "defaults_section")

    def _lay_out(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.search, 1)
        top.addWidget(self.progress)
        top.addWidget(self.rescan_button)
        top.addWidget(self.add_folder_button)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.setObjectName("library_splitter")
        splitter.addWidget(self.table)
        splitter.addWidget(self._detail_pane())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([560, 420])
        self.pages = QStackedWidget()
        self.pages.addWidget(splitter)
        self.pages.addWidget(self.empty)
        self.pages.addWidget(self.no_match)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_S)
        layout.addLayout(top)
        layout.addWidget(self.status_label)
        layout.addWidget(self.notice)
        layout.addWidget(self.pages, 1)
        layout.addWidget(self.problems_label)

    def _detail_pane(self) -> QWidget:
        title_row = QHBoxLayout()
        title_row.addWidget(self.title, 1)
        title_row.addWidget(self.loaded_badge, 0, Qt.AlignmentFlag.AlignTop)
        actions = QHBoxLayout()
        for button in (self.load_button, self.show_button, self.delete_button):
            actions.addWidget(button)
        actions.addStretch(1)
        body = QWidget()
        body.setObjectName("model_detail")
        column = QVBoxLayout(body)
        column.setContentsMargins(SPACE_S, 0, SPACE_S, SPACE_S)
        column.addLayout(title_row)
        column.addWidget(self.subtitle)
        column.addLayout(actions)
        column.addWidget(self.fits_label)
        column.addWidget(self.facts)
        column.addWidget(self.estimate_section)
        column.addWidget(self.defaults_section)
        column.addWidget(self.advanced_section)
        column.addStretch(1)
        self.detail_scroll = QScrollArea()
        self.detail_scroll.setObjectName("model_detail_scroll")
        self.detail_scroll.setWidgetResizable(True)
        self.detail_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.detail_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.detail_scroll.setWidget(body)
        self.detail_scroll.setMinimumWidth(300)
        return self.detail_scroll

    def _connect(self) -> None:
        self.search.textChanged.connect(self._search_changed)
        self.table.selectionModel().selectionChanged.connect(self._selection_changed)
        self.table.doubleClicked.connect(self.load_selected)
        delegate = self.table.itemDelegateForColumn(ACTION)
        delegate.clicked.connect(self._row_action)  # type: ignore[attr-defined]
        self.estimator.verdict_changed.connect(self._show_fit)
        self.defaults_box.speculative_changed.connect(self._speculation_chosen)

    def _style(self) -> None:
        set_text_color(self.problems_label, error_color(self.palette()))
        refresh_icons(self)
        if self.entries:  # unusable rows in the palette's red; the chosen model stays chosen
            selected = self.selected_entry()
            self.model.set_entries(self.entries, error_color(self.palette()))
            if selected is not None:
                self.select_path(selected.path)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if is_palette_change(event):
            self._restyle()

    # --- the engine host: which model is loaded --------------------------------------------------------------
    def _follow_the_host(self) -> None:
        host = self.workstation.host
        for kind in (EngineKind.LLAMACPP, EngineKind.OLLAMA):
            if (loaded := host.loaded(kind)) is not None:
                self.loaded[kind] = loaded.entry
        self.follow(host.subscribe(self._engine_event))
        self._show_loaded()

    def _engine_event(self, event: EngineEvent) -> None:
        if isinstance(event, ModelLoaded):
            self.loaded[event.engine] = event.entry
        elif isinstance(event, ModelUnloaded) and self.loaded.get(event.engine) == event.entry:
            del self.loaded[event.engine]
        else:
            return
        self._show_loaded()

    def _show_loaded(self) -> None:
        self.model.set_loaded(set(self.loaded.values()))
        entry = self.selected_entry()
        self.loaded_badge.setVisible(entry is not None and self.is_loaded(entry))

    def is_loaded(self, entry: LibraryEntry) -> bool:
        return self.model.is_loaded(entry)

    # --- scanning ----------------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """The first show: the library's last scan at once, then a fresh one (cheap: unchanged headers are cached),
        and this machine's memory for the estimator."""
        if self._start_task is None:
            if (scan := self.library.snapshot()) is not None:
                self._show_scan(scan)
            self._show_scanning(self.library.scanning)
            spawn(self.estimator.refresh_machine(), "models: machine memory")
            self._start_task = self.rescan()
        return self._start_task

    def shown_again(self) -> None:
        spawn(self.estimator.refresh_machine(), "models: machine memory")  # free memory changes: read it again

    async def shutdown(self) -> None:
        """Stop following the library and the engines; a scan in progress is the library's (it finishes there)."""
        await super().shutdown()
        if self._scan_task is not None and not self._scan_task.done():
            await asyncio.wait({self._scan_task}, timeout=10)

    def rescan(self) -> asyncio.Task[Any]:
        """Ask the library for a fresh scan (off the Qt thread; shared with a scan in progress)."""
        self._scan_task = spawn(self.library.scan(), "models: scan library")
        return self._scan_task

    def _library_event(self, event: LibraryEvent) -> None:
        if isinstance(event, LibraryScanning):
            self._show_scanning(True, event.files_seen)
        elif isinstance(event, LibraryChanged):
            self._show_scanning(False)
            self._show_scan(event.scan)
        elif isinstance(event, LibraryScanFailed):
            self._show_scanning(False)
            self._say(event.message, error=True)

    def _show_scanning(self, scanning: bool, files_seen: int = 0) -> None:
        self.progress.setVisible(scanning)
        self.rescan_button.setEnabled(not scanning)
        if scanning:
            self.status_label.setText(f"Scanning… {files_seen} files" if files_seen else "Scanning…")

    def _show_scan(self, scan: LibraryScan) -> None:
        selected = self.selected_entry()
        self.last_scan = scan
        self.entries = scan.entries
        self.model.set_entries(scan.entries, error_color(self.palette()))
        total = sum(e.size_bytes for e in scan.entries if not e.error)
        broken = sum(1 for e in scan.entries if e.error)
        count = len(scan.entries)
        text = f"{count} model{'' if count == 1 else 's'} · {format_bytes(total)}" if scan.entries else ""
        self.status_label.setText(text + (f" · {broken} unusable (in red)" if broken else ""))
        roots = self.library.roots().all()
        self.status_label.setToolTip("Looked in:\n" + "\n".join(str(r) for r in roots))
        self.problems_label.setText("\n".join(scan.problems))
        self.problems_label.setVisible(bool(scan.problems))
        self._update_page()
        if selected is None or not self.select_path(selected.path):
            self._select_something()

    def _select_something(self) -> None:
        """With nothing chosen yet, the details show the loaded model (else the first row): what it is and
        whether it fits, without a click."""
        for path in self.loaded.values():
            if self.select_path(path):
                return
        if self.proxy.rowCount() > 0:
            self.table.selectRow(0)

    def _search_changed(self, text: str) -> None:
        self.proxy.set_search(text)
        self._update_page()

    def _update_page(self) -> None:
        """The table, the empty state (no model at all, after a scan) or "no model matches" (a search)."""
        if self.last_scan is not None and not self.entries:
            self.pages.setCurrentIndex(EMPTY)
        elif self.entries and self.proxy.rowCount() == 0:
            self.no_match.set_text(
                "No model matches", f"Nothing in the library matches “{self.search.text().strip()}”."
            )
            self.pages.setCurrentIndex(NO_MATCH)
        else:
            self.pages.setCurrentIndex(CONTENT)

    # --- folders -----------------------------------------------------------------------------------------------
    def add_folder(self) -> None:
        """Ask for a folder (a non-blocking dialog); the library then includes it and scans."""
        dialog = QFileDialog(self, "Add a model folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.fileSelected.connect(self.add_model_folder)
        dialog.finished.connect(dialog.deleteLater)
        self.folder_dialog = dialog
        dialog.open()

    def add_model_folder(self, folder: str) -> asyncio.Task[Any] | None:
        """Add ``folder`` to the model folders (the one road for settings: saved, and the library scans again)."""
        if not folder:
            return None
        folders = self.workstation.settings.model_folders
        if folder not in folders:
            self.workstation.update_settings(model_folders=[*folders, folder])
        name = Path(folder).name or folder
        self.notice.show_notice(f"Added the folder {name}: looking for models in it…", key="folder")
        return self.rescan()

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
            button.setVisible(entry is not None)
        self.load_button.setEnabled(entry is not None and entry.error is None)
        self.load_button.setText("Serve with vLLM" if entry is not None and entry.kind != KIND_GGUF else "Chat")
        self.details = None
        self.metadata_view.setPlainText("")
        self.template_view.setPlainText("")
        self.estimator.set_draft(None)
        self.estimator.set_header(None)
        self.facts.set_facts([])
        self.fits_label.setText("")
        self.loaded_badge.setVisible(entry is not None and self.is_loaded(entry))
        for section in (self.estimate_section, self.advanced_section):
            section.setVisible(entry is not None)
        usable_gguf = entry is not None and entry.kind == KIND_GGUF and not entry.error
        self.defaults_section.setVisible(usable_gguf)
        self.defaults_box.set_entry(entry.path if entry is not None and usable_gguf else None)
        self.facts.hide()  # shown once the header has been read
        if entry is None:
            self.title.setText(NOTHING_CHOSEN)
            self.subtitle.setText("")
            return
        self.title.setText(entry.name)
        self.subtitle.setText(secondary_text(entry))
        self.subtitle.setToolTip(entry.path)
        if entry.error:
            self.fits_label.setText(entry.error)
            set_role(self.fits_label, "wont-fit")
            self.metadata_view.setPlainText(f"{entry.path}\n\n{entry.error}")
            self.estimate_section.hide()
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
            self.fits_label.setText(details.error)
            set_role(self.fits_label, "wont-fit")
            return
        self.facts.set_facts(details.facts)
        self.facts.setVisible(bool(details.facts))
        width = max((len(k) for k, _v in details.metadata), default=0)
        self.metadata_view.setPlainText("\n".join(f"{k.ljust(width)}  {v}" for k, v in details.metadata))
        self.template_view.setPlainText(details.chat_template or "This model has no chat template in its metadata.")
        self.estimator.set_header(details.header, entry.projector_bytes if entry.vision else 0)
        self.estimate_section.setVisible(details.header is not None)

    def _speculation_chosen(self, speculative: str) -> None:
        """The model's speculative decoding, shown or edited: a draft model's header is read off the Qt thread and
        joins the estimate."""
        entry = self.defaults_box.entry
        if entry is None or not speculative.startswith(DRAFT_PREFIX):
            self.estimator.set_draft(None)
        elif loop_running():
            spawn(self._read_draft(entry, speculative), "models: read the draft's header")

    async def _read_draft(self, entry: str, speculative: str) -> None:
        params = LoadParams(speculative=speculative)
        header = await asyncio.get_running_loop().run_in_executor(None, draft_header, params)
        if self.defaults_box.entry == entry and self.defaults_box.speculation.speculative() == speculative:
            self.estimator.set_draft(header)  # still the model and draft chosen

    def _show_fit(self, verdict: object) -> None:
        """The summary's one-line verdict, from the estimator (it follows the estimator's settings)."""
        from app.core.memory.fit import FitVerdict

        entry = self.selected_entry()
        if entry is None or entry.error:
            return  # the label says why the file cannot be used
        if isinstance(verdict, FitVerdict):
            self.fits_label.setText(short_verdict(verdict))
            self.fits_label.setToolTip(
                "\n".join(verdict.suggestions) or "The memory estimate below shows where it goes."
            )
            set_role(self.fits_label, fit_role(verdict))
        else:
            self.fits_label.setText("")
            set_role(self.fits_label, "muted")

    # --- actions ---------------------------------------------------------------------------------------------
    def _say(self, text: str, error: bool = False) -> None:
        self.notice.show_notice(text, level="error" if error else "info", key="action")

    def _row_action(self, index: QModelIndex) -> None:
        entry = self.proxy.index(index.row(), 0).data(ENTRY_ROLE)
        if isinstance(entry, LibraryEntry):
            self.select_path(entry.path)
            self.load_selected()

    def load_selected(self, *_args: object) -> None:
        entry = self.selected_entry()
        if entry is None or entry.error:
            return
        if entry.kind == KIND_GGUF:
            self.load_in_chat_requested.emit(entry.path)
            return
        self._say(
            "vLLM serves this Hugging Face-format model, not llama.cpp: its folder is now in the vLLM server page's "
            "model field. Start the server there, then chat with it."
        )
        self.serve_in_vllm_requested.emit(entry.path)

    def show_selected(self) -> None:
        entry = self.selected_entry()
        if entry is None:
            return
        path = Path(entry.path)
        folder = path if entry.kind != KIND_GGUF and path.is_dir() else path.parent
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            log.warning("No file manager could open %s", folder)
            self._say("No file manager could open the folder (its path is in the log).", error=True)

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
        try:
            removed = await self.library.delete(entry.path)
        except LibraryError as exc:
            log.warning("%s", exc)  # the full path goes to the log; the banner names the file
            message = str(exc)
            for path in {entry.path, str(Path(entry.path).absolute())}:
                message = message.replace(path, entry.file_name)
            self._say(message, error=True)
            return
        log.info("Deleted %s (%d files)", entry.name, len(removed))
        self._say(f"Deleted {entry.name}.")
