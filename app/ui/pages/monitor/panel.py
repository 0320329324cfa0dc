"""The Monitor page: live GPU/RAM/CPU, the engines' memory and KV cache, llama.cpp's parallel slots, charts, alerts
and exports.

A view of the workstation's monitor service, which samples from the window's start-up whether or not this page
is open: on its first show the page takes the service's samples so far and follows its events; the views are
redrawn from the latest sample only, while the page is visible. Exports run in executors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.alerts import Alert
from app.core.monitor.snapshot import MonitorSnapshot
from app.core.monitor.timeseries import MonitorHistory
from app.core.units import format_bytes
from app.services.engines.entries import EngineKind
from app.services.engines.events import EngineEvent, ParallelSlotsChanged, ParallelSnapshot, ReplyFigures
from app.services.monitor.events import (
    AlertsChanged,
    ExporterChanged,
    ExporterState,
    MonitorEvent,
    SampleTaken,
    SamplingChanged,
)
from app.services.monitor.service import HISTORY_CAPACITY, MonitorService
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.monitor.parallel_slots import ParallelSlotsView
from app.ui.pages.monitor.views import (
    AlertList,
    EnginesView,
    ProcessTable,
    SystemView,
    caption,
    chart_grid,
    section,
    shrinkable,
)
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_L, SPACE_M, SPACE_S
from app.ui.tasks import spawn
from app.ui.widgets.timeseries_chart import ChartWidget

log = logging.getLogger("app.ui")

# What an empty chart waits for (the engines' figures only move while they work)
TOKENS_WAITING = "Shows while an engine generates: send a message in Chat, or run a batch or a bench."
REQUESTS_WAITING = "Shows vLLM's running and waiting requests once a vLLM server runs."


class MonitorPanel(Page):
    open_page_requested = Signal(str)  # "chat": the empty engines card's action

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.monitor: MonitorService = workstation.monitor
        self.history = MonitorHistory(capacity=HISTORY_CAPACITY)
        self.latest: MonitorSnapshot | None = None
        self.alerts: tuple[Alert, ...] = ()
        self.exporter_state = ExporterState()
        self.parallel = ParallelSnapshot()  # the parallel llama.cpp engine's slots (the engine host's events)
        self._following = False
        self._redraw_pending = False
        self._build()

    # --- layout ----------------------------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(SPACE_L, SPACE_M, SPACE_L, SPACE_M)
        layout.setSpacing(SPACE_S)
        self.status_label = shrinkable(caption("Starting the monitor…"))
        self.status_label.setObjectName("monitor_status")
        self.system_view = SystemView()
        self.engines_view = EnginesView(self.open_chat)
        self.slots_view = ParallelSlotsView()
        self.process_table = ProcessTable()
        self.processes_title = section("GPU processes")
        self.alert_list = AlertList()
        self.alerts_title = section("Alerts")
        self.alert_list.display(())
        self.alerts_title.hide()
        self.charts = self._make_charts()
        self.charts_box = QWidget()
        self.charts_box.setLayout(chart_grid(list(self.charts.values())))
        self.charts_box.setMinimumHeight(2 * 150)
        layout.addWidget(self.alerts_title)
        layout.addWidget(self.alert_list)
        header = QHBoxLayout()
        header.addWidget(section("Hardware"))
        header.addWidget(self.status_label, 1, Qt.AlignmentFlag.AlignBottom)
        self.status_label.setAlignment(Qt.AlignmentFlag.AlignRight)
        layout.addLayout(header)
        for widget in (self.system_view, section("Engines")):
            layout.addWidget(widget)
        layout.addWidget(self.engines_view)
        layout.addWidget(self.slots_view)
        layout.addWidget(section("Charts"))
        layout.addWidget(self.charts_box, 1)
        layout.addWidget(self.processes_title)
        layout.addWidget(self.process_table)
        layout.addLayout(self._export_row())
        self.processes_title.hide()
        self.process_table.hide()
        scroll.setWidget(body)
        outer.addWidget(scroll)

    def _make_charts(self) -> dict[str, ChartWidget]:
        waiting = "Shows once an engine runs: load a model in Chat or start vLLM."
        charts = {
            "memory": ChartWidget("Memory", format_bytes, axis="bytes"),
            "kv": ChartWidget("KV cache", lambda v: f"{v:.0%}", axis="fraction", empty_text=waiting),
            "tokens": ChartWidget("Tokens/s", lambda v: f"{v:,.0f}", axis="number", empty_text=TOKENS_WAITING),
            "requests": ChartWidget("Requests", lambda v: f"{v:.0f}", axis="count", empty_text=REQUESTS_WAITING),
        }
        charts["kv"].y_max = 1.0
        for name, chart in charts.items():
            chart.setObjectName(f"monitor_chart_{name}")
        return charts

    def _export_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.png_button = QPushButton(icon("download"), "Charts as PNG…")
        self.png_button.clicked.connect(lambda: self._ask_path("Save charts", "PNG images (*.png)", self.export_png))
        self.csv_button = QPushButton(icon("download"), "Data as CSV…")
        self.csv_button.clicked.connect(lambda: self._ask_path("Save data", "CSV files (*.csv)", self.export_csv))
        self.prometheus_check = QCheckBox("Prometheus on port")
        self.prometheus_check.setToolTip("Serve the app's metrics at http://127.0.0.1:PORT/metrics for Prometheus.")
        self.prometheus_port = QSpinBox()
        self.prometheus_port.setRange(1024, 65535)
        self.prometheus_port.setValue(self.workstation.settings.prometheus_port)
        self.prometheus_check.toggled.connect(self._prometheus_toggled)
        self.export_label = shrinkable(caption())
        self.export_label.setObjectName("monitor_export_status")
        for widget in (self.png_button, self.csv_button, self.prometheus_check, self.prometheus_port):
            row.addWidget(widget)
        row.addWidget(self.export_label, 1)
        return row

    def open_chat(self) -> None:
        """The empty state's action: show the Chat page."""
        self.open_page_requested.emit("chat")

    # --- following the monitor service ---------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """Take what the monitor gathered so far, follow its events, and start it if the window has not yet."""
        if not self._following:
            self._following = True
            state = self.monitor.snapshot()
            for sample in state.samples:
                self.history.add(sample)
            self.latest, self.alerts = state.latest, state.alerts
            self._show_sampling(state.interval_s)
            self._show_exporter(state.exporter)
            self.follow(self.monitor.subscribe(self._monitor_event))
            self.follow(self.workstation.host.subscribe(self._engine_event))
            self.parallel = self.workstation.host.parallel.snapshot()
            self.slots_view.display(self.parallel)
            self._schedule_redraw()
        return spawn(self.monitor.start(), "monitor: start")

    def shown_again(self) -> None:
        self.slots_view.display(self.parallel)
        self._schedule_redraw()

    def _monitor_event(self, event: MonitorEvent) -> None:
        if isinstance(event, SampleTaken):
            self.history.add(event.sample)
            self.latest = event.sample
            self._schedule_redraw()
        elif isinstance(event, AlertsChanged):
            self.alerts = event.alerts
        elif isinstance(event, SamplingChanged):
            self._show_sampling(event.interval_s)
        elif isinstance(event, ExporterChanged):
            self._show_exporter(event.state)

    def _engine_event(self, event: EngineEvent) -> None:
        """A llama.cpp reply's speculative figures show until the next reply (vLLM's come from /metrics); the
        parallel engine's slots show as they change (drawn at once: a few labels, about twice a second)."""
        if isinstance(event, ReplyFigures) and event.engine is EngineKind.LLAMACPP and event.stats is not None:
            self.engines_view.llama_reply = event.stats
            self._schedule_redraw()
        elif isinstance(event, ParallelSlotsChanged):
            self.parallel = event.snapshot
            if self.isVisible():
                self.slots_view.display(event.snapshot)

    def _show_sampling(self, interval_s: float | None) -> None:
        if interval_s is not None:
            self.status_label.setText(f"Sampling every {interval_s:g} s.")

    def _schedule_redraw(self) -> None:
        if not self._redraw_pending and self.isVisible():
            self._redraw_pending = True
            QTimer.singleShot(0, self, self.redraw)

    def redraw(self) -> None:
        """Draw the latest snapshot (several arriving at once are drawn once)."""
        self._redraw_pending = False
        snapshot = self.latest
        if snapshot is None:
            return
        self.system_view.display(snapshot)
        self.engines_view.display(snapshot)
        gpus = bool(snapshot.gpus)
        self.processes_title.setVisible(gpus)
        self.process_table.setVisible(gpus)
        self.process_table.display(snapshot)
        self.alert_list.display(self.alerts)
        self.alerts_title.setVisible(bool(self.alerts))
        self._draw_charts(snapshot.taken_at_s, gpus)

    def _draw_charts(self, now_s: float, gpus: bool) -> None:
        series = self.history.series
        memory = [("VRAM", series["gpu_used_bytes"].points())] if gpus else []  # no GPU: no empty VRAM line
        memory += [("RAM", series["ram_used_bytes"].points()), ("engines", series["engine_rss_bytes"].points())]
        self.charts["memory"].set_series(memory, now_s)
        self.charts["kv"].set_series([("KV", series["kv_usage_fraction"].points())], now_s)
        self.charts["tokens"].set_series([("tok/s", series["generation_tokens_per_s"].points())], now_s)
        requests = [("running", series["requests_running"].points()), ("waiting", series["requests_waiting"].points())]
        self.charts["requests"].set_series(requests, now_s)

    # --- exports ---------------------------------------------------------------------------------------------
    def _ask_path(self, title: str, filters: str, action: Callable[[Path], Any]) -> None:
        dialog = QFileDialog(self, title, str(Path.home()), filters)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # one per click: freed when it closes
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.fileSelected.connect(lambda path: action(Path(path)))
        dialog.open()

    def export_png(self, path: Path) -> asyncio.Task[Any]:
        """Save the charts as a PNG (grabbed here, written in an executor)."""
        image = self.charts_box.grab().toImage()
        path = path if path.suffix.lower() == ".png" else path.with_name(path.name + ".png")
        return spawn(self._write(path, lambda: image.save(str(path)), "charts"), "monitor: png")

    def export_csv(self, path: Path) -> asyncio.Task[Any]:
        """Save every sample in the chart window as CSV (written in an executor)."""
        text = self.history.to_csv()
        return spawn(self._write(path, lambda: path.write_text(text, encoding="utf-8") > 0, "data"), "monitor: csv")

    async def _write(self, path: Path, write: Callable[[], bool], what: str) -> None:
        try:
            ok = await asyncio.get_running_loop().run_in_executor(None, write)
        except OSError as exc:
            ok, reason = False, exc.strerror or str(exc)
        else:
            reason = "the file could not be written"
        if ok:
            self.export_label.setText(f"Saved the {what} to {path}.")
        else:
            self.export_label.setText(f"Could not save the {what} to {path}: {reason}. Choose another folder.")

    # --- Prometheus ---------------------------------------------------------------------------------------------
    def _prometheus_toggled(self, on: bool) -> None:
        """The box is the ``prometheus_enabled`` setting; the monitor follows it. Ticked again after a failure
        (a port in use), the same choice is tried again."""
        changes = {"prometheus_enabled": on, "prometheus_port": self.prometheus_port.value()}
        if self.workstation.update_settings(**changes) is None:
            spawn(self.monitor.apply_exporter(), "monitor: prometheus")

    def _show_exporter(self, state: ExporterState) -> None:
        was = self.exporter_state
        self.exporter_state = state
        self.prometheus_check.blockSignals(True)
        wanted = self.workstation.settings.prometheus_enabled and not state.problem
        self.prometheus_check.setChecked(state.running or wanted)
        self.prometheus_check.blockSignals(False)
        self.prometheus_port.setEnabled(not state.running)
        if state.running:
            self.export_label.setText(f"Serving metrics at {state.url}")
        elif state.problem:
            self.export_label.setText(state.problem)
        elif was.running:
            self.export_label.setText("Prometheus endpoint stopped.")

    def settings_changed(self, event: SettingsChanged) -> None:
        if event.touches("prometheus_port") and not self.exporter_state.running:
            self.prometheus_port.setValue(self.workstation.settings.prometheus_port)
