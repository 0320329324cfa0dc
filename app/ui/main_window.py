"""The main window: navigation, the panels, the status bar, the log dock and the menus."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QStackedWidget,
    QStyle,
    QTabWidget,
    QWidget,
)

from app import __version__
from app.core.lazy_import import import_now
from app.core.modelfile import Modelfile
from app.core.settings import Settings, save_settings
from app.ui.batch_panel import BatchPanel
from app.ui.bench_panel import BenchPanel
from app.ui.chat_panel import ChatPanel
from app.ui.context import AppContext
from app.ui.dialogs.settings_dialog import SettingsDialog
from app.ui.discover_panel import DiscoverPanel
from app.ui.downloads_panel import DownloadsPanel
from app.ui.log_viewer import LogViewer
from app.ui.modelfile_panel import ModelfilePanel
from app.ui.models_panel import ModelsPanel
from app.ui.monitor_panel import MonitorPanel, monitor_targets
from app.ui.ollama_models_panel import OllamaModelsPanel
from app.ui.status_bar import AppStatusBar
from app.ui.tasks import loop_running, spawn
from app.ui.vllm_panel import VllmPanel

WINDOW_CLASS = "llm-workstation"
CLIENT_WARM_UP_DELAY_MS = 1500
log = logging.getLogger("app.ui")

_NAV_ICONS = {
    "Chat": QStyle.StandardPixmap.SP_MessageBoxInformation,
    "Models": QStyle.StandardPixmap.SP_DriveHDIcon,
    "Modelfiles": QStyle.StandardPixmap.SP_FileDialogDetailedView,
    "Batch": QStyle.StandardPixmap.SP_FileDialogListView,
    "Bench": QStyle.StandardPixmap.SP_MediaSeekForward,
    "Monitor": QStyle.StandardPixmap.SP_ComputerIcon,
}


class MainWindow(QMainWindow):
    def __init__(self, context: AppContext) -> None:
        super().__init__()
        self.context = context
        self.setWindowTitle("LLM Workstation")
        self.setObjectName("MainWindow")
        self.resize(1200, 780)
        self.status = AppStatusBar(self)
        self.setStatusBar(self.status)
        self.chat_panel = ChatPanel(context, self.status, self)
        self.modelfile_panel = ModelfilePanel(context, self)
        self.modelfile_panel.use_in_chat_requested.connect(self.use_modelfile_in_chat)
        self.ollama_models_panel = OllamaModelsPanel(context, self)
        self.ollama_models_panel.chat_requested.connect(self.chat_with_model)
        self.models_panel = ModelsPanel(context, self)
        self.models_panel.load_in_chat_requested.connect(self.chat_with_model)
        self.models_panel.serve_in_vllm_requested.connect(self.serve_with_vllm)
        self.downloads_panel = DownloadsPanel(context, self)
        self.downloads_panel.download_completed.connect(self._download_completed)
        self.discover_panel = DiscoverPanel(context, self.downloads_panel, self)
        self.vllm_panel = VllmPanel(context, self)
        self.batch_panel = BatchPanel(context, self)
        self.bench_panel = BenchPanel(context, self)
        self.monitor_panel = MonitorPanel(context, self, targets=lambda: monitor_targets(context, self.vllm_panel))
        self.monitor_panel.alerts_changed.connect(self.status.show_alerts)
        self.monitor_panel.settings_changed_requested.connect(self.apply_setting_changes)
        self._connect_vllm()
        self.status.backend_label.clicked.connect(self.show_engine_menu)
        self._build_central()
        self._build_log_dock()
        self._build_menus()
        self._settings_dialog: SettingsDialog | None = None
        self._closing = False
        self._clients_warmed = False
        if context.settings_problem:
            self.chat_panel.show_notice(context.settings_problem + " Default settings are used for now.")

    def _build_central(self) -> None:
        self.nav = QListWidget()
        self.nav.setIconSize(QSize(20, 20))
        self.nav.setFixedWidth(150)
        self.pages = QStackedWidget()
        built: dict[str, QWidget] = {
            "Chat": self.chat_panel,
            "Models": self._models_page(),
            "Modelfiles": self.modelfile_panel,
            "Batch": self._batch_page(),
            "Bench": self.bench_panel,
            "Monitor": self.monitor_panel,
        }
        for name in _NAV_ICONS:
            item = QListWidgetItem(self.style().standardIcon(_NAV_ICONS[name]), name)
            self.nav.addItem(item)
            page = built[name]
            page.setObjectName(f"{name.lower()}_page")
            self.pages.addWidget(page)
        self.nav.currentRowChanged.connect(self.pages.setCurrentIndex)
        self.nav.setCurrentRow(0)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.nav)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)

    def _models_page(self) -> QTabWidget:
        tabs = QTabWidget()
        tabs.addTab(self.models_panel, "Library")
        tabs.addTab(self.discover_panel, "Discover")
        tabs.addTab(self.downloads_panel, "Downloads")
        tabs.addTab(self.ollama_models_panel, "Ollama")
        return tabs

    def _batch_page(self) -> QTabWidget:
        tabs = QTabWidget()
        tabs.addTab(self.vllm_panel, "vLLM server")
        tabs.addTab(self.batch_panel, "Batch runner")
        return tabs

    def _connect_vllm(self) -> None:
        """A ready vLLM server is offered to the chat (as an engine) and to the batch runner (as an endpoint)."""
        self.vllm_panel.settings_changed_requested.connect(self.apply_setting_changes)
        self.vllm_panel.server_ready.connect(self._vllm_ready)
        self.vllm_panel.server_stopped.connect(self.chat_panel.withdraw_vllm_server)
        self.vllm_panel.server_stopped.connect(self.batch_panel.clear_endpoint)
        self.vllm_panel.server_stopped.connect(self.bench_panel.clear_vllm_server)

    def _vllm_ready(self, base_url: str, served_model: str, api_key: str) -> None:
        self.chat_panel.offer_vllm_server(base_url, served_model, api_key or None)
        self.batch_panel.set_endpoint(base_url, api_key, served_model)
        self.bench_panel.set_vllm_server(base_url, served_model, api_key)

    def apply_setting_changes(self, changes: dict[str, object]) -> None:
        for name, value in changes.items():
            setattr(self.context.settings, name, value)
        spawn(self.save_settings(), "save settings")

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
        """ "Chat with it" from a models list: load the model in the chat panel and show the chat."""
        self.chat_panel.model_bar.select(entry)
        self.chat_panel.load_model(entry)
        self.nav.setCurrentRow(0)

    def serve_with_vllm(self, model_folder: str) -> None:
        """An HF-format model from the library: put it in the vLLM page's model field and show that page."""
        self.vllm_panel.form.model.setText(model_folder)
        row = list(_NAV_ICONS).index("Batch")
        self.nav.setCurrentRow(row)
        tabs = self.pages.widget(row)
        if isinstance(tabs, QTabWidget):
            tabs.setCurrentWidget(self.vllm_panel)

    def _build_log_dock(self) -> None:
        self.log_viewer = LogViewer(self.context.log_buffer)
        self.log_dock = QDockWidget("Log", self)
        self.log_dock.setObjectName("log_dock")
        self.log_dock.setWidget(self.log_viewer)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.log_dock)
        self.log_dock.hide()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        open_keys = QKeySequence(QKeySequence.StandardKey.Open)
        self._action(file_menu, "&Open model…", self.chat_panel.choose_model_file, open_keys)
        self._action(file_menu, "&New chat", self.chat_panel.new_chat, QKeySequence("Ctrl+N"))
        file_menu.addSeparator()
        self._action(file_menu, "&Settings…", self.open_settings, QKeySequence("Ctrl+,"))
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence(QKeySequence.StandardKey.Quit))
        view_menu = self.menuBar().addMenu("&View")
        toggle_log = self.log_dock.toggleViewAction()
        toggle_log.setText("&Log")
        toggle_log.setShortcut(QKeySequence("Ctrl+L"))
        view_menu.addAction(toggle_log)
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "&About LLM Workstation", self.show_about)

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
        self._settings_dialog = SettingsDialog(self.context.settings, self)
        self._settings_dialog.settings_saved.connect(self.apply_settings)
        self._settings_dialog.open()

    def apply_settings(self, settings: Settings) -> None:
        self.context.settings = settings
        self.context.settings_problem = None
        self.chat_panel.settings_changed()
        self.modelfile_panel.settings_changed()
        self.ollama_models_panel.settings_changed()
        self.models_panel.settings_changed()
        self.downloads_panel.settings_changed()
        self.vllm_panel.settings_changed()
        spawn(self.save_settings(), "save settings")

    def use_modelfile_in_chat(self, modelfile: Modelfile) -> None:
        """ "Use in chat" from the Modelfile panel: apply it as a preset and show the chat."""
        path = self.modelfile_panel.path
        self.chat_panel.apply_modelfile(modelfile, path.name.split(".")[0] if path else "Modelfile")
        self.nav.setCurrentRow(0)

    async def save_settings(self) -> None:
        """Write the settings off the Qt thread; never over a file that could not be read."""
        if self.context.settings_problem:
            log.warning("Not saving settings: %s", self.context.settings_problem)
            return
        snapshot = copy.deepcopy(self.context.settings)
        await asyncio.get_running_loop().run_in_executor(
            None, save_settings, snapshot, self.context.paths.settings_file
        )

    def show_about(self) -> None:
        box = QMessageBox(self)
        box.setWindowTitle("About LLM Workstation")
        box.setText(
            f"<b>LLM Workstation {__version__}</b><br>Run large language models on your own machine: "
            "llama.cpp chat, vLLM serving, a live VRAM and KV-page monitor, Ollama Modelfiles as presets."
        )
        box.open()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._clients_warmed:
            self._clients_warmed = True
            QTimer.singleShot(CLIENT_WARM_UP_DELAY_MS, self._warm_up_clients)

    def _warm_up_clients(self) -> None:
        """Load the HTTP and Ollama client libraries on a worker thread soon after start-up, so the first
        page that talks to a server does not pay ~250 ms of imports on the Qt thread."""
        if loop_running():
            spawn(_import_clients(), "warm-up imports")

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closing or self.chat_panel.closed or not asyncio.get_event_loop().is_running():
            event.accept()
            return
        event.ignore()
        self._closing = True
        spawn(self._shutdown(), "shutdown")

    async def _shutdown(self) -> None:
        await self.shutdown_panels()
        self.close()

    def _download_completed(self, _local_path: str) -> None:
        """A download landed: the library shows it."""
        rescan = getattr(self.models_panel, "rescan", None)
        if rescan is not None:
            rescan()

    async def shutdown_panels(self) -> None:
        """Stop what the panels run: a batch, a managed vLLM server, the chat engines and the history."""
        await self.monitor_panel.shutdown()
        await self.batch_panel.shutdown()
        await self.bench_panel.shutdown()
        await self.vllm_panel.shutdown()
        await self.downloads_panel.shutdown()
        await self.chat_panel.shutdown()


async def _import_clients() -> None:
    await asyncio.get_running_loop().run_in_executor(None, import_now, "httpx", "ollama")
