"""The Ollama part of the Models page: is Ollama running, its installed models (chat, delete), the models it
holds in memory (refreshed while the panel is visible), and pulling a model with progress and Cancel.

When Ollama is not running the page is a calm card: what Ollama is, how to start it, where to install it, and
Check again. When it runs with no model yet, the pull box comes first, with a few suggestions."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QHideEvent, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.units import format_bytes, relative_time
from app.services.engines.entries import OLLAMA_PREFIX
from app.services.ollama.client import LocalModel, OllamaError, OllamaStatus, PullProgress, RunningModel
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.models.widgets import EmptyState, icon_button, refresh_icons, shrinking_label
from app.ui.style.theme import SPACE_L, SPACE_M, SPACE_S, set_role
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.factories import read_only_table, widget_row
from app.ui.widgets.notices import NoticeArea
from app.ui.widgets.palette import error_color, set_text_color

log = logging.getLogger("app.ui.ollama_models")
REFRESH_MS = 3000
INSTALL_URL = "https://ollama.com/download"
SUGGESTIONS = ("llama3.2", "qwen3:4b", "gemma3:1b")
INSTALLED_COLUMNS = ("Name", "Size", "Family", "Parameters", "Quantization", "Modified")
RUNNING_COLUMNS = ("Name", "Size", "In VRAM", "VRAM %", "Context", "Expires")
_NAME = Qt.ItemDataRole.UserRole


def _fill(table: QTableWidget, names: list[str], rows: list[list[tuple[str, str, bool]]]) -> None:
    """One row per model: (text, tooltip, right-aligned) per cell; every cell knows its model's name."""
    table.setRowCount(len(rows))
    for row, (name, cells) in enumerate(zip(names, rows, strict=True)):
        for column, (text, tip, right) in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setData(_NAME, name)
            item.setToolTip(tip)
            if right:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(row, column, item)


class OllamaModelsPanel(Page):
    chat_requested = Signal(str)  # the model entry, "ollama:NAME"

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.ollama_running = False
        self.status: OllamaStatus | None = None
        self.installed: list[LocalModel] = []
        self.running: list[RunningModel] = []
        self._started: asyncio.Task[Any] | None = None
        self._pull_task: asyncio.Task[Any] | None = None
        self._lock = asyncio.Lock()
        self._delete_name = ""
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._tick)
        self._build()
        self._style()

    # --- layout ----------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.status_label = shrinking_label("Checking for Ollama…", "ollama_models_status", "muted")
        self.recheck_button = icon_button("Check again", "refresh", self.recheck)
        self.install_button = icon_button("Install Ollama", "external", self.open_install_page)
        self.refresh_button = icon_button("Refresh", "refresh", self.recheck)
        self.installed_table = read_only_table(INSTALLED_COLUMNS, "ollama_installed")
        self.installed_table.setShowGrid(False)
        self.empty = EmptyState(
            "ollama_empty",
            "download",
            "Ollama has no models yet",
            "Pull one below, or choose a suggestion.",
            [(name, functools.partial(self.suggest, name)) for name in SUGGESTIONS],
        )
        self.chat_button = icon_button("Chat with it", "chat", self.chat_with_selected, accent=True)
        self.delete_button = icon_button("Delete…", "trash", self.ask_delete)
        self.notice = NoticeArea()
        self.confirm_text = shrinking_label()
        self.confirm_delete_button = QPushButton("Delete")
        self.confirm_cancel_button = QPushButton("Cancel")
        self.confirm_bar = QFrame()  # an inline question, never a modal dialog
        set_role(self.confirm_bar, "card")
        self.confirm_bar.setLayout(
            widget_row(self.confirm_text, self.confirm_delete_button, self.confirm_cancel_button, stretch_at=0)
        )
        self.running_table = read_only_table(RUNNING_COLUMNS, "ollama_running")
        self.running_table.setShowGrid(False)
        self.running_empty = shrinking_label(
            "No model is in memory now: Ollama loads one when it is asked.", "", "muted"
        )
        self.pull_name = QLineEdit()
        self.pull_name.setObjectName("ollama_pull_name")
        self.pull_name.setPlaceholderText("Model to pull, e.g. llama3.2 or qwen3:4b")
        self.pull_button = icon_button("Pull", "download", self.pull, accent=True)
        self.pull_cancel = icon_button("Cancel", "close", self.cancel_pull)
        self.pull_progress = QProgressBar()
        self.pull_progress.setFixedWidth(160)
        self.pull_status = shrinking_label(name="pull_status")
        self.card = self._not_running_card()
        self.body = QWidget()
        self._lay_out()
        self._connect()

    def _not_running_card(self) -> QFrame:
        card = QFrame()
        card.setObjectName("ollama_not_running")
        set_role(card, "card")
        title = shrinking_label("Ollama is not running", "ollama_card_title", "empty-title")
        what = shrinking_label(
            "Ollama is a separate app that downloads and runs models in its own service. When it runs, its models "
            "show here: chat with them, pull new ones, see what it holds in memory.",
            "ollama_card_text",
        )
        how = shrinking_label(
            "Start it with `ollama serve` in a terminal (or open the Ollama app), then check again.", "", "muted"
        )
        column = QVBoxLayout(card)
        column.setContentsMargins(SPACE_L, SPACE_L, SPACE_L, SPACE_L)
        column.setSpacing(SPACE_S)
        column.addWidget(title)
        column.addWidget(what)
        column.addWidget(how)
        column.addWidget(self.status_label)
        column.addLayout(widget_row(self.recheck_button, self.install_button, QWidget(), stretch_at=2))
        return card

    def _lay_out(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_S)
        self.running_label = shrinking_label("", "ollama_running_status")
        layout.addLayout(widget_row(self.running_label, self.refresh_button, stretch_at=0))
        layout.addWidget(self.card)
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        body.addWidget(self.notice)
        self.installed_heading = _heading("Installed models")
        body.addWidget(self.installed_heading)
        self.installed_stack = QStackedWidget()
        self.installed_stack.addWidget(self.installed_table)
        self.installed_stack.addWidget(self.empty)
        body.addWidget(self.installed_stack, 3)
        self.row_actions = QWidget()
        row = widget_row(self.chat_button, self.delete_button, QWidget(), stretch_at=2)
        row.setContentsMargins(0, 0, 0, 0)
        self.row_actions.setLayout(row)
        body.addWidget(self.row_actions)
        body.addWidget(self.confirm_bar)
        body.addWidget(_heading("Loaded in memory"))
        body.addWidget(self.running_table, 1)
        body.addWidget(self.running_empty)
        body.addWidget(_heading("Pull a model from the Ollama library"))
        body.addLayout(widget_row(self.pull_name, self.pull_button, self.pull_progress, self.pull_cancel, stretch_at=0))
        body.addWidget(self.pull_status)
        layout.addWidget(self.body, 1)
        layout.addStretch(0)  # takes the room only while the body is hidden (Ollama not running)
        for widget in (self.confirm_bar, self.pull_cancel, self.pull_progress, self.card, self.refresh_button):
            widget.hide()
        self.row_actions.hide()

    def _connect(self) -> None:
        self.installed_table.itemSelectionChanged.connect(self._selection_changed)
        self.installed_table.itemDoubleClicked.connect(self.chat_with_selected)
        self.confirm_delete_button.clicked.connect(self.confirm_delete)
        self.confirm_cancel_button.clicked.connect(self.confirm_bar.hide)
        self.pull_name.returnPressed.connect(self.pull)
        self._selection_changed()

    def _style(self) -> None:
        refresh_icons(self)
        self._show_status(self.status)

    def open_install_page(self) -> None:
        QDesktopServices.openUrl(QUrl(INSTALL_URL))

    def suggest(self, name: str) -> None:
        """A suggestion from the empty state: into the pull box, ready to pull."""
        self.pull_name.setText(name)
        self.pull_name.setFocus()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._style()

    # --- start, visibility, refresh ----------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """Ask Ollama whether it runs and list its models (off the Qt thread); the first call's task."""
        if self._started is None:
            self._started = self.recheck()
        return self._started

    def shown_again(self) -> None:
        """A later show asks Ollama again."""
        self.recheck()

    def showEvent(self, event: QShowEvent) -> None:
        """Memory is polled while the page is visible."""
        super().showEvent(event)
        if loop_running():
            self.timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.timer.stop()

    def settings_changed(self, event: SettingsChanged) -> None:
        """A new Ollama host: ask it."""
        if event.touches("ollama_host") and self._started is not None:
            self.recheck()

    def recheck(self) -> asyncio.Task[Any]:
        """Status and both tables again (Check again, Refresh, a later show, changed settings)."""
        self.recheck_button.setEnabled(False)
        self.refresh_button.setEnabled(False)
        return spawn(self._locked(self.refresh), "ollama models: refresh")

    def _tick(self) -> None:
        if not loop_running():
            return
        if self.ollama_running and self.isVisible() and not self._lock.locked():
            spawn(self._locked(self.refresh_running), "ollama models: running")

    async def _locked(self, step: Callable[[], Coroutine[Any, Any, None]]) -> None:
        async with self._lock:  # one conversation with Ollama at a time; a refresh never overtakes another
            await step()

    async def refresh(self) -> None:
        try:
            async with self.workstation.ollama.use() as service:
                status = await service.status()
                if status.running:
                    installed, running = await service.list_models(), await service.running_models()
        except OllamaError as exc:  # an unusable host setting, or Ollama went away between two calls
            status = OllamaStatus(False, self.workstation.settings.ollama_host, reason=str(exc))
        self._show_status(status)
        if status.running:
            self._fill_installed(installed)
            self._fill_running(running)

    async def refresh_running(self) -> None:
        try:
            async with self.workstation.ollama.use() as service:
                running = await service.running_models()
        except OllamaError as exc:  # stopped since the last look: say so calmly, once
            log.info("Ollama models in memory not listed: %s", exc)
            await self.refresh()
            return
        self._fill_running(running)

    def _show_status(self, status: OllamaStatus | None) -> None:
        self.status = status
        self.ollama_running = bool(status and status.running)
        self.recheck_button.setEnabled(True)
        self.refresh_button.setEnabled(True)
        if status is None:
            text = "Checking for Ollama…"
        elif status.running:
            text = f"● Ollama {status.version} is running at {status.host}"
        else:
            text = status.reason
        self.status_label.setText(text)
        self.running_label.setText(text if self.ollama_running or status is None else "")
        self.running_label.setVisible(self.ollama_running or status is None)
        set_role(self.running_label, "fits" if self.ollama_running else "muted")
        self.card.setVisible(status is not None and not status.running)
        self.refresh_button.setVisible(self.ollama_running)
        self.body.setVisible(self.ollama_running)
        if not self.ollama_running:
            self._fill_installed([])
            self._fill_running([])
            self.confirm_bar.hide()

    # --- tables -----------------------------------------------------------------------------------------------
    def _fill_installed(self, models: list[LocalModel]) -> None:
        selected, self.installed = self.selected_model(), models
        rows = [
            [
                (m.name, m.digest[:12], False),
                (format_bytes(m.size), f"{m.size:,} bytes", True),
                (m.family, "", False),
                (m.parameter_size, "", True),
                (m.quantization_level, "", False),
                (relative_time(m.modified_at), m.modified_at, False),
            ]
            for m in models
        ]
        _fill(self.installed_table, [m.name for m in models], rows)
        if selected in (names := [m.name for m in models]):
            self.installed_table.selectRow(names.index(selected))
        self.installed_stack.setCurrentIndex(1 if self.ollama_running and not models else 0)
        self._selection_changed()

    def _fill_running(self, models: list[RunningModel]) -> None:
        self.running = models
        rows = []
        for m in models:
            gpu = round(100 * m.vram_fraction)
            rows.append(
                [
                    (m.name, "", False),
                    (format_bytes(m.size), f"{m.size:,} bytes", True),
                    (format_bytes(m.size_vram), f"{m.size_vram:,} bytes", True),
                    (f"{gpu}%", f"{gpu}% GPU / {100 - gpu}% CPU", True),
                    (f"{m.context_length:,}" if m.context_length else "", "", True),
                    (relative_time(m.expires_at), m.expires_at, False),
                ]
            )
        _fill(self.running_table, [m.name for m in models], rows)
        self.running_table.setVisible(bool(models))
        self.running_empty.setVisible(not models)

    def selected_model(self) -> str:
        items = self.installed_table.selectedItems()
        return str(items[0].data(_NAME)) if items else ""

    def _selection_changed(self) -> None:
        """The row's actions show once a model is chosen."""
        chosen = bool(self.selected_model())
        self.chat_button.setEnabled(chosen)
        self.delete_button.setEnabled(chosen)
        self.row_actions.setVisible(chosen)

    # --- chat and delete --------------------------------------------------------------------------------------
    def chat_with_selected(self) -> None:
        if name := self.selected_model():
            self.chat_requested.emit(OLLAMA_PREFIX + name)

    def ask_delete(self) -> None:
        """An inline question, not a modal dialog: Delete or Cancel."""
        name = self.selected_model()
        if not name:
            return
        self._delete_name = name
        self.notice.dismiss("delete")
        size = next((format_bytes(m.size) for m in self.installed if m.name == name), "")
        self.confirm_text.setText(f"Delete {name} from Ollama ({size})? Pulling it again downloads it again.")
        self.confirm_bar.show()

    def confirm_delete(self) -> asyncio.Task[Any] | None:
        self.confirm_bar.hide()
        name, self._delete_name = self._delete_name, ""
        return spawn(self._locked(lambda: self._delete(name)), f"ollama rm {name}") if name else None

    async def _delete(self, name: str) -> None:
        try:
            async with self.workstation.ollama.use() as service:
                await service.delete(name)
        except OllamaError as exc:
            log.warning("delete %s failed: %s", name, exc)
            self.notice.show_notice(f"{name} was not deleted: {exc}", level="error", key="delete")
        else:
            self.notice.show_notice(f"Deleted {name}.", level="success", key="delete")
        await self.refresh()

    # --- pull -------------------------------------------------------------------------------------------------
    def pull(self) -> asyncio.Task[Any] | None:
        name = self.pull_name.text().strip()
        if self._pull_task is not None and not self._pull_task.done():
            return self._pull_task
        if not name:
            self._say(self.pull_status, "Type the name of a model to pull, for example llama3.2.", error=True)
            return None
        self._pulling(True)
        self._say(self.pull_status, f"Pulling {name}…")
        self._pull_task = spawn(self._pull(name), f"ollama pull {name}")
        return self._pull_task

    def cancel_pull(self) -> None:
        if self._pull_task is not None and not self._pull_task.done():
            self._pull_task.cancel()

    async def _pull(self, name: str) -> None:
        try:
            async with self.workstation.ollama.use() as service:
                await service.pull(name, self._pull_progressed)
        except OllamaError as exc:
            log.warning("pull %s failed: %s", name, exc)
            self._say(self.pull_status, f"{name} was not pulled: {exc}", error=True)
        except asyncio.CancelledError:
            self._say(self.pull_status, f"Pull of {name} cancelled. Pull it again to continue the download.")
            raise
        else:
            self._say(self.pull_status, f"Pulled {name}: it is in the list above, ready to chat with.")
            self.pull_name.clear()
        finally:
            self._pulling(False)
        await self._locked(self.refresh)

    def _pulling(self, active: bool) -> None:
        self.pull_button.setEnabled(not active)
        self.pull_name.setEnabled(not active)
        self.pull_cancel.setVisible(active)
        self.pull_progress.setVisible(active)
        self.pull_progress.setRange(0, 0)  # busy until the first sizes arrive

    def _pull_progressed(self, progress: PullProgress) -> None:
        text = "Finishing…" if progress.done else progress.status
        if progress.total:
            self.pull_progress.setRange(0, 1000)
            self.pull_progress.setValue(int(1000 * progress.completed / progress.total))
            text += f" — {format_bytes(progress.completed)} of {format_bytes(progress.total)}"
        self._say(self.pull_status, text)

    def _say(self, label: QLabel, text: str, error: bool = False) -> None:
        label.setText(text)
        label.setVisible(bool(text))
        color = error_color(self.palette()) if error else self.palette().color(QPalette.ColorRole.WindowText)
        set_text_color(label, color)


def _heading(text: str) -> QLabel:
    return shrinking_label(text, "", "section")
