"""Models → Discover: picks that fit this machine, search on the Hugging Face Hub, a repository's files with a fits
verdict each, and Download.

The page opens on the picks shipped with the app (``app.services.downloads.picks``), ranked by how well they fit
this machine's memory — offline too — and refreshed from the Hub when it can be reached. Every Hub request runs in
the executor (``HubService`` blocks) with short timeouts: an unreachable Hub is said plainly within seconds. Per
GGUF file of an opened repository the page fetches the header with Range requests and shows its verdict.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QSplitter,
    QStackedWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.gguf.quant_names import GgufCandidate
from app.core.memory.fit import FITS, TIGHT, MachineMemory
from app.core.units import MISSING, format_bytes
from app.services.downloads.picks import Pick, PickList, PickVerdict
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.models.table import SECONDARY_ROLE, NameDelegate
from app.ui.pages.models.widgets import (
    EmptyState,
    compact_verdict,
    icon_button,
    refresh_icons,
    short_verdict,
    shrinking_label,
)
from app.ui.style.theme import SPACE_M, SPACE_S, set_role, tokens
from app.ui.tasks import spawn
from app.ui.widgets.factories import read_only_table
from app.ui.widgets.notices import NoticeArea

log = logging.getLogger("app.ui.discover")
RESULT_COLUMNS = ("Model", "Downloads", "Likes", "Updated", "Access")
PICK_COLUMNS = ("Model", "Size", "Fits here")
FILE_COLUMNS = ("GGUF file", "Quant", "Size", "Fits here")
FORMAT_CHOICES: tuple[tuple[str, str | None], ...] = (
    ("Any format", None),
    ("GGUF (llama.cpp)", "gguf"),
    ("safetensors (vLLM)", "safetensors"),
    ("AWQ", "awq"),
)
SORT_CHOICES = (("Most downloads", "downloads"), ("Most likes", "likes"), ("Recently updated", "recent"))
MAX_ESTIMATES = 24
PICKS, RESULTS, NO_RESULTS = range(3)
PLACEHOLDER, DETAIL = range(2)
_KEY = Qt.ItemDataRole.UserRole


def _unexpected(exc: Exception) -> str:
    return f"no estimate: {str(exc) or type(exc).__name__} (see View → Log)"


def _no_verdict(problem: str | None) -> str:
    return problem if problem == "estimating…" else f"no estimate: {problem}"


def _combo(choices: tuple[tuple[str, str | None], ...]) -> QComboBox:
    combo = QComboBox()
    for text, value in choices:
        combo.addItem(text, value)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
    return combo


class DiscoverPanel(Page):
    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.results: list[Any] = []
        self.detail: Any | None = None
        self.pick_list: PickList | None = None
        self.pick_verdicts: list[PickVerdict] = []
        self.machine: MachineMemory | None = None
        self.hub_reachable: bool | None = None  # None: not asked yet
        self.current_pick: Pick | None = None
        self.verdicts: dict[str, str] = {}  # candidate key -> verdict text
        self.verdict_tips: dict[str, str] = {}  # candidate key -> suggestions when it does not fit
        self._started: asyncio.Task[Any] | None = None
        self._refresh_task: asyncio.Task[Any] | None = None
        self._search_task: asyncio.Task[Any] | None = None
        self._detail_task: asyncio.Task[Any] | None = None
        self._estimate_task: asyncio.Task[Any] | None = None
        self._build()

    # --- layout ------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.query = QLineEdit()
        self.query.setObjectName("discover_query")
        self.query.setPlaceholderText("Search the Hugging Face Hub, e.g. qwen2.5 7b instruct gguf")
        self.query.setClearButtonEnabled(True)
        self.query.returnPressed.connect(self.search)
        self.format_combo = _combo(FORMAT_CHOICES)
        self.sort_combo = _combo(SORT_CHOICES)
        self.search_button = icon_button("Search", "search", self.search)
        self.notice = NoticeArea()
        self.status = shrinking_label("", "discover_status", "muted")
        self._build_lists()
        self._build_detail()
        self._lay_out()
        self._update_buttons()

    def _build_lists(self) -> None:
        self.list_title = shrinking_label("Picks for this machine", "discover_list_title", "section")
        self.back_button = icon_button("Picks", "chevron-left", self.show_picks)
        self.back_button.setToolTip("Back to the picks for this machine")
        self.back_button.hide()
        self.picks_table = read_only_table(PICK_COLUMNS, "discover_picks")
        self.picks_table.setItemDelegateForColumn(0, NameDelegate(self.picks_table, Qt.TextElideMode.ElideRight))
        self.picks_table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() * 2 + 14)
        self.picks_table.setShowGrid(False)
        self.picks_table.itemSelectionChanged.connect(self._pick_selected)
        self.results_table = read_only_table(RESULT_COLUMNS, "discover_results")
        self.results_table.setShowGrid(False)
        self.results_table.itemSelectionChanged.connect(self._result_selected)
        self.no_results = EmptyState(
            "discover_no_results",
            "search",
            "No models found",
            "Try other words or another format.",
            [("Show the picks", self.show_picks)],
        )
        self.lists = QStackedWidget()
        for widget in (self.picks_table, self.results_table, self.no_results):
            self.lists.addWidget(widget)

    def _build_detail(self) -> None:
        self.placeholder = EmptyState(
            "discover_placeholder",
            "download",
            "Choose a model",
            "Pick one on the left to see its files, whether it fits here, and to download it.",
            [],
        )
        self.title = shrinking_label("", "discover_title", "section")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.meta = shrinking_label("", "discover_meta", "muted")
        self.meta.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pick_summary = shrinking_label("", "discover_pick_summary")
        self.pick_fit = shrinking_label("", "discover_pick_fit")
        self.files_table = read_only_table(FILE_COLUMNS, "discover_files")  # the file name takes the room
        self.files_table.setShowGrid(False)
        self.files_table.itemSelectionChanged.connect(self._update_buttons)
        self.download_button = icon_button("Download", "download", self.download_selected, accent=True)
        self.folder_button = icon_button("Download HF folder (vLLM)", "download", self.download_folder)
        self.card = QTextBrowser()
        self.card.setObjectName("discover_card")
        self.card.setOpenExternalLinks(True)

    def _lay_out(self) -> None:
        search_row = QHBoxLayout()
        search_row.addWidget(self.query, 1)
        for widget in (self.format_combo, self.sort_combo, self.search_button):
            search_row.addWidget(widget)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        header = QHBoxLayout()
        header.addWidget(self.back_button)
        header.addWidget(self.list_title, 1)
        left_layout.addLayout(header)
        left_layout.addWidget(self.status)
        left_layout.addWidget(self.lists, 1)
        detail = QWidget()
        detail.setObjectName("discover_detail")
        column = QVBoxLayout(detail)
        column.setContentsMargins(SPACE_S, 0, 0, 0)
        column.addWidget(self.title)
        column.addWidget(self.meta)
        column.addWidget(self.pick_summary)
        column.addWidget(self.pick_fit)
        column.addWidget(self.files_table, 2)
        buttons = QHBoxLayout()
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.folder_button)
        buttons.addStretch(1)
        column.addLayout(buttons)
        column.addWidget(self.card, 1)
        self.right = QStackedWidget()
        self.right.addWidget(self.placeholder)
        self.right.addWidget(detail)
        splitter = QSplitter()
        splitter.setObjectName("discover_splitter")
        splitter.addWidget(left)
        splitter.addWidget(self.right)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([520, 520])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_S)
        layout.addLayout(search_row)
        layout.addWidget(self.notice)
        layout.addWidget(splitter, 1)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            refresh_icons(self)
            if self.pick_verdicts:  # the next turn: not while Qt restyles every widget (app/ui/style/restyle.py)
                QTimer.singleShot(0, self, self._fill_picks)

    # --- the page protocol -------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """Show the shipped picks ranked for this machine (the task ends then), then refresh them from the Hub
        (``_refresh_task``), once."""
        if self._started is None:
            self._started = spawn(self._start(), "discover: picks")
        return self._started

    def settings_changed(self, event: SettingsChanged) -> None:
        """The token and the download folder are read at each request; the load settings change the verdicts."""
        if event.touches("load") and self.pick_list is not None and self.machine is not None:
            spawn(self._rank(list(self.pick_list.picks)), "discover: rank picks")

    def _service(self) -> Any:
        from app.services.downloads.hub import HubService

        return HubService(token=self.workstation.settings.hf_token or None)  # None: huggingface_hub's stored token

    # --- picks -------------------------------------------------------------------------------------------------
    async def _start(self) -> None:
        from app.services.downloads.picks import PicksError, load_picks
        from app.services.monitor.machine_memory import read_machine_memory

        loop = asyncio.get_running_loop()
        try:
            self.pick_list = await loop.run_in_executor(None, load_picks)
        except PicksError as exc:
            log.error("%s", exc)
            self.status.setText("The built-in picks could not be read: search the Hub instead.")
            return
        self.pick_verdicts = [PickVerdict(pick, None, "estimating…") for pick in self.pick_list.picks]
        self._fill_picks()  # the names at once; the verdicts follow (the estimate's first run imports gguf)
        self.machine = await loop.run_in_executor(None, read_machine_memory)
        await self._rank(list(self.pick_list.picks))
        self._refresh_task = spawn(self._refresh_picks(), "discover: refresh picks")

    async def _rank(self, picks: list[Pick]) -> None:
        from app.services.downloads.picks import estimate_settings, rank_picks

        machine = self.machine
        if machine is None:
            return
        settings = estimate_settings(self.workstation.settings.load, machine)
        self.pick_verdicts = await asyncio.get_running_loop().run_in_executor(
            None, rank_picks, picks, settings, machine
        )
        self._fill_picks()

    async def _refresh_picks(self) -> None:
        """The same repositories on the Hub: sizes as listed now; the shipped picks stay when it cannot be reached."""
        from app.services.downloads.hub import HubError
        from app.services.downloads.picks import refresh_picks

        if self.pick_list is None:
            return
        service = self._service()
        try:
            fresh, _details = await asyncio.get_running_loop().run_in_executor(
                None, refresh_picks, self.pick_list.picks, service
            )
        except HubError as exc:
            log.info("The picks stay as shipped: %s", exc)
            self.hub_reachable = False
            self._describe_picks()
            return
        if fresh:
            await self._rank(fresh)
        self.hub_reachable = True
        self._describe_picks()

    def _describe_picks(self) -> None:
        if self.lists.currentIndex() != PICKS or self.machine is None:
            return
        fitting = sum(1 for v in self.pick_verdicts if v.verdict is not None and v.verdict.state == FITS)
        where = "no GPU: judged against RAM" if self.machine and not self.machine.gpu_free_bytes else "GPU and RAM"
        text = f"{fitting} of {len(self.pick_verdicts)} fit this machine ({where}). Best fits first."
        as_of = self.pick_list.as_of if self.pick_list is not None else ""
        if as_of:
            text += f" Picks as of {month_words(as_of)}."
        if self.hub_reachable is False:
            text += " The Hub cannot be reached: figures from the built-in list."
        elif self.hub_reachable:
            text += " Sizes checked on the Hub."
        self.status.setText(text)

    def _fill_picks(self) -> None:
        t = tokens(self.palette())
        colors = {FITS: t.success, TIGHT: t.warning}
        self.picks_table.setRowCount(len(self.pick_verdicts))
        for row, pv in enumerate(self.pick_verdicts):
            pick, verdict = pv.pick, pv.verdict
            fit = compact_verdict(verdict) if verdict is not None else _no_verdict(pv.problem)
            cells = (pick.name, format_bytes(pick.size_bytes), fit)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(_KEY, row)
                item.setToolTip(f"{pick.summary}\n{pick.repo_id} · {pick.file}" if column == 0 else text)
                if column == 0:
                    item.setData(SECONDARY_ROLE, f"{pick.quant} · {pick.summary}")
                if column == 2 and verdict is not None:
                    item.setForeground(colors.get(verdict.state, t.error))
                    item.setToolTip(verdict.summary)
                if column == 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.picks_table.setItem(row, column, item)
        self._describe_picks()

    def show_picks(self) -> None:
        self.lists.setCurrentIndex(PICKS)
        self.list_title.setText("Picks for this machine")
        self.back_button.hide()
        self._describe_picks()

    def _pick_selected(self) -> None:
        items = self.picks_table.selectedItems()
        if not items:
            return
        pick_verdict = self.pick_verdicts[int(items[0].data(_KEY))]
        self.show_pick(pick_verdict)

    def show_pick(self, pick_verdict: PickVerdict) -> None:
        """The pick's own figures at once; its repository's files too when the Hub can be reached."""
        pick, verdict = pick_verdict.pick, pick_verdict.verdict
        self.current_pick = pick
        self.right.setCurrentIndex(DETAIL)
        self.title.setText(pick.name)
        self.meta.setText(f"{pick.repo_id} · {pick.quant} · {format_bytes(pick.size_bytes)} · licence {pick.license}")
        self.meta.setToolTip(pick.file)
        self.pick_summary.setText(pick.summary)
        self.pick_summary.show()
        self.pick_fit.setText(short_verdict(verdict) if verdict is not None else "")
        self.pick_fit.setToolTip(verdict.summary if verdict is not None else "")
        set_role(self.pick_fit, {FITS: "fits", TIGHT: "tight"}.get(verdict.state, "wont-fit") if verdict else "muted")
        self.pick_fit.show()
        self._clear_repo()
        self.card.setMarkdown(f"**{pick.name}** — {pick.summary}\n\nFile `{pick.file}` in `{pick.repo_id}`.")
        self.download_button.setText(f"Download {pick.quant} ({format_bytes(pick.size_bytes)})")
        self._update_buttons()
        if self.hub_reachable is not False:
            self.open_repo(pick.repo_id, keep_pick=True)

    # --- search ------------------------------------------------------------------------------------------------
    def search(self) -> asyncio.Task[Any]:
        """Search with the box's text, the format filter and the sort order (off the Qt thread)."""
        if self._search_task is not None and not self._search_task.done():
            self._search_task.cancel()
        self._search_task = spawn(self._search(self.query.text().strip()), "discover: search")
        return self._search_task

    async def _search(self, text: str) -> None:
        from app.services.downloads.hub import HubError

        self.notice.dismiss("hub")
        self.status.setText("Searching…")
        self.search_button.setEnabled(False)
        fmt, sort = self.format_combo.currentData(), self.sort_combo.currentData()
        service = self._service()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                None, lambda: service.search(text, fmt=fmt, sort=sort, limit=50)
            )
        except HubError as exc:
            self.status.setText("")
            self.notice.show_notice(str(exc), level="error", key="hub", action=("Try again", self.search))
            return
        finally:
            self.search_button.setEnabled(True)
        self.hub_reachable = True
        self._show_results(text, results)

    def _show_results(self, text: str, results: list[Any]) -> None:
        self.results = results
        self.results_table.setRowCount(len(results))
        for row, r in enumerate(results):
            access = "gated" if r.gated else ""
            cells = (r.id, f"{r.downloads or 0:,}", f"{r.likes or 0:,}", (r.last_modified or "")[:10], access)
            for column, text_ in enumerate(cells):
                item = QTableWidgetItem(text_)
                item.setData(_KEY, r.id)
                self.results_table.setItem(row, column, item)
        self.list_title.setText(f"Results for “{text}”" if text else "Results")
        self.back_button.show()
        self.lists.setCurrentIndex(RESULTS if results else NO_RESULTS)
        count = len(results)
        self.status.setText(f"{count} model{'' if count == 1 else 's'}." if results else "")

    def _result_selected(self) -> None:
        items = self.results_table.selectedItems()
        if items:
            self.open_repo(str(items[0].data(_KEY)))

    # --- repository detail ---------------------------------------------------------------------------------
    def open_repo(self, repo_id: str, keep_pick: bool = False) -> asyncio.Task[Any]:
        """Show a repository's files, quantizations, license and card; then estimate each GGUF candidate."""
        for task in (self._detail_task, self._estimate_task):
            if task is not None and not task.done():
                task.cancel()
        if not keep_pick:
            self.current_pick = None
        self._detail_task = spawn(self._open_repo(repo_id), "discover: repo detail")
        return self._detail_task

    def _clear_repo(self) -> None:
        self.detail = None
        self.files_table.setRowCount(0)
        self.files_table.hide()
        self.folder_button.hide()

    async def _open_repo(self, repo_id: str) -> None:
        from app.services.downloads.hub import HubError

        pick = self.current_pick
        self.right.setCurrentIndex(DETAIL)
        if pick is None:
            self.title.setText(repo_id)
            self.pick_summary.hide()
            self.pick_fit.hide()
            self.card.setPlainText("")
            self.download_button.setText("Download")
        self.meta.setText("Loading…" if pick is None else self.meta.text())
        self._clear_repo()
        self._update_buttons()
        service = self._service()
        try:
            detail = await asyncio.get_running_loop().run_in_executor(None, service.repo_detail, repo_id)
        except HubError as exc:
            if pick is None:
                self.meta.setText(str(exc))
            else:
                self.notice.show_notice(str(exc), level="warning", key="hub")
            return
        self.detail, self.verdicts, self.verdict_tips = detail, {}, {}
        gated = "gated: accept the license on the Hub page and set a token in Settings" if detail.gated else "open"
        size = sum(f.size_bytes or 0 for f in detail.files)
        self.meta.setText(
            f"License {detail.license or 'not stated'} · {gated} · {len(detail.files)} files, "
            f"{format_bytes(size)} · commit {detail.commit[:12]}"
        )
        self.card.setMarkdown(detail.card_text or "*No model card.*")
        self.files_table.setVisible(bool(detail.candidates))
        self.folder_button.setVisible(detail.has_safetensors)
        self._fill_files()
        if pick is not None:
            self._select_file(pick.file)
        self._estimate_task = spawn(self._estimate_all(service, detail), "discover: estimates")

    def _select_file(self, path: str) -> None:
        keys = [c.key for c in self.candidates() if path in {f.path for f in c.files}]
        for row in range(self.files_table.rowCount()):
            item = self.files_table.item(row, 0)
            if item is not None and keys and item.data(_KEY) == keys[0]:
                self.files_table.selectRow(row)

    def _fill_files(self) -> None:
        selected = self.selected_candidate()
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
        if selected is not None:
            self._select_file(selected.files[0].path)
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
        from app.services.downloads.picks import estimate_settings
        from app.services.monitor.machine_memory import read_machine_memory

        loop = asyncio.get_running_loop()
        candidates = [c for c in detail.candidates if not c.is_projector][:MAX_ESTIMATES]
        try:
            machine = await loop.run_in_executor(None, read_machine_memory)
            settings = estimate_settings(self.workstation.settings.load, machine)
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
                text, tip = compact_verdict(verdict), "\n".join([verdict.summary, *verdict.suggestions])
            except (HubError, GgufFileError) as exc:
                text = tip = f"no estimate: {exc}"
            except Exception as exc:  # a file the estimator trips over must not leave the other rows waiting
                log.exception("estimating %s of %s failed", candidate.key, detail.id)
                text = tip = _unexpected(exc)
            if self.detail is not detail:
                return
            self.verdicts[candidate.key], self.verdict_tips[candidate.key] = text, tip
            self._fill_files()

    # --- downloads ---------------------------------------------------------------------------------------------
    def selected_candidate(self) -> GgufCandidate | None:
        items = self.files_table.selectedItems()
        key = str(items[0].data(_KEY)) if items else None
        return next((c for c in self.candidates() if c.key == key), None)

    def _update_buttons(self) -> None:
        candidate = self.selected_candidate()
        self.download_button.setEnabled(candidate is not None or self.current_pick is not None)
        if candidate is not None:
            self.download_button.setText(f"Download {candidate.quant or 'file'} ({format_bytes(candidate.size_bytes)})")
        self.folder_button.setEnabled(self.detail is not None and self.detail.has_safetensors)

    def download_selected(self) -> asyncio.Task[Any] | None:
        candidate = self.selected_candidate()
        if candidate is not None:
            return self._queue([f.path for f in candidate.files])
        if self.current_pick is not None:
            return self._queue([self.current_pick.file], repo_id=self.current_pick.repo_id)
        return None

    def download_folder(self) -> asyncio.Task[Any] | None:
        return self._queue([]) if self.detail is not None and self.detail.has_safetensors else None

    def _queue(self, files: list[str], repo_id: str | None = None) -> asyncio.Task[Any]:
        return spawn(self._queue_job(files, repo_id), "discover: queue download")

    async def _queue_job(self, files: list[str], repo_id: str | None) -> None:
        from app.services.downloads.hub import HubError

        detail = self.detail
        try:
            if repo_id is not None and (detail is None or detail.id != repo_id):  # a pick, its repository not read
                service = self._service()
                detail = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: service.repo_detail(repo_id, with_card=False)
                )
            if detail is None:
                return
            job = self._service().plan_download(detail, files=files, target_dir=self.workstation.settings.download_dir)
        except HubError as exc:
            self.notice.show_notice(str(exc), level="error", key="hub")
            return
        try:
            await self.workstation.downloads.add(job)
        except Exception as exc:  # the queue could not start or take the job: say so, never "Queued"
            log.exception("queueing %s failed", job.title)
            problem = str(exc) or type(exc).__name__
            self.notice.show_notice(f"Could not queue {job.title}: {problem} (see View → Log).", level="error")
            return
        projectors = [f.path.rsplit("/", 1)[-1] for f in job.files if "mmproj" in f.path.lower()]
        extra = f" It comes with its vision projector ({projectors[0]}), so it can read images." if projectors else ""
        self.notice.show_notice(f"Queued {job.title}: see the Downloads tab.{extra}", level="success", key="queued")


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # fmt: skip


def month_words(as_of: str) -> str:
    """``2026-12`` as ``December 2026`` (the text as it is when it is not a year and a month)."""
    year, _, month = as_of.partition("-")
    if year.isdigit() and month.isdigit() and 1 <= int(month) <= 12:
        return f"{_MONTHS[int(month) - 1]} {year}"
    return as_of
