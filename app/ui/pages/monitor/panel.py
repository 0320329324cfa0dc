"""The Monitor page: live GPU/RAM/CPU, the engines' memory and KV cache, charts, alerts and exports.

A ``MonitorSampler`` thread takes snapshots (default 2 Hz); each crosses to the Qt thread through a queued
signal, feeds the charts' bounded history, and the views are redrawn from the latest snapshot only.
The sampler is built in an executor (its imports and NVML start-up stay off the Qt thread) and stopped in
``shutdown``. Exports and the Prometheus endpoint also run in executors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
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
from app.services.workstation import Workstation
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
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.timeseries_chart import ChartWidget

if TYPE_CHECKING:
    from app.services.monitor.engine_processes import EngineTarget
    from app.services.monitor.prometheus import PrometheusExporter
    from app.services.monitor.sampler import MonitorSampler

log = logging.getLogger("app.ui")

TargetsProvider = Callable[[], Sequence["EngineTarget"]]
SamplerFactory = Callable[[Callable[[], Sequence["EngineTarget"]]], "MonitorSampler"]
DEFAULT_PROMETHEUS_PORT = 9464
MIN_INTERVAL_S = 0.1


AUTOSTART_DELAY_MS = 3000  # after the window shows: sampling (alerts in the status bar) begins then


def default_sampler(targets: Callable[[], Sequence[EngineTarget]]) -> MonitorSampler:
    """A real sampler (real NVML); runs in an executor, so its imports stay off the Qt thread."""
    from app.services.monitor.sampler import MonitorSampler

    return MonitorSampler(targets=targets)


# What an empty chart waits for (the engines' figures only move while they work)
TOKENS_WAITING = "Shows while an engine generates: send a message in Chat, or run a batch or a bench."
REQUESTS_WAITING = "Shows vLLM's running and waiting requests once a vLLM server runs."


class MonitorPanel(QWidget):
    snapshot_arrived = Signal(object, object)  # MonitorSnapshot, tuple[Alert, ...]; emitted on the sampler thread
    alerts_changed = Signal(list)  # the alert messages now in force (empty: none)
    settings_changed_requested = Signal(dict)  # {"prometheus_enabled": …, "prometheus_port": …}

    def __init__(
        self,
        context: Workstation,
        parent: QWidget | None = None,
        *,
        targets: TargetsProvider | None = None,
        sampler_factory: SamplerFactory | None = None,
        autostart: bool = True,
    ) -> None:
        super().__init__(parent)
        self.context = context
        self._targets_provider = targets or self._context_targets
        self._factory = sampler_factory or default_sampler
        self._targets: tuple[EngineTarget, ...] = ()  # read by the sampler thread; replaced, never mutated
        self.sampler: MonitorSampler | None = None
        self.exporter: PrometheusExporter | None = None
        self.history = MonitorHistory(capacity=1200)
        self.latest: MonitorSnapshot | None = None
        self.alerts: tuple[Alert, ...] = ()
        self._closed = False
        self._redraw_pending = False
        self._start_task: asyncio.Task[Any] | None = None
        self._build()
        self.snapshot_arrived.connect(self._on_snapshot)
        if autostart:  # not at once: start-up stays free of NVML; showing the page starts it earlier
            QTimer.singleShot(AUTOSTART_DELAY_MS, self._autostart)
        self._autostart_enabled = autostart

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
        self.prometheus_port.setValue(self.context.settings.prometheus_port or DEFAULT_PROMETHEUS_PORT)
        self.prometheus_check.toggled.connect(self._prometheus_toggled)
        self.export_label = shrinkable(caption())
        self.export_label.setObjectName("monitor_export_status")
        for widget in (self.png_button, self.csv_button, self.prometheus_check, self.prometheus_port):
            row.addWidget(widget)
        row.addWidget(self.export_label, 1)
        return row

    def open_chat(self) -> None:
        """The empty state's action: show the Chat page (through the window, which knows the pages)."""
        open_path = getattr(self.window(), "open_path", None)
        if callable(open_path):
            open_path("chat")

    # --- sampling --------------------------------------------------------------------------------------------
    def _autostart(self) -> None:
        if not self._closed and self.sampler is None and loop_running():
            self.start()

    def start(self) -> asyncio.Task[Any]:
        """Build the sampler off the Qt thread and start its thread; idempotent."""
        if self._start_task is None:
            self._start_task = spawn(self._start(), "monitor: start")
        return self._start_task

    async def _start(self) -> None:
        self._refresh_targets()
        loop = asyncio.get_running_loop()
        sampler = await loop.run_in_executor(None, self._factory, lambda: self._targets)
        if self._closed:
            await loop.run_in_executor(None, sampler.close)
            return
        sampler.interval_s = min(max(float(self.context.settings.monitor_interval_s), MIN_INTERVAL_S), 60.0)
        self.sampler = sampler
        self.destroyed.connect(lambda *_: sampler.request_stop())  # a window dropped without shutdown()
        sampler.start(self._deliver)
        self.status_label.setText(f"Sampling every {sampler.interval_s:g} s.")
        if self.context.settings.prometheus_enabled and not self.prometheus_check.isChecked():
            self.prometheus_check.setChecked(True)  # starts the endpoint the user turned on last time

    def _deliver(self, snapshot: MonitorSnapshot, alerts: tuple[Alert, ...]) -> None:
        """On the sampler thread: hand over to the Qt thread (a queued signal); never touch widgets here."""
        if self._closed:
            return
        try:
            self.snapshot_arrived.emit(snapshot, alerts)
        except RuntimeError:  # the widget is gone: stop sampling for it
            self._closed = True
            if self.sampler is not None:
                self.sampler.request_stop()

    def _on_snapshot(self, snapshot: MonitorSnapshot, alerts: tuple[Alert, ...]) -> None:
        if self._closed:
            return
        self.history.add(snapshot)
        self.latest = snapshot
        if [a.message for a in alerts] != [a.message for a in self.alerts]:
            self.alerts_changed.emit([a.message for a in alerts])
        self.alerts = alerts
        if self.exporter is not None:
            self.exporter.update(snapshot, alerts)
        self._refresh_targets()
        if not self._redraw_pending and self.isVisible():
            self._redraw_pending = True
            QTimer.singleShot(0, self.redraw)

    def redraw(self) -> None:
        """Draw the latest snapshot (several arriving at once are drawn once)."""
        self._redraw_pending = False
        snapshot = self.latest
        if snapshot is None or self._closed:
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

    def _refresh_targets(self) -> None:
        try:
            self._targets = tuple(self._targets_provider())
        except Exception as exc:  # a panel's state must not stop the monitor
            log.warning("monitor: could not list the engines: %s", exc)

    def _context_targets(self) -> list[EngineTarget]:
        from app.services.monitor.engine_processes import host_targets  # psutil: loaded with the monitor

        return host_targets(self.context.host)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._autostart_enabled:
            QTimer.singleShot(0, self._autostart)
        QTimer.singleShot(0, self.redraw)

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

    # --- Prometheus --------------------------------------------------------------------------------------------
    def _prometheus_toggled(self, on: bool) -> None:
        spawn(self.set_prometheus(on), "monitor: prometheus")
        changes = {"prometheus_enabled": on, "prometheus_port": self.prometheus_port.value()}
        if changes != {k: getattr(self.context.settings, k) for k in changes}:
            self.settings_changed_requested.emit(changes)

    async def set_prometheus(self, on: bool) -> None:
        """Start or stop the opt-in endpoint; a port in use is reported and the box unticked."""
        from app.services.monitor.prometheus import PrometheusExporter, PrometheusExportError

        loop = asyncio.get_running_loop()
        if not on:
            exporter, self.exporter = self.exporter, None
            if exporter is not None:
                await loop.run_in_executor(None, exporter.stop)
            self.export_label.setText("Prometheus endpoint stopped.")
            self.prometheus_port.setEnabled(True)
            return
        if self.exporter is not None:
            return
        exporter = PrometheusExporter(self.prometheus_port.value())
        try:
            await loop.run_in_executor(None, exporter.start)
        except PrometheusExportError as exc:
            self.export_label.setText(str(exc))
            self.prometheus_check.blockSignals(True)
            self.prometheus_check.setChecked(False)
            self.prometheus_check.blockSignals(False)
            return
        if self.latest is not None:
            exporter.update(self.latest, self.alerts)
        self.exporter = exporter
        self.prometheus_port.setEnabled(False)
        self.export_label.setText(f"Serving metrics at {exporter.url}")

    # --- shutdown ----------------------------------------------------------------------------------------------
    def settings_changed(self) -> None:
        """The monitor's own settings change from its page (the Prometheus toggle and port)."""

    async def shutdown(self) -> None:
        """Stop the sampler thread and the endpoint; later snapshots are dropped."""
        self._closed = True
        loop = asyncio.get_running_loop()
        if self._start_task is not None and not self._start_task.done():
            await asyncio.wait({self._start_task}, timeout=10)
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            await loop.run_in_executor(None, sampler.close)
        exporter, self.exporter = self.exporter, None
        if exporter is not None:
            await loop.run_in_executor(None, exporter.stop)
