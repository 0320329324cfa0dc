"""The API server page: the machine's one local LLM endpoint (OpenAI- and Anthropic-compatible) over every engine.
Start/stop, where it listens, its key, the URL to copy, snippets to paste, coding agents to launch on it (in a
terminal, through ``llm-workstation launch``), and a live log of the requests.

The page is a view of ``workstation.api``: the server runs on the window's loop with the window's engine host (a
chat and an API client share the loaded model; the log shows the wait), keeps serving while other pages are shown,
and its request log is the service's, intact whenever the page is opened. The form writes the settings."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import AppError, UnavailableError
from app.core.units import MISSING
from app.services.agents.agents import agent_by_id
from app.services.agents.terminal import open_in_terminal
from app.services.api.events import ApiEvent, ApiRequestLogged, ApiSnapshot, ApiState, ApiStateChanged
from app.services.engines.entries import EngineKind
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.server.agents_card import AgentsCard
from app.ui.pages.server.snippets import PLACEHOLDER_MODEL, SNIPPETS
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_M, SPACE_S, set_role
from app.ui.tasks import spawn
from app.ui.widgets.notices import NoticeArea

if TYPE_CHECKING:
    from app.services.api.records import RequestRecord
    from app.services.settings_changes import SettingsChanged

API_KEY_ENV = "LLMW_API_KEY"  # what ``llm-workstation launch`` reads first
HOSTS = (("127.0.0.1", "This machine only (127.0.0.1)"), ("0.0.0.0", "The network (0.0.0.0) — needs an API key"))
COLUMNS = ("Time", "Client", "Endpoint", "Model", "Engine", "Tokens in/out", "Wait", "TTFT", "tok/s", "Status")
MAX_ROWS = 200
FORM_SETTINGS = ("api_host", "api_port", "api_key", "api_idle_ttl_s", "api_autostart")
BUSY = (ApiState.STARTING, ApiState.STOPPING)


class ServerPage(Page):
    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self._rows: dict[int, int] = {}  # request id → table row
        self._build()
        self._load_settings()
        snapshot = workstation.api.snapshot()  # a server started before the page (autostart), its log so far
        for record in snapshot.records[-MAX_ROWS:]:
            self._record(record)
        self._show_state(snapshot)
        self.follow(workstation.api.subscribe(self._api_event))

    # --- layout ---------------------------------------------------------------------------------------------
    def _build(self) -> None:
        title = QLabel("Local API server")
        set_role(title, "title")
        subtitle = QLabel(
            "One OpenAI- and Anthropic-compatible endpoint for every engine: other programs use the models "
            "this app runs. The chat and API clients share the loaded model."
        )
        subtitle.setWordWrap(True)
        set_role(subtitle, "muted")
        self.notices = NoticeArea()
        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
        column.setSpacing(SPACE_M)
        self.agents = AgentsCard()
        self.agents.launch_requested.connect(lambda agent_id: spawn(self.launch_agent(agent_id), "server: agent"))
        for widget in (title, subtitle, self.notices, self._control_card(), self._snippet_card(), self.agents):
            column.addWidget(widget)
        column.addWidget(self._log_card(), 1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)

    def _control_card(self) -> QFrame:
        card = _card()
        self.host_box = QComboBox()
        for value, label in HOSTS:
            self.host_box.addItem(label, value)
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setToolTip("0 picks a free port")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("none (only on 127.0.0.1)")
        generate = QPushButton("Generate")
        generate.clicked.connect(lambda: self.key.setText(secrets.token_urlsafe(24)))
        key_row = _row(self.key, generate)
        self.ttl = QSpinBox()
        self.ttl.setRange(0, 24 * 60)
        self.ttl.setSuffix(" min")
        self.ttl.setToolTip("A model the server loaded unloads after this long without requests (0: right away)")
        self.autostart = QCheckBox("Start with the app")
        form = QFormLayout()
        form.addRow("Listen on", self.host_box)
        form.addRow("Port", self.port)
        form.addRow("API key", key_row)
        form.addRow("Unload idle models after", self.ttl)
        form.addRow("", self.autostart)
        self.start_button = QPushButton(icon("play"), "Start server")
        set_role(self.start_button, "accent")
        self.start_button.clicked.connect(self.toggle)
        self.url_label = QLabel()
        self.url_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_url = QPushButton(icon("copy"), "Copy URL")
        self.copy_url.clicked.connect(self.copy_base_url)
        fields = QWidget()
        fields.setLayout(form)
        fields.setMaximumWidth(640)  # a readable form on a wide window
        layout = QVBoxLayout(card)
        layout.addWidget(fields)
        layout.addLayout(_row(self.start_button, self.url_label, self.copy_url, stretch_at=1))
        for edit in (self.port, self.ttl):
            edit.valueChanged.connect(self._save_settings)
        self.host_box.currentIndexChanged.connect(self._save_settings)
        self.key.editingFinished.connect(self._save_settings)
        self.autostart.toggled.connect(self._save_settings)
        return card

    def _snippet_card(self) -> QFrame:
        card = _card()
        heading = QLabel("Use it from")
        set_role(heading, "section")
        self.snippets = QTabWidget()
        self.snippet_texts: list[QPlainTextEdit] = []
        for name, _make in SNIPPETS:
            text = QPlainTextEdit()
            text.setReadOnly(True)
            text.setMaximumHeight(120)
            text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            self.snippet_texts.append(text)
            self.snippets.addTab(text, name)
        copy = QPushButton(icon("copy"), "Copy")
        copy.clicked.connect(self.copy_snippet)
        self.snippets.setMaximumHeight(150)
        layout = QVBoxLayout(card)
        layout.addLayout(_row(heading, copy, stretch_at=0))
        layout.addWidget(self.snippets)
        return card

    def _log_card(self) -> QFrame:
        card = _card()
        heading = QLabel("Requests")
        set_role(heading, "section")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("server_requests")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMinimumHeight(140)
        self.empty_log = QLabel("No requests yet. Start the server, then try the curl line above.")
        set_role(self.empty_log, "muted")
        layout = QVBoxLayout(card)
        layout.addWidget(heading)
        layout.addWidget(self.empty_log)
        layout.addWidget(self.table, 1)
        return card

    # --- the Page protocol ----------------------------------------------------------------------------------
    def shown_again(self) -> None:
        self.agents.refresh()  # one installed meanwhile

    def settings_changed(self, event: SettingsChanged) -> None:
        if event.touches(*FORM_SETTINGS):  # written here, or elsewhere (the Settings page, a file read again)
            self._load_settings()
            self._fill_snippets()

    # --- start / stop ---------------------------------------------------------------------------------------
    def toggle(self) -> asyncio.Task[Any] | None:
        api = self.workstation.api
        if api.state in BUSY:
            return None
        if api.state is ApiState.SERVING:
            return spawn(api.stop(), "server: stop")
        self._save_settings()  # what the form shows is what starts (a key still being typed included)
        return spawn(self._start(), "server: start")

    async def _start(self) -> None:
        with contextlib.suppress(AppError, OSError):  # the service's snapshot says why: shown as a notice
            await self.workstation.api.start()

    # --- coding agents --------------------------------------------------------------------------------------
    async def launch_agent(self, agent_id: str) -> list[str] | None:
        """Open the agent in a terminal on this server (started first when it is not running), through
        ``llm-workstation launch``; returns the terminal's argv. Without a terminal, a notice offers the command."""
        api, agent = self.workstation.api, agent_by_id(agent_id)
        if api.state is not ApiState.SERVING:
            self._save_settings()  # what the form shows is what starts
            await self._start()
        url = api.url
        if url is None:
            return None  # the notice says why it did not start
        port = url.rsplit(":", 1)[1]
        shown = shlex.join(["llm-workstation", "launch", agent_id, "--port", port])
        env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
        if api.api_key:
            env[API_KEY_ENV] = api.api_key  # the key this server asks for, not one the app's shell may hold
        try:
            argv = open_in_terminal([sys.executable, "-m", "app", "launch", agent_id, "--port", port, "--keep-open"],
                                    env)  # fmt: skip
        except UnavailableError as exc:
            copy = ("Copy command", lambda: QGuiApplication.clipboard().setText(shown))
            self.notices.show_notice(f"{exc} The command: {shown}", "warning", key="agent", action=copy)
            return None
        self.notices.show_notice(f"{agent.name} opened in a terminal ({Path(argv[0]).name}) on {url}.", "success",
                                 key="agent")  # fmt: skip
        return argv

    # --- state ----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str | None:
        return self.workstation.api.url

    @property
    def api_key(self) -> str | None:
        """The key the running server asks for (None: none, or not running)."""
        return self.workstation.api.api_key

    def _api_event(self, event: ApiEvent) -> None:
        if isinstance(event, ApiStateChanged):
            self._show_state(event.snapshot)
        elif isinstance(event, ApiRequestLogged):
            self._record(event.record)

    def _show_state(self, snapshot: ApiSnapshot) -> None:
        state, url = snapshot.state, snapshot.url
        self.start_button.setEnabled(state not in BUSY)
        self.start_button.setText("Stop server" if state is ApiState.SERVING else "Start server")
        self.start_button.setIcon(icon("stop" if state is ApiState.SERVING else "play"))
        self.url_label.setText(_state_line(snapshot))
        self.copy_url.setEnabled(url is not None)
        for widget in (self.host_box, self.port, self.key, self.ttl):
            widget.setEnabled(state in (ApiState.STOPPED, ApiState.FAILED))
        if state is ApiState.FAILED and snapshot.error:
            self.notices.show_notice(snapshot.error, "error", key="server")
        elif state is ApiState.STARTING:
            self.notices.clear()
        self._fill_snippets()

    def _fill_snippets(self) -> None:
        url = self.url or f"http://{self._host_for_clients()}:{self.port.value() or 8417}"
        key = self.api_key if self.url else self._key()  # serving: the key it asks for, whatever the form says
        model = self._example_model()
        for text, (_name, make) in zip(self.snippet_texts, SNIPPETS, strict=True):
            text.setPlainText(make(url, model, key))

    def _example_model(self) -> str:
        loaded = self.workstation.host.loaded(EngineKind.LLAMACPP)
        if loaded is not None:
            from app.services.library.names import model_display_name

            return model_display_name(loaded.info.name, loaded.info.path)
        return PLACEHOLDER_MODEL  # GET /v1/models lists the ids

    def _host(self) -> str:
        return str(self.host_box.currentData())

    def _host_for_clients(self) -> str:
        return "127.0.0.1" if self._host() == "0.0.0.0" else self._host()

    def _key(self) -> str | None:
        return self.key.text().strip() or None

    def copy_base_url(self) -> None:
        if self.url:
            QGuiApplication.clipboard().setText(self.url)

    def copy_snippet(self) -> str:
        text = self.snippet_texts[self.snippets.currentIndex()].toPlainText()
        QGuiApplication.clipboard().setText(text)
        return text

    # --- the request log ------------------------------------------------------------------------------------
    def _record(self, record: RequestRecord) -> None:
        """A request arrived or changed (on the window's loop): one row each, newest on top."""
        row = self._rows.get(record.id)
        if row is None:
            self.table.insertRow(0)
            self._rows = {rid: r + 1 for rid, r in self._rows.items()}
            self._rows[record.id] = row = 0
            if self.table.rowCount() > MAX_ROWS:
                self.table.removeRow(self.table.rowCount() - 1)
                self._rows = {rid: r for rid, r in self._rows.items() if r < MAX_ROWS}
        for column, text in enumerate(_cells(record)):
            self.table.setItem(row, column, QTableWidgetItem(text))
        self.empty_log.setVisible(self.table.rowCount() == 0)

    # --- settings -------------------------------------------------------------------------------------------
    def _load_settings(self) -> None:
        settings = self.workstation.settings
        widgets = (self.host_box, self.port, self.key, self.ttl, self.autostart)
        for widget in widgets:
            widget.blockSignals(True)
        index = self.host_box.findData(settings.api_host)
        self.host_box.setCurrentIndex(max(index, 0))
        self.port.setValue(settings.api_port)
        if self.key.text().strip() != settings.api_key:  # the same key: the cursor stays where it is
            self.key.setText(settings.api_key)
        self.ttl.setValue(round(settings.api_idle_ttl_s / 60))
        self.autostart.setChecked(settings.api_autostart)
        for widget in widgets:
            widget.blockSignals(False)

    def _save_settings(self) -> None:
        self.workstation.update_settings(
            api_host=self._host(), api_port=self.port.value(), api_key=self.key.text().strip(),
            api_idle_ttl_s=float(self.ttl.value() * 60), api_autostart=self.autostart.isChecked(),
        )  # fmt: skip
        self._fill_snippets()


def _state_line(snapshot: ApiSnapshot) -> str:
    if snapshot.state is ApiState.SERVING:
        pending = " · restart it to apply the changed settings" if snapshot.restart_to_apply else ""
        return f"● Listening on {snapshot.url}{pending}"
    return {ApiState.STARTING: "Starting…", ApiState.STOPPING: "Stopping…"}.get(snapshot.state, "Not running.")


def _cells(record: RequestRecord) -> list[str]:
    def ms(value: float | None) -> str:
        return MISSING if value is None else f"{value:,.0f} ms"

    tokens = f"{record.prompt_tokens or 0:,} / {record.completion_tokens or 0:,}"
    status = str(record.status) if record.status is not None else str(record.state)
    if record.error:
        status += f": {record.error}"
    rate = MISSING if record.tokens_per_s is None else f"{record.tokens_per_s:.1f}"
    when = time.strftime("%H:%M:%S", time.localtime(record.started_at))
    engine = record.engine or MISSING
    return [when, record.client, record.endpoint, record.model or MISSING, engine, tokens, ms(record.wait_ms),
            ms(record.ttft_ms), rate, status]  # fmt: skip


def _card() -> QFrame:
    card = QFrame()
    set_role(card, "card")
    return card


def _row(*widgets: QWidget, stretch_at: int | None = None) -> QHBoxLayout:
    row = QHBoxLayout()
    row.setSpacing(SPACE_S)
    for index, widget in enumerate(widgets):
        row.addWidget(widget, 1 if index == stretch_at else 0)
    return row
