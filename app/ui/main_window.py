"""The main window: navigation, the panels, the status bar, the log dock and the menus."""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QStackedWidget,
    QTabWidget,
    QWidget,
)

from app import __version__
from app.core.lazy_import import import_now
from app.core.modelfile.parser import Modelfile
from app.services.workstation import Workstation
from app.ui import window_state
from app.ui.log_viewer import LogViewer
from app.ui.page import Page
from app.ui.page_paths import PAGE_PATHS
from app.ui.status_bar import AppStatusBar
from app.ui.style.icons import icon
from app.ui.tasks import loop_running, spawn

if TYPE_CHECKING:  # the pages' modules are imported when a page is first built, not at start-up
    from pathlib import Path

    from app.services.api.events import ApiEvent
    from app.ui.pages.batch.panel import BatchPanel
    from app.ui.pages.bench.panel import BenchPanel
    from app.ui.pages.chat.panel import ChatPanel
    from app.ui.pages.modelfiles.panel import ModelfilePanel
    from app.ui.pages.models.discover import DiscoverPanel
    from app.ui.pages.models.downloads import DownloadsPanel
    from app.ui.pages.models.library import ModelsPanel
    from app.ui.pages.models.ollama import OllamaModelsPanel
    from app.ui.pages.monitor.panel import MonitorPanel
    from app.ui.pages.server.page import ServerPage
    from app.ui.pages.settings.page import SettingsPage
    from app.ui.pages.vllm.panel import VllmPanel

WINDOW_CLASS = "llm-workstation"
NAV_WIDE, NAV_NARROW, NAV_COMPACT_BELOW = 150, 48, 1150
CLIENT_WARM_UP_DELAY_MS = 1500
MONITOR_START_DELAY_MS = 1500  # after the warm-up: sampling (alerts in the status bar) begins 3 s after the show
RESUME_DOWNLOADS_DELAY_MS = 250  # after the first frame: the window shows first, then downloads resume
log = logging.getLogger("app.ui")


@dataclass
class PageSpec:
    """A top-level page: its name in the navigation, its icon, and how to build it (when first shown)."""

    name: str
    icon: str  # a name in app.ui.style.icons
    build: Callable[[], QWidget]


@dataclass(frozen=True)
class ViewSpec:
    """A page or sub-page, built the first time it is asked for: ``cls(workstation, window)`` from ``module``
    (imported then, not at start-up), then ``wire(window, view)`` connects its requests to the window."""

    module: str
    cls: str
    wire: Callable[[MainWindow, Any], None] | None = None
    extra: Callable[[MainWindow], tuple[object, ...]] = lambda _window: ()  # arguments after the workstation


def _wire_library(window: MainWindow, panel: ModelsPanel) -> None:
    panel.load_in_chat_requested.connect(window.chat_with_model)
    panel.serve_in_vllm_requested.connect(window.serve_with_vllm)
    panel.starter_requested.connect(window.use_starter_model)
    panel.open_page_requested.connect(window.open_path)


def _wire_downloads(window: MainWindow, panel: DownloadsPanel) -> None:
    panel.open_page_requested.connect(window.open_path)


def _wire_batch(window: MainWindow, panel: BatchPanel) -> None:
    panel.open_page_requested.connect(window.open_path)


def _wire_monitor(window: MainWindow, panel: MonitorPanel) -> None:
    panel.open_page_requested.connect(window.open_path)


def _start_monitor(window: MainWindow) -> None:
    """The monitor samples from start-up, its page opened or not: its alerts go to the status bar."""
    if not (window._closing or window._closed):
        window.status.follow_monitor(window.workstation.monitor)
        spawn(window.workstation.monitor.start(), "monitor: start")


def _status_bar(window: MainWindow) -> tuple[object, ...]:
    return (window.status,)


VIEWS: dict[str, ViewSpec] = {
    "chat": ViewSpec("app.ui.pages.chat.panel", "ChatPanel", extra=_status_bar),
    "library": ViewSpec("app.ui.pages.models.library", "ModelsPanel", _wire_library),
    "discover": ViewSpec("app.ui.pages.models.discover", "DiscoverPanel"),
    "downloads": ViewSpec("app.ui.pages.models.downloads", "DownloadsPanel", _wire_downloads),
    "ollama": ViewSpec(
        "app.ui.pages.models.ollama", "OllamaModelsPanel", lambda w, p: p.chat_requested.connect(w.chat_with_model)
    ),
    "modelfiles": ViewSpec(
        "app.ui.pages.modelfiles.panel",
        "ModelfilePanel",
        lambda w, p: p.use_in_chat_requested.connect(w.use_modelfile_in_chat),
    ),
    "vllm": ViewSpec("app.ui.pages.vllm.panel", "VllmPanel"),
    "batch": ViewSpec("app.ui.pages.batch.panel", "BatchPanel", _wire_batch),
    "bench": ViewSpec("app.ui.pages.bench.panel", "BenchPanel"),
    "documents": ViewSpec("app.ui.pages.documents.page", "DocumentsPage"),
    "monitor": ViewSpec("app.ui.pages.monitor.panel", "MonitorPanel", _wire_monitor),
    "server": ViewSpec("app.ui.pages.server.page", "ServerPage"),
    "settings": ViewSpec("app.ui.pages.settings.page", "SettingsPage"),
}


class MainWindow(QMainWindow):
    """The window: navigation, pages (each built when first shown), status bar, log dock and menus. It holds no
    engine and no store: those are the workstation's (its composition root is ``app.ui.app``)."""

    def __init__(self, workstation: Workstation) -> None:
        super().__init__()
        self.workstation = workstation
        self.setWindowTitle("LLM Workstation")
        self.setObjectName("MainWindow")
        self.resize(window_state.DEFAULT_SIZE)  # until restore_window_state fits it to the screen
        self._state_file: Path | None = None  # where the window's state is kept, once restored from it
        self.status = AppStatusBar(self)
        self.setStatusBar(self.status)
        self.status.backend_label.clicked.connect(self.show_engine_menu)
        self.status.server_label.clicked.connect(lambda: self.show_page("API server"))
        self._widgets: dict[str, QWidget] = {}  # every page and sub-page built so far, by name
        self._specs = [
            PageSpec("Chat", "chat", lambda: self._view("chat")),
            PageSpec("Models", "models", self._build_models),
            PageSpec("Modelfiles", "modelfiles", lambda: self._view("modelfiles")),
            PageSpec("vLLM", "vllm", lambda: self._view("vllm")),
            PageSpec("Batch", "batch", lambda: self._view("batch")),
            PageSpec("Bench", "bench", lambda: self._view("bench")),
            PageSpec("Documents", "documents", lambda: self._view("documents")),
            PageSpec("Monitor", "monitor", lambda: self._view("monitor")),
            PageSpec("API server", "api", lambda: self._view("server")),
            PageSpec("Settings", "settings", lambda: self._view("settings")),
        ]  # Ctrl+1 … Ctrl+9 show them in this order
        self._build_central()
        self._build_log_dock()
        self._build_menus()
        self._closing = False
        self._closed = False
        self._clients_warmed = False
        if workstation.settings_problem:
            problem = workstation.settings_problem + " Default settings are used for now."
            self.chat_panel.show_notice(problem, "warning")  # stays until dismissed: the user's file was not read

    # --- pages, built when first needed ---------------------------------------------------------------------
    def _build_central(self) -> None:
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.setIconSize(QSize(20, 20))
        self.nav.setFixedWidth(NAV_WIDE)
        self.nav.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.pages = QStackedWidget()
        for spec in self._specs:
            item = QListWidgetItem(icon(spec.icon), spec.name)
            item.setToolTip(spec.name)
            self.nav.addItem(item)
            placeholder = QWidget()
            placeholder.setObjectName(_page_name(spec))
            self.pages.addWidget(placeholder)
        self.nav.currentRowChanged.connect(self._show_row)
        self.nav.setCurrentRow(0)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.nav)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Below ~1150 px the navigation shows icons only, so the page keeps the width."""
        super().resizeEvent(event)
        compact = self.width() < NAV_COMPACT_BELOW
        if compact != (self.nav.width() == NAV_NARROW):
            self.nav.setFixedWidth(NAV_NARROW if compact else NAV_WIDE)
            for row, spec in enumerate(self._specs):
                item = self.nav.item(row)
                if item is not None:
                    item.setText("" if compact else spec.name)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            for row, spec in enumerate(self._specs):  # icons follow the palette
                item = self.nav.item(row)
                if item is not None:
                    item.setIcon(icon(spec.icon))

    def _show_row(self, row: int) -> None:
        if row < 0:
            return
        self._page_at(row)
        self.pages.setCurrentIndex(row)

    def _page_at(self, row: int) -> QWidget:
        """The top-level page in that row, built now if it was not yet."""
        spec = self._specs[row]
        if spec.name in self._widgets:
            return self._widgets[spec.name]
        page = spec.build()
        page.setObjectName(_page_name(spec))
        self._widgets[spec.name] = page
        placeholder = self.pages.widget(row)
        self.pages.insertWidget(row, page)
        if placeholder is not None:
            self.pages.removeWidget(placeholder)
            placeholder.deleteLater()
        if row == self.nav.currentRow():
            self.pages.setCurrentIndex(row)
        return page

    def show_page(self, name: str) -> QWidget:
        row = next(i for i, spec in enumerate(self._specs) if spec.name == name)
        page = self._page_at(row)
        self.nav.setCurrentRow(row)
        return page

    def open_path(self, path: str) -> QWidget:
        """Show a page by its path (``chat``, ``models/discover``, ``batch/runner`` …, see ``PAGE_PATHS``); returns
        the page or sub-page shown. Raises KeyError for an unknown path."""
        top, tab = PAGE_PATHS[path]
        page = self.show_page(top)
        if tab is not None and isinstance(page, QTabWidget):
            for index in range(page.count()):
                if page.tabText(index) == tab:
                    page.setCurrentIndex(index)
                    return page.widget(index) or page
        return page

    def _view(self, key: str) -> QWidget:
        """The page or sub-page ``key`` (``chat``, ``library`` … in ``VIEWS``), built and wired the first time."""
        if key not in self._widgets:
            spec = VIEWS[key]
            view_class = getattr(importlib.import_module(spec.module), spec.cls)
            view = view_class(self.workstation, *spec.extra(self), self)
            self._widgets[key] = view
            if spec.wire is not None:
                spec.wire(self, view)
        return self._widgets[key]

    def _build_models(self) -> QWidget:
        tabs = QTabWidget()
        tabs.addTab(self.models_panel, "Library")
        tabs.addTab(self.discover_panel, "Discover")
        tabs.addTab(self.downloads_panel, "Downloads")
        tabs.addTab(self.ollama_models_panel, "Ollama")
        return tabs

    # The pages, by name, typed for their callers: each is built the first time it is asked for.
    @property
    def chat_panel(self) -> ChatPanel:
        return cast("ChatPanel", self._view("chat"))

    @property
    def models_panel(self) -> ModelsPanel:
        return cast("ModelsPanel", self._view("library"))

    @property
    def downloads_panel(self) -> DownloadsPanel:
        return cast("DownloadsPanel", self._view("downloads"))

    @property
    def discover_panel(self) -> DiscoverPanel:
        return cast("DiscoverPanel", self._view("discover"))

    @property
    def ollama_models_panel(self) -> OllamaModelsPanel:
        return cast("OllamaModelsPanel", self._view("ollama"))

    @property
    def modelfile_panel(self) -> ModelfilePanel:
        return cast("ModelfilePanel", self._view("modelfiles"))

    @property
    def vllm_panel(self) -> VllmPanel:
        return cast("VllmPanel", self._view("vllm"))

    @property
    def batch_panel(self) -> BatchPanel:
        return cast("BatchPanel", self._view("batch"))

    @property
    def bench_panel(self) -> BenchPanel:
        return cast("BenchPanel", self._view("bench"))

    @property
    def monitor_panel(self) -> MonitorPanel:
        return cast("MonitorPanel", self._view("monitor"))

    @property
    def server_page(self) -> ServerPage:
        return cast("ServerPage", self._view("server"))

    @property
    def settings_page(self) -> SettingsPage:
        return cast("SettingsPage", self._view("settings"))

    def built_pages(self) -> list[Page]:
        """Every page built so far (a top-level page that is also a sub-page counts once)."""
        unique = {id(page): page for page in self._widgets.values() if isinstance(page, Page)}
        return list(unique.values())

    # --- actions across pages -------------------------------------------------------------------------------
    def show_engine_menu(self) -> None:
        """The status bar's switcher: every model the chat can run on, grouped by engine."""
        menu = QMenu(self)
        models = self.chat_panel.model_bar.models
        for index in range(models.count()):
            entry = str(models.itemData(index))
            action = menu.addAction(models.itemText(index))
            action.triggered.connect(lambda _checked=False, e=entry: self.chat_with_model(e))
        if menu.isEmpty():
            menu.addAction("No model yet: open a .gguf file on the Chat page").setEnabled(False)
        button = self.status.backend_label
        menu.popup(button.mapToGlobal(button.rect().topLeft()))

    def chat_with_model(self, entry: str) -> None:
        """ "Chat with it" from a models list: load the model in the chat page and show the chat."""
        self.chat_panel.model_bar.select(entry)
        self.chat_panel.load_model(entry)
        self.show_page("Chat")

    def use_starter_model(self) -> None:
        """ "Use the starter model" from another page: the chat page writes and loads it, and is shown."""
        self.show_page("Chat")
        self.chat_panel.use_starter_model()

    def serve_with_vllm(self, model_folder: str) -> None:
        """An HF-format model from the library: put it in the vLLM page's model field and show that page."""
        self.vllm_panel.form.model.setText(model_folder)
        self.show_page("vLLM")

    def _api_event(self, event: ApiEvent) -> None:
        """The API server started, stopped or took a request: the status bar follows."""
        from app.services.api.events import ApiStateChanged

        if isinstance(event, ApiStateChanged):
            self.status.show_server(event.snapshot.url, event.snapshot.requests)
        else:
            self.status.show_server(self.workstation.api.url, event.requests)

    def new_chat(self) -> None:
        """File → New chat (Ctrl+N) from any page: the Chat page is shown, with a new chat in it."""
        self.show_page("Chat")
        self.chat_panel.new_chat()

    def search_chats(self) -> None:
        """Ctrl+F: the Chat page is shown and its search box takes the typing."""
        self.show_page("Chat")
        self.chat_panel.set_chats_open(True)  # the search sits atop the chats column, which may be closed
        box = self.chat_panel.chats.search_box
        box.setFocus(Qt.FocusReason.ShortcutFocusReason)
        box.selectAll()

    def use_modelfile_in_chat(self, modelfile: Modelfile) -> None:
        """ "Use in chat" from the Modelfile page: apply it as a preset and show the chat."""
        path = self.modelfile_panel.path
        self.chat_panel.apply_modelfile(modelfile, path.name.split(".")[0] if path else "Modelfile")
        self.show_page("Chat")

    def _build_log_dock(self) -> None:
        self.log_viewer = LogViewer(self.workstation.log_buffer)
        self.log_dock = QDockWidget("Log", self)
        self.log_dock.setObjectName("log_dock")
        self.log_dock.setWidget(self.log_viewer)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.log_dock)
        self.log_dock.hide()

    def _build_menus(self) -> None:
        """The menus; every action in them has a shortcut, shown beside it, that works from any page."""
        file_menu = self.menuBar().addMenu("&File")
        open_keys = QKeySequence(QKeySequence.StandardKey.Open)
        self._action(file_menu, "&Open model…", self.chat_panel.choose_model_file, open_keys)
        self._action(file_menu, "&New chat", self.new_chat, QKeySequence("Ctrl+N"))
        self._action(file_menu, "&Find in chats…", self.search_chats, QKeySequence("Ctrl+F"))
        file_menu.addSeparator()
        self._action(file_menu, "&Settings…", self.open_settings, QKeySequence("Ctrl+,"))
        file_menu.addSeparator()
        quit_keys = QKeySequence("Ctrl+Q")  # StandardKey.Quit is empty on some desktops
        self._action(file_menu, "&Quit", self.close, quit_keys)
        view_menu = self.menuBar().addMenu("&View")
        for number, spec in enumerate(self._specs[:10], start=1):  # Ctrl+1 … Ctrl+9, then Ctrl+0 for the tenth
            keys = QKeySequence(f"Ctrl+{number % 10}")
            self._action(view_menu, spec.name, functools.partial(self.show_page, spec.name), keys)
        view_menu.addSeparator()
        toggle_log = self.log_dock.toggleViewAction()
        toggle_log.setText("&Log")
        toggle_log.setShortcut(QKeySequence("Ctrl+L"))
        view_menu.addAction(toggle_log)
        help_menu = self.menuBar().addMenu("&Help")
        about_keys = QKeySequence(QKeySequence.StandardKey.HelpContents)
        self._action(help_menu, "&About LLM Workstation", self.show_about, about_keys)

    def _action(
        self, menu: QMenu, text: str, slot: Callable[[], object], shortcut: QKeySequence | None = None
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        self.addAction(action)
        return action

    def open_settings(self) -> None:
        self.show_page("Settings")

    def show_about(self) -> None:
        box = QMessageBox(self)
        box.setWindowTitle("About LLM Workstation")
        box.setText(
            f"<b>LLM Workstation {__version__}</b><br>Run large language models on your own machine: "
            "llama.cpp chat, vLLM serving, a live VRAM and KV-page monitor, Ollama Modelfiles as presets."
        )
        box.open()

    # --- size, place and panes, kept between runs ---------------------------------------------------------
    def restore_window_state(self) -> None:
        """Before the first show: size, place, maximized state and panes as the person left them, fitted to this
        screen (the first time: sized to the screen); they are saved again when the window closes."""
        self._state_file = window_state.state_file(self.workstation.paths.config_dir)
        window_state.apply(self, window_state.load(self._state_file))

    def save_window_state(self) -> None:
        if self._state_file is not None:
            window_state.save(self._state_file, window_state.capture(self))

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._clients_warmed:
            self._clients_warmed = True
            if self._state_file is not None:  # framed now: a frame taller than guessed still fits the screen
                QTimer.singleShot(0, self, lambda: window_state.keep_on_screen(self))
            QTimer.singleShot(RESUME_DOWNLOADS_DELAY_MS, self, self._resume_downloads)
            QTimer.singleShot(CLIENT_WARM_UP_DELAY_MS, self._warm_up_clients)
            QTimer.singleShot(0, self, self._follow_api)

    def _follow_api(self) -> None:
        """After the first frame: the status bar follows the local API server, which starts now when the settings
        say so (its page is not built)."""
        api = self.workstation.api
        unfollow = api.subscribe(self._api_event)
        self.destroyed.connect(lambda: unfollow())
        self.status.show_server(api.url, api.snapshot().requests)
        if loop_running() and not (self._closing or self._closed):
            spawn(api.autostart(), "api: autostart")

    def _resume_downloads(self) -> None:
        """Unfinished downloads continue once the window is up (the workstation's service; no page is built)."""
        if loop_running() and not (self._closing or self._closed):
            spawn(self.workstation.downloads.start(), "downloads: resume")

    def _warm_up_clients(self) -> None:
        """Soon after start-up: list Ollama's models for the chat, and load the HTTP and Ollama client libraries
        on a worker thread so the first page that talks to a server does not pay ~250 ms of imports on the Qt
        thread."""
        if loop_running() and not (self._closing or self._closed):
            spawn(_import_clients(), "warm-up imports")
            spawn(self.chat_panel.refresh_ollama_models(), "list Ollama models")  # for the chat's model picker
            spawn(_follow_documents(self.workstation), "documents: follow watched folders")
            QTimer.singleShot(MONITOR_START_DELAY_MS, self, lambda: _start_monitor(self))  # 3 s after the show

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closing:  # a close while the shutdown runs (a SIGTERM after the close button) would cut it short
            event.ignore()
            return
        self.save_window_state()  # while it still has its size and panes
        if self._closed or not asyncio.get_event_loop().is_running():
            event.accept()
            return
        event.ignore()
        self._closing = True
        spawn(self._shutdown(), "shutdown")

    async def _shutdown(self) -> None:
        try:
            await self.shutdown_panels()
        finally:
            self._closing = False  # done (_closed is set): this close is accepted
            self.close()

    async def shutdown_panels(self) -> None:
        """Shut every page down (a reply in flight is saved as stopped), then the engines and the history."""
        if self._closed:
            return
        self._closed = True
        for page in self.built_pages():
            await page.shutdown()
        await self.workstation.close()


async def _import_clients() -> None:
    await asyncio.get_running_loop().run_in_executor(None, import_now, "httpx", "ollama")


async def _follow_documents(workstation: Workstation) -> None:
    """Where there is a document index: open it (its modules imported on a worker thread), so its watched folders
    are followed and unfinished embedding goes on from start-up, not only once a page or a chat uses documents."""
    path = workstation.paths.data_dir / "documents.sqlite3"
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, path.exists):
        return
    await loop.run_in_executor(None, import_now, "app.services.documents.service", "app.services.documents.embedder")
    await workstation.documents.open()


def _page_name(spec: PageSpec) -> str:
    """The page's object name: ``chat_page``, ``vllm_page``, ``api_server_page`` …"""
    return f"{spec.name.lower().replace(' ', '_')}_page"
