"""Models → Discover: search the Hugging Face Hub, inspect a repository, pick a file or quantization, download.

Every Hub request runs in the executor (``HubService`` blocks); per GGUF candidate the panel fetches the header
with Range requests and shows the memory estimate and fits verdict for this machine.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.gguf.quant_names import GgufCandidate
from app.core.units import MISSING, format_bytes
from app.services.workstation import Workstation
from app.ui.pages.models.downloads import DownloadsPanel
from app.ui.tasks import spawn
from app.ui.widgets.factories import read_only_table

log = logging.getLogger("app.ui.discover")
RESULT_COLUMNS = ("Model", "Downloads", "Likes", "Updated", "Access")
FILE_COLUMNS = ("GGUF file", "Quant", "Size", "Fits this machine")
FORMAT_CHOICES: tuple[tuple[str, str | None], ...] = (
    ("Any format", None),
    ("GGUF (llama.cpp)", "gguf"),
    ("safetensors (vLLM)", "safetensors"),
    ("AWQ", "awq"),
)
SORT_CHOICES = (("Most downloads", "downloads"), ("Most likes", "likes"), ("Recently updated", "recent"))
MAX_ESTIMATES = 24
_KEY = Qt.ItemDataRole.UserRole


def _unexpected(exc: Exception) -> str:
    return f"no estimate: {str(exc) or type(exc).__name__} (see View → Log)"


def _combo(choices: tuple[tuple[str, str | None], ...]) -> QComboBox:
    combo = QComboBox()
    for text, value in choices:
        combo.addItem(text, value)
    return combo


class DiscoverPanel(QWidget):
    def __init__(self, context: Workstation, downloads: DownloadsPanel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.downloads = downloads
        self.results: list[Any] = []
        self.detail: Any | None = None
        self.verdicts: dict[str, str] = {}  # candidate key -> verdict text
        self.verdict_tips: dict[str, str] = {}  # candidate key -> suggestions when it does not fit
        self._search_task: asyncio.Task[Any] | None = None
        self._detail_task: asyncio.Task[Any] | None = None
        self._estimate_task: asyncio.Task[Any] | None = None
        self._build()

    # --- layout ------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search the Hugging Face Hub, for example: qwen2.5 7b instruct gguf")
        self.query.returnPressed.connect(self.search)
        self.format_combo = _combo(FORMAT_CHOICES)
        self.sort_combo = _combo(SORT_CHOICES)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        self.status = QLabel("")
        self.status.setObjectName("discover_status")
        self.status.setWordWrap(True)
        self.results_table = read_only_table(RESULT_COLUMNS, "discover_results")
        self.results_table.itemSelectionChanged.connect(self._result_selected)
        self.title = QLabel("Choose a model on the left.")
        self.title.setObjectName("discover_title")
        self.meta = QLabel("")
        self.meta.setWordWrap(True)
        self.files_table = read_only_table(FILE_COLUMNS, "discover_files", stretch=3)
        self.files_table.itemSelectionChanged.connect(self._update_buttons)
        self.card = QTextBrowser()
        self.card.setObjectName("discover_card")
        self.download_button = QPushButton("Download selected file")
        self.download_button.clicked.connect(self.download_selected)
        self.folder_button = QPushButton("Download HF folder (for vLLM)")
        self.folder_button.clicked.connect(self.download_folder)
        search_row = QHBoxLayout()
        for widget in (self.query, self.format_combo, self.sort_combo, self.search_button):
            search_row.addWidget(widget, 1 if widget is self.query else 0)
        detail = QWidget()
        detail_layout = QVBoxLayout(detail)
        detail_layout.addWidget(self.title)
        detail_layout.addWidget(self.meta)
        detail_layout.addWidget(self.files_table, 2)
        buttons = QHBoxLayout()
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.folder_button)
        buttons.addStretch(1)
        detail_layout.addLayout(buttons)
        detail_layout.addWidget(self.card, 1)
        splitter = QSplitter()
        splitter.addWidget(self.results_table)
        splitter.addWidget(detail)
        splitter.setSizes([420, 680])
        layout = QVBoxLayout(self)
        layout.addLayout(search_row)
        layout.addWidget(self.status)
        layout.addWidget(splitter, 1)
        self._update_buttons()

    # --- search ------------------------------------------------------------------------------------------------
    # --- the page protocol -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Nothing to start: the Hub is asked when the user searches."""

    def settings_changed(self) -> None:
        """The token and the download folder are read at each request."""

    async def shutdown(self) -> None:
        """Searches and header reads end with the app's loop; queued downloads belong to the Downloads page."""

    async def _service(self) -> Any:
        from app.services.downloads.hub import HubService

        return HubService(token=self.context.settings.hf_token or None)  # None: huggingface_hub's stored token

    def search(self) -> asyncio.Task[Any]:
        """Search with the box's text, the format filter and the sort order (off the Qt thread)."""
        if self._search_task is not None and not self._search_task.done():
            self._search_task.cancel()
        self._search_task = spawn(self._search(self.query.text().strip()), "discover: search")
        return self._search_task

    async def _search(self, text: str) -> None:
        from app.services.downloads.hub import HubError

        self.status.setText("Searching…")
        fmt, sort = self.format_combo.currentData(), self.sort_combo.currentData()
        service = await self._service()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                None, lambda: service.search(text, fmt=fmt, sort=sort, limit=50)
            )
        except HubError as exc:
            self.status.setText(str(exc))
            return
        self.results = results
        self.results_table.setRowCount(len(results))
        for row, r in enumerate(results):
            access = "gated" if r.gated else ""
            cells = (r.id, f"{r.downloads or 0:,}", f"{r.likes or 0:,}", (r.last_modified or "")[:10], access)
            for column, text_ in enumerate(cells):
                item = QTableWidgetItem(text_)
                item.setData(_KEY, r.id)
                self.results_table.setItem(row, column, item)
        self.status.setText(f"{len(results)} models." if results else "No models found: try other words.")

    def _result_selected(self) -> None:
        items = self.results_table.selectedItems()
        if items:
            self.open_repo(str(items[0].data(_KEY)))

    # --- repository detail ---------------------------------------------------------------------------------
    def open_repo(self, repo_id: str) -> asyncio.Task[Any]:
        """Show a repository's files, quantizations, license and card; then estimate each GGUF candidate."""
        for task in (self._detail_task, self._estimate_task):
            if task is not None and not task.done():
                task.cancel()
        self._detail_task = spawn(self._open_repo(repo_id), "discover: repo detail")
        return self._detail_task

    async def _open_repo(self, repo_id: str) -> None:
        from app.services.downloads.hub import HubError

        self.title.setText(repo_id)
        self.meta.setText("Loading…")
        self.detail = None
        self.files_table.setRowCount(0)
        self.card.setPlainText("")
        self._update_buttons()
        service = await self._service()
        try:
            detail = await asyncio.get_running_loop().run_in_executor(None, service.repo_detail, repo_id)
        except HubError as exc:
            self.meta.setText(str(exc))
            return
        self.detail, self.verdicts, self.verdict_tips = detail, {}, {}
        gated = "gated: accept the license on the Hub page and set a token in Settings" if detail.gated else "open"
        size = sum(f.size_bytes or 0 for f in detail.files)
        self.meta.setText(
            f"License {detail.license or 'not stated'} · {gated} · {len(detail.files)} files, "
            f"{format_bytes(size)} · commit {detail.commit[:12]}"
        )
        self.card.setMarkdown(detail.card_text or "*No model card.*")
        self._fill_files()
        self._estimate_task = spawn(self._estimate_all(service, detail), "discover: estimates")

    def _fill_files(self) -> None:
        candidates = self.candidates()
        self.files_table.setRowCount(len(candidates))
        for row, c in enumerate(candidates):
            shards = f" ({len(c.files)} of {c.shard_count} shards)" if c.shard_count > 1 else ""
            kind = " (projector)" if c.is_projector else ""
            cells = (c.key + shards + kind, c.quant or MISSING, format_bytes(c.size_bytes), self._verdict_text(c))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(_KEY, c.key)
                item.setToolTip(self.verdict_tips.get(c.key, "") if column == 3 else text)
                self.files_table.setItem(row, column, item)
        self._update_buttons()

    def candidates(self) -> list[GgufCandidate]:
        return list(self.detail.candidates) if self.detail is not None else []

    def _verdict_text(self, candidate: GgufCandidate) -> str:
        if candidate.is_projector:
            return "—"
        return self.verdicts.get(candidate.key, "estimating…")

    async def _estimate_all(self, service: Any, detail: Any) -> None:
        from app.core.gguf.header import GgufFileError
        from app.services.downloads.hub import HubError
        from app.services.monitor.machine_memory import read_machine_memory

        loop = asyncio.get_running_loop()
        candidates = [c for c in detail.candidates if not c.is_projector][:MAX_ESTIMATES]
        try:
            machine = await loop.run_in_executor(None, read_machine_memory)
            settings = self._estimate_settings(machine)
        except Exception as exc:  # every row still gets an answer
            log.exception("cannot read this machine's memory for the estimates of %s", detail.id)
            if self.detail is detail:
                for candidate in candidates:
                    self.verdicts[candidate.key] = self.verdict_tips[candidate.key] = _unexpected(exc)
                self._fill_files()
            return
        for candidate in candidates:
            try:
                _estimate, verdict = await loop.run_in_executor(
                    None, service.estimate, detail, candidate, settings, machine
                )
                text, tip = verdict.summary, "\n".join(verdict.suggestions) or verdict.summary
            except (HubError, GgufFileError) as exc:
                text = tip = f"no estimate: {exc}"
            except Exception as exc:  # a file the estimator trips over must not leave the other rows waiting
                log.exception("estimating %s of %s failed", candidate.key, detail.id)
                text = tip = _unexpected(exc)
            if self.detail is not detail:
                return
            self.verdicts[candidate.key], self.verdict_tips[candidate.key] = text, tip
            self._fill_files()

    def _estimate_settings(self, machine: Any) -> Any:
        from app.core.memory.estimate import EstimateSettings

        load = self.context.settings.load
        gpu_layers = load.n_gpu_layers if load.n_gpu_layers is not None else (-1 if machine.gpu_names else 0)
        return EstimateSettings(
            n_ctx=load.n_ctx,
            n_gpu_layers=gpu_layers,
            type_k=load.type_k,
            type_v=load.type_v,
            flash_attn=load.flash_attn,
            n_batch=max(load.n_batch, 512),
            cpu_amx=machine.cpu_amx,
        )

    # --- downloads ---------------------------------------------------------------------------------------------
    def selected_candidate(self) -> GgufCandidate | None:
        items = self.files_table.selectedItems()
        key = str(items[0].data(_KEY)) if items else None
        return next((c for c in self.candidates() if c.key == key), None)

    def _update_buttons(self) -> None:
        self.download_button.setEnabled(self.selected_candidate() is not None)
        self.folder_button.setEnabled(self.detail is not None and self.detail.has_safetensors)

    def download_selected(self) -> asyncio.Task[Any] | None:
        candidate = self.selected_candidate()
        if candidate is None:
            return None
        return self._queue([f.path for f in candidate.files])

    def download_folder(self) -> asyncio.Task[Any] | None:
        return self._queue([]) if self.detail is not None and self.detail.has_safetensors else None

    def _queue(self, files: list[str]) -> asyncio.Task[Any]:
        return spawn(self._queue_job(files), "discover: queue download")

    async def _queue_job(self, files: list[str]) -> None:
        from app.services.downloads.hub import HubError, HubService

        detail = self.detail
        if detail is None:
            return
        try:
            job = HubService().plan_download(detail, files=files, target_dir=self.context.settings.download_dir)
        except HubError as exc:
            self.status.setText(str(exc))
            return
        try:
            await self.downloads.add_job(job)
        except Exception as exc:  # the queue could not start or take the job: say so, never "Queued"
            log.exception("queueing %s failed", job.title)
            self.status.setText(f"Could not queue {job.title}: {str(exc) or type(exc).__name__} (see View → Log).")
            return
        self.status.setText(f"Queued {job.title}: see the Downloads tab.")
