"""Models → Downloads: the persistent download queue with progress, speed, ETA, state and the actions on a job.

With no download yet the page says so and offers Discover. A job's actions appear when it is chosen, and only
those that apply to its state (Pause while it runs, Resume when paused, Retry when it failed, Show in folder when
done). The queue is the workstation's (``workstation.downloads``, started with the app): this page draws its
snapshot when shown and follows its ``DownloadsChanged``; its actions run on the service, off the Qt thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QProgressBar,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.units import format_byte_rate, format_bytes, format_duration
from app.services.downloads.events import DownloadEvent, DownloadsChanged, DownloadsSnapshot
from app.services.downloads.job_runner import JobView
from app.services.downloads.jobs import DONE, DOWNLOADING, FAILED, PAUSED, QUEUED, STALLED, VERIFYING
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.models.widgets import EmptyState, icon_button, refresh_icons, shrinking_label
from app.ui.style.theme import SPACE_M, SPACE_S
from app.ui.tasks import spawn
from app.ui.widgets.palette import error_color, set_text_color

COLUMNS = ("Download", "State", "Progress", "Speed", "ETA", "Size")
_ID = Qt.ItemDataRole.UserRole
STATE_TEXT = {
    QUEUED: "Queued",
    DOWNLOADING: "Downloading",
    STALLED: "Stalled (no data)",
    PAUSED: "Paused",
    VERIFYING: "Verifying sha256",
    DONE: "Done",
    FAILED: "Failed",
}


class DownloadsPanel(Page):
    open_page_requested = Signal(str)  # a page path: "models/discover" from the empty state

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.downloads = workstation.downloads
        self.snapshot = self.downloads.snapshot()
        self._start_task: asyncio.Task[Any] | None = None
        self._build()
        self.follow(self.downloads.subscribe(self._download_event))
        self.refresh()

    @property
    def views(self) -> list[JobView]:
        return list(self.snapshot.jobs)

    def _build(self) -> None:
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("downloads_table")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setShowGrid(False)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Fixed)
        header.resizeSection(2, 150)  # the progress bar
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.empty = EmptyState(
            "downloads_empty",
            "download",
            "No downloads yet",
            "Models you download from Discover appear here with their progress, and continue after a restart.",
            [("Discover models", lambda: self.open_page_requested.emit("models/discover"))],
        )
        self.detail = shrinking_label("", "downloads_detail")
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pause_button = icon_button("Pause", "pause", self._pause)
        self.resume_button = icon_button("Resume", "play", self._resume)
        self.retry_button = icon_button("Retry", "refresh", self._resume)
        self.cancel_button = icon_button("Cancel", "close", self._cancel)
        self.remove_button = icon_button("Remove from list", "trash", self._remove)
        self.show_button = icon_button("Show in folder", "folder", self._show_folder)
        self.buttons = (
            self.pause_button,
            self.resume_button,
            self.retry_button,
            self.cancel_button,
            self.remove_button,
            self.show_button,
        )
        self.actions_bar = QWidget()
        self.actions_bar.setObjectName("downloads_actions")
        actions = QHBoxLayout(self.actions_bar)
        actions.setContentsMargins(0, 0, 0, 0)
        actions.addWidget(self.detail, 1)
        for button in self.buttons:
            actions.addWidget(button)
        self.save_problem_label = shrinking_label("", "downloads_save_problem")
        self.save_problem_label.hide()
        content = QWidget()
        column = QVBoxLayout(content)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.table, 1)
        column.addWidget(self.actions_bar)
        self.pages = QStackedWidget()
        self.pages.addWidget(content)
        self.pages.addWidget(self.empty)
        self.pages.setCurrentWidget(self.empty)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_S)
        layout.addWidget(self.save_problem_label)
        layout.addWidget(self.pages, 1)
        self._selection_changed()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            refresh_icons(self)
            set_text_color(self.save_problem_label, error_color(self.palette()))

    # --- the queue ---------------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """Show the queue once the service has read it (the window starts it with the app)."""
        if self._start_task is None:
            self._start_task = spawn(self._start(), "downloads: start")
        return self._start_task

    async def _start(self) -> None:
        await self.downloads.start()
        self.refresh(self.downloads.snapshot())

    def shown_again(self) -> None:
        self.refresh(self.downloads.snapshot())

    def _download_event(self, event: DownloadEvent) -> None:
        if isinstance(event, DownloadsChanged):
            self.refresh(event.snapshot)

    # --- the view ----------------------------------------------------------------------------------------------
    def refresh(self, snapshot: DownloadsSnapshot | None = None) -> None:
        """Draw ``snapshot`` (default: the last one this page had)."""
        selected = self.selected_id()
        if snapshot is not None:
            self.snapshot = snapshot
        views = self.views
        self.table.setRowCount(len(views))
        for row, view in enumerate(views):
            self._fill_row(row, view)
        self.pages.setCurrentIndex(0 if views else 1)  # the table, or the empty state
        problem = self.snapshot.save_problem
        self.save_problem_label.setText(problem or "")
        self.save_problem_label.setVisible(bool(problem))
        if selected is not None:
            ids = [v.id for v in views]
            if selected in ids:
                self.table.selectRow(ids.index(selected))
        self._selection_changed()

    def _fill_row(self, row: int, view: JobView) -> None:
        cells = (
            view.title,
            STATE_TEXT.get(view.state, view.state),
            "",
            format_byte_rate(view.speed_bytes_per_s) if view.state == DOWNLOADING else "",
            format_duration(view.eta_s) if view.state == DOWNLOADING else "",
            f"{format_bytes(view.done_bytes)} / {format_bytes(view.total_bytes)}",
        )
        for column, text in enumerate(cells):
            item = self.table.item(row, column)
            if item is None:
                item = QTableWidgetItem()
                self.table.setItem(row, column, item)
            item.setText(text)
            item.setData(_ID, view.id)
            item.setToolTip(view.error or view.note or view.local_path)
        bar = self.table.cellWidget(row, 2)
        if not isinstance(bar, QProgressBar):
            bar = QProgressBar()
            bar.setRange(0, 1000)
            self.table.setCellWidget(row, 2, bar)
        bar.setValue(int(view.fraction * 1000))
        bar.setFormat(f"{view.fraction:.1%}")

    def selected_id(self) -> str | None:
        items = self.table.selectedItems()
        return str(items[0].data(_ID)) if items else None

    def selected_view(self) -> JobView | None:
        job_id = self.selected_id()
        return next((v for v in self.views if v.id == job_id), None)

    def _selection_changed(self) -> None:
        """Only the actions that apply to the chosen job show; none while no job is chosen."""
        view = self.selected_view()
        state = view.state if view else None
        applies = {
            self.pause_button: state in (QUEUED, DOWNLOADING, STALLED),
            self.resume_button: state == PAUSED,
            self.retry_button: state == FAILED,
            self.cancel_button: state not in (None, DONE),
            self.remove_button: state in (DONE, FAILED, PAUSED),
            self.show_button: state == DONE,
        }
        for button, shown in applies.items():
            button.setEnabled(shown)
            button.setVisible(shown)
        self.actions_bar.setVisible(view is not None)
        if view is None:
            self.detail.setText("")
        elif view.error:
            self.detail.setText(f"Failed: {view.error}")
        elif view.note:
            self.detail.setText(view.note)
        else:
            self.detail.setText(f"Saved as {Path(view.local_path).name}" if view.state == DONE else "")
        self.detail.setToolTip(view.local_path if view is not None else "")

    def _show_folder(self) -> None:
        view = self.selected_view()
        if view is not None and view.local_path:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(view.local_path).parent)))

    def _act(self, action: str) -> asyncio.Task[Any] | None:
        job_id = self.selected_id()
        if job_id is None:
            return None
        return spawn(getattr(self.downloads, action)(job_id), f"downloads: {action}")

    def _pause(self) -> None:
        self._act("pause")

    def _resume(self) -> None:
        self._act("resume")

    def _cancel(self) -> None:
        self._act("cancel")

    def _remove(self) -> None:
        self._act("remove")
