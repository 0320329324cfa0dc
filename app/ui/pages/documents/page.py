"""The Documents page: a view of the workstation's documents service — collections, their files with state, adding
files and folders (dialogs or drag and drop) with background indexing, Pause/Resume/Cancel, and search with the
passage's full text. An embedding model (the library's GGUF embedding models, or none) makes search hybrid — keywords
and meaning — once the passages are embedded in the background; the row under the search says how far that is.

Nothing here touches the disk or SQLite on the Qt thread: lists and searches are awaited from the service (which
runs them in worker threads), and indexing progress arrives as the service's events on the loop's thread."""

from __future__ import annotations

import asyncio
import html
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.services.documents import events as ev
from app.services.documents.embedder import embedding_models
from app.services.documents.search import SearchHit
from app.services.documents.service import AUTO, HYBRID, DocumentsEvent, IndexProgress
from app.services.documents.store import CollectionSummary, FileRecord
from app.services.engines.entries import display_name
from app.services.library.events import LibraryChanged, LibraryEvent
from app.services.library.index import EntryKind
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.style.icons import icon
from app.ui.style.theme import set_role, tokens
from app.ui.tasks import spawn

log = logging.getLogger("app.ui.documents")
DEFAULT_COLLECTION = "default"
ALL = "All collections"
TOP_HITS = 10
COLUMNS = ("File", "State", "Chunks", "Pages", "Path")
WATCH_TIP = ("Keep this collection in step with its folders while the app runs: new and changed files are indexed, "
             "deleted ones dropped. Folders added here are watched.")  # fmt: skip
EMPTY_TEXT = (
    "Add files or a folder to search them: the best passages, with their file and page. PDF, Word, Markdown, HTML "
    "and text files are indexed on this computer; nothing leaves it."
)
NO_EMBEDDING = "None — keyword search only"
EMBEDDING_TIP = (
    "A GGUF embedding model from your library turns passages into vectors, so search also finds passages that mean "
    "what you asked in other words. It runs beside the chat model when both fit in memory."
)
_MARK = re.compile(r"\[([^\[\]]*)\]")


W = TypeVar("W", bound=QWidget)


def _named(widget: W, name: str) -> W:
    widget.setObjectName(name)
    return widget


def snippet_html(snippet: str) -> str:
    """The store's snippet (matched terms in [brackets]) as HTML, the terms in bold."""
    return _MARK.sub(lambda m: f"<b>{m.group(1)}</b>", html.escape(snippet.replace("\n", " "), quote=False))


def state_text(record: FileRecord, current: str | None) -> str:
    if record.path == current:
        return "indexing"
    if record.state == "failed":
        return f"failed: {record.reason or 'unknown reason'}"
    return record.state


class DocumentsPage(Page):
    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.service = workstation.documents
        self.collections: list[CollectionSummary] = []
        self.records: list[FileRecord] = []
        self.hits: list[SearchHit] = []
        self.search_mode: str | None = None  # how the hits shown were ranked ("keyword" or "hybrid")
        self.embedding_choices: list[str] = []  # the library's embedding models (paths)
        self._models_task: asyncio.Task[Any] | None = None
        self.loaded = False  # the first list has arrived
        self._new_collection: str | None = None  # named, files not yet added
        self._started: asyncio.Task[Any] | None = None
        self._refresh_task: asyncio.Task[Any] | None = None
        self._search_task: asyncio.Task[Any] | None = None
        self._refresh_timer = QTimer(self, singleShot=True, interval=250)
        self._refresh_timer.timeout.connect(self.refresh)
        self._search_timer = QTimer(self, singleShot=True, interval=200)
        self._search_timer.timeout.connect(self.search_now)
        self.setAcceptDrops(True)
        self._build()
        self.follow(self.service.subscribe(self._service_event))
        self.follow(workstation.library.subscribe(self._library_event))
        self._show_progress(self.service.progress())
        self._show_embedding(self.service.embedding())

    # --- layout --------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        title = QLabel("Documents")
        set_role(title, "title")
        self.search_box = _named(QLineEdit(), "documents_search")
        self.search_box.setPlaceholderText("Search your documents…")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.search_box.textChanged.connect(lambda _text: self._search_timer.start())
        self.search_box.returnPressed.connect(self.search_now)
        self.scope = _named(QComboBox(), "documents_scope")
        self.scope.addItems(["Selected collection", ALL])
        self.scope.currentIndexChanged.connect(lambda _i: self.search_now())
        header = QHBoxLayout()
        header.addWidget(title)
        header.addStretch(1)
        header.addWidget(self.search_box, 3)
        header.addWidget(self.scope)

        self.stack = QStackedWidget()
        self.stack.addWidget(self._build_empty())
        self.stack.addWidget(self._build_content())

        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 16, 12)
        layout.addLayout(header)
        layout.addWidget(self._build_embedding())
        layout.addWidget(self._build_progress())
        layout.addWidget(self.stack, 1)

    def _build_empty(self) -> QWidget:
        box = _named(QWidget(), "documents_empty")
        title = QLabel("No documents yet")
        set_role(title, "empty-title")
        self.empty_text = QLabel(EMPTY_TEXT, wordWrap=True)
        set_role(self.empty_text, "muted")
        self.empty_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        files = QPushButton(icon("plus"), "Add files…")
        set_role(files, "accent")
        files.clicked.connect(self.add_files)
        folder = QPushButton(icon("folder"), "Add folder…")
        folder.clicked.connect(self.add_folder)
        hint = QLabel("or drop files and folders here")
        set_role(hint, "muted")
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(files)
        buttons.addWidget(folder)
        buttons.addStretch(1)
        column = QVBoxLayout(box)
        column.setSpacing(10)
        column.setContentsMargins(48, 0, 48, 0)
        column.addStretch(1)
        column.addWidget(title, 0, Qt.AlignmentFlag.AlignHCenter)
        column.addWidget(self.empty_text)  # the column's width: its height follows (an aligned wrapped label is cut)
        column.addLayout(buttons)
        column.addWidget(hint, 0, Qt.AlignmentFlag.AlignHCenter)
        column.addStretch(2)
        self.empty_add_files, self.empty_add_folder = files, folder
        return box

    def _build_embedding(self) -> QWidget:
        row = _named(QWidget(), "documents_embedding")
        label = QLabel("Embedding model")
        set_role(label, "muted")
        self.embedding_combo = _named(QComboBox(), "documents_embedding_model")
        self.embedding_combo.setToolTip(EMBEDDING_TIP)
        # as wide as about 20 characters whatever the names (the list shows them whole, the tooltip the path)
        self.embedding_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.embedding_combo.setMinimumContentsLength(20)
        self.embedding_combo.activated.connect(self._embedding_chosen)
        self.embedding_state = _named(QLabel(), "documents_embedding_state")
        self.embedding_state.setTextFormat(Qt.TextFormat.PlainText)
        # a long reason never widens the page: the row shows what fits, the tooltip says it all
        self.embedding_state.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        set_role(self.embedding_state, "muted")
        self.embedding_bar = QProgressBar(textVisible=False)
        self.embedding_bar.setMaximumHeight(6)
        self.embedding_bar.setMaximumWidth(160)
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 2, 0, 2)
        layout.addWidget(label)
        layout.addWidget(self.embedding_combo)
        layout.addWidget(self.embedding_bar)
        layout.addWidget(self.embedding_state, 1)
        self._fill_embedding_combo()
        return row

    def _build_progress(self) -> QWidget:
        row = _named(QWidget(), "documents_progress")
        self.progress_bar = QProgressBar(textVisible=False)
        self.progress_bar.setMaximumHeight(8)
        self.progress_label = QLabel()
        self.progress_label.setMinimumWidth(120)
        self.progress_label.setTextFormat(Qt.TextFormat.PlainText)
        self.pause_button = QPushButton(icon("pause"), "Pause")
        self.pause_button.clicked.connect(self.service.pause)
        self.resume_button = QPushButton(icon("play"), "Resume")
        self.resume_button.clicked.connect(self.service.resume)
        self.cancel_button = QPushButton(icon("stop"), "Cancel")
        self.cancel_button.clicked.connect(self.service.cancel)
        text = QVBoxLayout()
        text.setSpacing(2)
        text.addWidget(self.progress_label)
        text.addWidget(self.progress_bar)
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addLayout(text, 1)
        for button in (self.pause_button, self.resume_button, self.cancel_button):
            layout.addWidget(button)
        row.hide()
        self.progress_row = row
        return row

    def _build_content(self) -> QWidget:
        # the collections, left
        self.collection_list = _named(QListWidget(), "documents_collections")
        set_role(self.collection_list, "sections")
        # a long name is elided within the column (its tooltip says it whole), never scrolled sideways
        self.collection_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.collection_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.collection_list.currentRowChanged.connect(self._collection_chosen)
        new = QPushButton(icon("plus"), "New…")
        new.setToolTip("A new collection: name it, then add files to it")
        new.clicked.connect(self.new_collection)
        self.remove_button = QPushButton(icon("trash"), "Remove…")
        self.remove_button.setToolTip("Remove the collection from the index (your files stay on disk)")
        self.remove_button.clicked.connect(self.remove_collection)
        side_buttons = QHBoxLayout()
        side_buttons.addWidget(new)
        side_buttons.addWidget(self.remove_button)
        heading = QLabel("Collections")
        set_role(heading, "section")
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 8, 0)
        side_layout.addWidget(heading)
        side_layout.addWidget(self.collection_list, 1)
        side_layout.addLayout(side_buttons)

        # the files and the search, right
        self.add_files_button = QPushButton(icon("plus"), "Add files…")
        self.add_files_button.clicked.connect(self.add_files)
        self.add_folder_button = QPushButton(icon("folder"), "Add folder…")
        self.add_folder_button.clicked.connect(self.add_folder)
        self.files_summary = QLabel()
        self.files_summary.setWordWrap(True)  # it gives way to the buttons beside it at 1024 px
        set_role(self.files_summary, "muted")
        self.watch_box = _named(QCheckBox("Watch folders"), "documents_watch")
        self.watch_box.setToolTip(WATCH_TIP)
        self.watch_box.toggled.connect(self._watch_toggled)
        toolbar = QHBoxLayout()
        toolbar.addWidget(self.files_summary, 1)
        toolbar.addWidget(self.watch_box)
        toolbar.addWidget(self.add_files_button)
        toolbar.addWidget(self.add_folder_button)
        self.table = _named(QTableWidget(0, len(COLUMNS)), "documents_files")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setWordWrap(False)
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        head.setStretchLastSection(True)
        for column, width in enumerate((170, 170, 60, 54)):
            self.table.setColumnWidth(column, width)
        self.table.cellDoubleClicked.connect(lambda row, _c: self.open_file(self.records[row].path, None))
        files_tab = QWidget()
        files_layout = QVBoxLayout(files_tab)
        files_layout.setContentsMargins(0, 8, 0, 0)
        files_layout.addLayout(toolbar)
        files_layout.addWidget(self.table, 1)

        self.results = _named(QTextBrowser(), "documents_results")
        self.results.setOpenLinks(False)
        self.results.anchorClicked.connect(self._hit_clicked)
        self.detail = _named(QTextBrowser(), "documents_detail")
        self.detail.setPlaceholderText("Click a passage to read it whole and open its file.")
        results_split = QSplitter(Qt.Orientation.Horizontal)
        results_split.addWidget(self.results)
        results_split.addWidget(self.detail)
        results_split.setSizes([500, 400])
        results_split.setChildrenCollapsible(False)

        self.tabs = _named(QTabWidget(), "documents_tabs")
        self.tabs.addTab(files_tab, "Files")
        self.tabs.addTab(results_split, "Search results")

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(side)
        split.addWidget(self.tabs)
        split.setStretchFactor(1, 1)
        split.setSizes([200, 700])
        split.setChildrenCollapsible(False)
        side.setMinimumWidth(150)
        return split

    # --- the lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> object:
        if self._started is None:
            self._started = spawn(self._refresh(), "documents: first list")
            self.list_embedding_models()
        return self._started

    def shown_again(self) -> None:
        self.refresh()

    async def shutdown(self) -> None:
        self._refresh_timer.stop()
        self._search_timer.stop()
        for task in (self._refresh_task, self._search_task, self._models_task):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await super().shutdown()

    # --- reading the service (off the Qt thread) -----------------------------------------------------------------
    def selected_collection(self) -> str | None:
        item = self.collection_list.currentItem()
        return None if item is None else str(item.data(Qt.ItemDataRole.UserRole))

    def refresh(self) -> None:
        if self._refresh_task is None or self._refresh_task.done():
            self._refresh_task = spawn(self._refresh(), "documents: refresh")
        elif not self._refresh_timer.isActive():
            self._refresh_timer.start()  # again once this one is done

    async def _refresh(self) -> None:
        try:
            summaries = await self.service.summaries()
            chosen = self.selected_collection() or (summaries[0].name if summaries else None)
            if self._new_collection and self._new_collection not in {s.name for s in summaries}:
                chosen = self.selected_collection() or self._new_collection
            records = await self.service.files(chosen) if chosen is not None else []
            roots = await self.service.collection_roots(chosen) if chosen is not None else []
        except Exception as exc:  # a database that cannot be read: say so, keep the page
            log.error("Could not read the document index: %s", exc)
            self.files_summary.setText(f"Could not read the document index: {exc}")
            return
        self.loaded = True
        self._show_collections(summaries, chosen)
        self._show_files(records)
        self._show_watch(roots)

    def _show_watch(self, roots: list[tuple[str, bool]]) -> None:
        """The Watch box: on when the collection's folders are watched; off (and unavailable) without any."""
        watched = sum(1 for _path, on in roots if on)
        self.watch_box.blockSignals(True)
        self.watch_box.setChecked(watched > 0)
        self.watch_box.setEnabled(bool(roots))
        self.watch_box.blockSignals(False)
        if not roots:
            self.watch_box.setToolTip(WATCH_TIP + "\nAdd a folder or files first.")
        else:
            self.watch_box.setToolTip(f"{WATCH_TIP}\nWatching {watched} of the {len(roots)} folders and files added.")

    def _watch_toggled(self, on: bool) -> None:
        name = self.selected_collection()
        if name is not None:
            spawn(self._set_watch(name, on), "documents: watch")

    async def _set_watch(self, name: str, on: bool) -> None:
        try:
            await self.service.watch_collection(name, on)
        except Exception as exc:  # the index could not be written: say so, keep the page
            log.error("Could not change watching of %s: %s", name, exc)
            self.files_summary.setText(f"Could not change watching: {exc}")
        self.refresh()

    def _show_collections(self, summaries: list[CollectionSummary], chosen: str | None) -> None:
        self.collections = summaries
        names = [s.name for s in summaries]
        if self._new_collection and self._new_collection not in names:
            summaries = [*summaries, CollectionSummary(self._new_collection, 0, 0, 0, 0, 0)]
        self.collection_list.blockSignals(True)
        self.collection_list.clear()
        for summary in summaries:
            failed = f", {summary.failed} failed" if summary.failed else ""
            item = QListWidgetItem(summary.name)  # its counts: the tooltip, and the line above the files
            item.setData(Qt.ItemDataRole.UserRole, summary.name)
            item.setSizeHint(QSize(1, self.fontMetrics().lineSpacing() + 14))  # as wide as the list: elided
            item.setToolTip(f"{summary.name}: {summary.files} files, {summary.chunks} passages{failed}")
            self.collection_list.addItem(item)
            if summary.name == chosen:
                self.collection_list.setCurrentItem(item)
        self.collection_list.blockSignals(False)
        self.remove_button.setEnabled(bool(summaries))
        self.stack.setCurrentIndex(1 if summaries or self.service.progress().running else 0)

    def _show_files(self, records: list[FileRecord]) -> None:
        self.records = records
        current = self.service.progress().current
        t = tokens(self.palette())
        self.table.setRowCount(len(records))
        for row, record in enumerate(records):
            state = state_text(record, current)
            cells = (
                Path(record.path).name,
                state,
                str(record.chunk_count) if record.state == "indexed" else "",
                "" if record.pages is None else str(record.pages),
                record.path,
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(record.path if column != 1 else state)
                if column in (2, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if column == 1 and record.state == "failed":
                    item.setForeground(t.error)
                self.table.setItem(row, column, item)
        indexed = sum(1 for r in records if r.state == "indexed")
        failed = sum(1 for r in records if r.state == "failed")
        chunks = sum(r.chunk_count for r in records)
        name = self.selected_collection()
        if name is None:
            self.files_summary.setText("")
        elif not records:
            self.files_summary.setText(f"{name}: no files yet — add files or a folder, or drop them here")
        else:
            failed_text = f", {failed} could not be read" if failed else ""
            self.files_summary.setText(f"{indexed} of {len(records)} files indexed, {chunks} passages{failed_text}")

    def _collection_chosen(self, _row: int) -> None:
        self.refresh()
        if self.scope.currentIndex() == 0 and self.search_box.text().strip():
            self.search_now()

    # --- adding --------------------------------------------------------------------------------------------------
    def target_collection(self) -> str:
        return self.selected_collection() or self._new_collection or DEFAULT_COLLECTION

    def add_files(self) -> None:
        paths, _filter = QFileDialog.getOpenFileNames(self, "Add files to the index")
        if paths:
            self.add_paths(paths)

    def add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder to the index")
        if folder:
            self.add_watching_folders([folder])

    def add_watching_folders(self, paths: list[str], collection: str | None = None) -> asyncio.Task[Any]:
        """Index ``paths`` and, once indexed, watch the folders among them: a folder added here stays in step with
        the disk (the Watch box turns it off)."""
        collection = collection or self.target_collection()
        run = self.add_paths(paths, collection)
        return spawn(self._watch_after(run, paths, collection), "documents: watch the added folders")

    async def _watch_after(self, run: asyncio.Task[Any], paths: list[str], collection: str) -> None:
        totals = await run
        if totals is None or totals.cancelled:
            return
        folders = await asyncio.to_thread(lambda: [p for p in paths if Path(p).is_dir()])
        for folder in folders:
            await self.service.watch(folder, True, collection)
        if folders:
            self.refresh()

    def add_paths(self, paths: Iterable[str], collection: str | None = None) -> asyncio.Task[Any]:
        """Index ``paths`` into ``collection`` (the selected one by default) in the background."""
        collection = collection or self.target_collection()
        if collection == self._new_collection:
            self._new_collection = None
        self.stack.setCurrentIndex(1)
        return self.service.index(list(paths), collection)

    def new_collection(self) -> None:
        name, ok = QInputDialog.getText(self, "New collection", "Name of the new collection:")
        name = name.strip()
        if ok and name:
            self._new_collection = name
            self._show_collections(self.collections, name)
            self._show_files([])

    def remove_collection(self) -> None:
        name = self.selected_collection()
        if name is None:
            return
        answer = QMessageBox.question(
            self,
            "Remove collection",
            f"Remove the collection “{name}” from the index? Your files stay where they are on disk.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer == QMessageBox.StandardButton.Yes:
            spawn(self._remove(name), "documents: remove collection")

    async def _remove(self, name: str) -> None:
        if name == self._new_collection:
            self._new_collection = None
        else:
            await self.service.remove_collection(name)
        self.collection_list.setCurrentRow(-1)
        await self._refresh()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [url.toLocalFile() for url in event.mimeData().urls() if url.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.add_watching_folders(paths)

    # --- the embedding model -------------------------------------------------------------------------------------
    def list_embedding_models(self) -> asyncio.Task[Any]:
        """Read the library's GGUF headers (off the Qt thread) for the embedding models among them."""
        if self._models_task is None or self._models_task.done():
            self._models_task = spawn(self._list_embedding_models(), "documents: embedding models")
        return self._models_task

    async def _list_embedding_models(self) -> None:
        scan = self.workstation.library.snapshot()
        paths = [e.path for e in scan.entries if e.kind is EntryKind.GGUF and not e.error] if scan else []
        self.embedding_choices = await asyncio.to_thread(embedding_models, paths)
        self._fill_embedding_combo()

    def _library_event(self, event: LibraryEvent) -> None:
        if isinstance(event, LibraryChanged) and self._started is not None:
            self.list_embedding_models()

    def _fill_embedding_combo(self) -> None:
        chosen = self.workstation.settings.documents_embedding_model
        models = list(self.embedding_choices)
        if chosen and chosen not in models:
            models.insert(0, chosen)  # chosen before (its file may have moved): still shown, so it can be cleared
        self.embedding_combo.blockSignals(True)
        self.embedding_combo.clear()
        self.embedding_combo.addItem(NO_EMBEDDING, "")
        for path in models:
            self.embedding_combo.addItem(display_name(path), path)
            self.embedding_combo.setItemData(self.embedding_combo.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        self.embedding_combo.setCurrentIndex(max(0, self.embedding_combo.findData(chosen)))
        self.embedding_combo.blockSignals(False)

    def _embedding_chosen(self, index: int) -> None:
        """The setting changes; the service follows it (loading the model and embedding in the background)."""
        self.workstation.update_settings(documents_embedding_model=str(self.embedding_combo.itemData(index) or ""))

    def _show_embedding(self, progress: ev.EmbeddingProgress) -> None:
        self.embedding_bar.setVisible(progress.state in (ev.EMBEDDING, ev.EMBED_PAUSED))
        self.embedding_bar.setRange(0, max(progress.total, 1))
        self.embedding_bar.setValue(progress.embedded)
        text = embedding_text(progress, self.service.vector_problem)
        self.embedding_state.setText(text)
        self.embedding_state.setToolTip(text)
        problem = progress.state in (ev.EMBED_FAILED, ev.EMBED_UNAVAILABLE)
        set_role(self.embedding_state, "error" if problem else "muted")

    # --- progress ------------------------------------------------------------------------------------------------
    def _service_event(self, event: DocumentsEvent) -> None:
        if isinstance(event, ev.EmbeddingProgress):
            self._show_embedding(event)
        elif isinstance(event, IndexProgress):
            self._show_progress(event)
            if not event.running:
                self.refresh()
        elif isinstance(event, ev.IndexTotals):
            self.refresh()
        elif isinstance(event, ev.FileEvent) and not self._refresh_timer.isActive():
            self._refresh_timer.start()  # at most four lists a second while files go by, never starved by them

    def _show_progress(self, progress: IndexProgress) -> None:
        busy = progress.running
        self.progress_row.setVisible(busy or progress.cancelled)
        self.pause_button.setVisible(busy and not progress.paused)
        self.resume_button.setVisible(busy and progress.paused)
        self.cancel_button.setVisible(busy)
        self.progress_bar.setVisible(busy)
        self.progress_bar.setRange(0, max(progress.total, 1) if progress.total else 0)
        self.progress_bar.setValue(progress.done)
        if not busy:
            self.progress_label.setText("Indexing cancelled: what was indexed is kept." if progress.cancelled else "")
            return
        where = f" into “{progress.collection}”" if progress.collection else ""
        count = f"{progress.done} of {progress.total} files" if progress.total else "Looking for files"
        state = "Paused — " if progress.paused else "Indexing — "
        current = f" · {Path(progress.current).name}" if progress.current else ""
        self.progress_label.setText(f"{state}{count}{where}{current}")
        self.progress_label.setToolTip(progress.current or "")

    # --- search --------------------------------------------------------------------------------------------------
    def search_now(self) -> None:
        self._search_timer.stop()
        if self._search_task is not None and not self._search_task.done():
            self._search_task.cancel()
        self._search_task = spawn(self._search(self.search_box.text()), "documents: search")

    async def _search(self, text: str) -> None:
        if not text.strip():
            self.hits = []
            self.results.clear()
            self.tabs.setCurrentIndex(0)
            return
        collection = None if self.scope.currentIndex() == 1 else self.selected_collection()
        try:
            hits, mode = await self.service.search_with_mode(text, collection, TOP_HITS, AUTO)
        except Exception as exc:
            self.results.setPlainText(f"Could not search: {exc}")
            return
        self.hits, self.search_mode = hits, mode
        self._show_hits()
        self.stack.setCurrentIndex(1)
        self.tabs.setCurrentIndex(1)

    def _show_hits(self) -> None:
        t = tokens(self.palette())
        if not self.hits:
            self.results.setHtml(f"<p style='color:{t.muted.name()}'>No passages match.</p>")
            return
        how = "Ranked by keywords and meaning (hybrid)" if self.search_mode == HYBRID else "Ranked by keywords"
        blocks = [f"<p style='color:{t.muted.name()}'>{how}</p>"]
        for number, hit in enumerate(self.hits):
            where = [f"page {hit.page}"] if hit.page is not None else []
            if hit.heading:
                where.append(html.escape(hit.heading))
            detail = " · ".join(where)
            blocks.append(
                f"<p><a href='hit:{number}' style='color:{t.accent.name()}'><b>{html.escape(Path(hit.path).name)}"
                f"</b></a> <span style='color:{t.muted.name()}'>{detail}</span><br>{snippet_html(hit.snippet)}</p>"
            )
        self.results.setHtml("".join(blocks))

    def _hit_clicked(self, url: QUrl) -> None:
        text = url.toString()
        if not text.startswith("hit:"):
            return
        hit = self.hits[int(text[4:])]
        self.show_passage(hit)
        self.open_file(hit.path, hit.page)

    def show_passage(self, hit: SearchHit) -> None:
        page = f" — page {hit.page}" if hit.page is not None else ""
        heading = f"<p><i>{html.escape(hit.heading)}</i></p>" if hit.heading else ""
        body = reflowed_html(hit.text)
        self.detail.setHtml(f"<h3>{html.escape(Path(hit.path).name)}{page}</h3>{heading}<p>{body}</p>")

    def open_file(self, path: str, page: int | None) -> None:
        """Open the file in the system's viewer (at its start: viewers do not agree on how to open a PDF's page, so
        the page is shown in the detail pane)."""
        QDesktopServices.openUrl(QUrl.fromLocalFile(path))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.loaded:
            self._show_files(self.records)
            if self.hits:
                self._show_hits()


def reflowed_html(text: str) -> str:
    """Text as HTML paragraphs: a blank line parts them, a single line break (a PDF's line end) is a space."""
    paragraphs = re.split(r"\n[ \t]*\n", text.strip())
    return "</p><p>".join(html.escape(" ".join(p.split())) for p in paragraphs if p.strip())


def embedding_text(progress: ev.EmbeddingProgress, problem: str | None) -> str:
    """The embedding row's words: what search uses now and how far embedding is."""
    if progress.model is None:
        return "Search uses keywords only." if problem is None else f"Keywords only: {problem}"
    counts = f"{progress.embedded:,} of {progress.total:,} passages"
    if progress.state == ev.EMBEDDING:
        rate = f" · {progress.rate:.0f}/s" if progress.rate else ""
        return f"Embedding — {counts}{rate}"
    if progress.state == ev.EMBED_PAUSED:
        return f"Embedding paused — {counts}"
    if progress.state == ev.EMBED_DONE:
        return f"{counts} embedded · search is hybrid"
    if progress.state == ev.EMBED_CANCELLED:
        return f"Embedding cancelled — {counts}; it goes on with the next indexing."
    if progress.state in (ev.EMBED_WAITING, ev.EMBED_FAILED, ev.EMBED_UNAVAILABLE):
        return f"{progress.reason or 'Embedding stopped.'} Search uses keywords meanwhile."
    return "Waiting to embed the passages."
