"""The Monitor page's views of one snapshot: GPU cards, system, engines and KV cache, processes, alerts.

Each ``show(snapshot)`` only sets widget contents; nothing here reads the system.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QGridLayout,
    QGroupBox,
    QHeaderView,
    QLabel,
    QListWidget,
    QProgressBar,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.alerts import Alert
from app.core.monitor.snapshot import EngineReading, GpuReading, MonitorSnapshot, format_bytes
from app.ui.pages.monitor.kv_grid import KvGridWidget

ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM"}


def _na(value: object, unit: str = "") -> str:
    return "N/A" if value is None else f"{value}{unit}"


def _percent(used: int | None, total: int | None) -> int:
    return round(100 * used / total) if used is not None and total else 0


class GpuCard(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.memory_bar = QProgressBar()
        self.memory_bar.setRange(0, 100)
        self.details = QLabel()
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.memory_bar)
        layout.addWidget(self.details)

    def show_gpu(self, gpu: GpuReading) -> None:
        self.setTitle(f"GPU {gpu.index}: {gpu.name}")
        self.memory_bar.setValue(_percent(gpu.memory_used_bytes, gpu.memory_total_bytes))
        self.memory_bar.setFormat(
            f"VRAM {format_bytes(gpu.memory_used_bytes)} / {format_bytes(gpu.memory_total_bytes)} (%p%)"
        )
        power = "N/A" if gpu.power_mw is None else f"{gpu.power_mw / 1000:.0f} W"
        limit = "N/A" if gpu.power_limit_mw is None else f"{gpu.power_limit_mw / 1000:.0f} W"
        self.details.setText(
            f"Utilisation {_na(gpu.utilization_percent, '%')} · {_na(gpu.temperature_c, ' °C')} · "
            f"power {power} / {limit} · SM {_na(gpu.clock_sm_mhz, ' MHz')} · "
            f"memory {_na(gpu.clock_memory_mhz, ' MHz')}"
        )


class SystemView(QGroupBox):
    """GPU cards, or the reason there are none, plus RAM and CPU."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Hardware", parent)
        self._layout = QVBoxLayout(self)
        self.no_gpu_label = QLabel()
        self.no_gpu_label.setWordWrap(True)
        self.no_gpu_label.setObjectName("monitor_no_gpu")
        self.cards: list[GpuCard] = []
        self.cards_box = QVBoxLayout()
        self.ram_bar = QProgressBar()
        self.ram_bar.setRange(0, 100)
        self.cpu_label = QLabel("CPU: –")
        self._layout.addWidget(self.no_gpu_label)
        self._layout.addLayout(self.cards_box)
        self._layout.addWidget(self.ram_bar)
        self._layout.addWidget(self.cpu_label)

    def display(self, snapshot: MonitorSnapshot) -> None:
        reason = snapshot.gpu_unavailable_reason
        self.no_gpu_label.setVisible(bool(reason))
        self.no_gpu_label.setText(f"No GPU readings: {reason}" if reason else "")
        while len(self.cards) < len(snapshot.gpus):
            card = GpuCard()
            self.cards.append(card)
            self.cards_box.addWidget(card)
        while len(self.cards) > len(snapshot.gpus):
            self.cards.pop().deleteLater()
        for card, gpu in zip(self.cards, snapshot.gpus, strict=True):
            card.show_gpu(gpu)
        ram = snapshot.ram
        self.ram_bar.setValue(_percent(ram.used_bytes, ram.total_bytes))
        self.ram_bar.setFormat(f"RAM {format_bytes(ram.used_bytes)} / {format_bytes(ram.total_bytes)} (%p%)")
        cpu = snapshot.cpu_percent
        self.cpu_label.setText("CPU: N/A" if cpu is None else f"CPU: {cpu:.0f}% of all cores")


class EnginesView(QGroupBox):
    """Each engine's memory; llama.cpp's cells per sequence; vLLM's KV block grid and queue."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Engines and KV cache", parent)
        layout = QVBoxLayout(self)
        self.summary = QLabel("No engine running. Load a model on the Chat page or start vLLM.")
        self.summary.setWordWrap(True)
        self.summary.setObjectName("monitor_engines")
        self.llama_bar = QProgressBar()
        self.llama_bar.setRange(0, 100)
        self.kv_grid = KvGridWidget()
        self.kv_caption = QLabel()
        self.kv_caption.setWordWrap(True)
        for widget in (self.summary, self.llama_bar, self.kv_grid, self.kv_caption):
            layout.addWidget(widget)
        self.llama_bar.hide()
        self.kv_grid.hide()
        self.kv_caption.hide()

    def display(self, snapshot: MonitorSnapshot) -> None:
        engines = snapshot.engines
        if engines:
            self.summary.setText("<br>".join(_engine_line(e) for e in engines))
        else:
            self.summary.setText("No engine running. Load a model on the Chat page or start vLLM.")
        llama = next((e for e in engines if e.kind == "llamacpp" and e.kv and e.kv.total_cells), None)
        self.llama_bar.setVisible(llama is not None)
        if llama is not None and llama.kv is not None:
            kv = llama.kv
            self.llama_bar.setValue(_percent(kv.used_cells, kv.total_cells))
            per_seq = ", ".join(f"seq {s}: {n:,}" for s, n in kv.cells_per_sequence)
            self.llama_bar.setFormat(f"llama.cpp context {per_seq} / {kv.total_cells:,} cells (n_ctx) (%p%)")
        vllm = next((e for e in engines if e.kind == "vllm" and e.kv and e.kv.num_blocks), None)
        self.kv_grid.setVisible(vllm is not None)
        self.kv_caption.setVisible(vllm is not None)
        if vllm is not None and vllm.kv is not None and vllm.kv.num_blocks:
            kv = vllm.kv
            self.kv_grid.set_pool(vllm.kv.num_blocks, kv.used_blocks or 0)
            hit = "N/A" if kv.prefix_cache_hit_rate is None else f"{kv.prefix_cache_hit_rate:.1%}"
            self.kv_caption.setText(
                f"vLLM KV pool: {self.kv_grid.caption()}; block size {_na(kv.block_size_tokens, ' tokens')}; "
                f"running {_na(kv.requests_running)}, waiting {_na(kv.requests_waiting)}; "
                f"preemptions {_na(kv.preemptions_total)}; prefix-cache hit rate {hit}"
            )


def _engine_line(engine: EngineReading) -> str:
    name = ENGINE_NAMES.get(engine.kind, engine.kind)
    state = "" if engine.loaded else " (no model loaded)"
    pids = ", ".join(str(p) for p in engine.pids[:4]) + ("…" if len(engine.pids) > 4 else "")
    line = f"<b>{engine.label}</b>{state} — {name} pid {pids or 'N/A'}: RAM {format_bytes(engine.rss_bytes)}"
    line += f", VRAM {format_bytes(engine.gpu_bytes)}"
    if engine.kv and engine.kv.usage_fraction is not None:
        line += f", KV {engine.kv.usage_fraction:.1%}"
        if engine.kv.generation_tokens_per_s is not None:
            line += f", {engine.kv.generation_tokens_per_s:.0f} tok/s"
    if engine.problem:
        line += f" — {engine.problem}"
    return line


class ProcessTable(QTableWidget):
    HEADERS = ("PID", "Name", "GPU", "GPU memory", "Owner")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(list(self.HEADERS))
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)
        self.verticalHeader().hide()
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)

    def display(self, snapshot: MonitorSnapshot) -> None:
        rows = snapshot.processes
        self.setRowCount(len(rows))
        for r, row in enumerate(rows):
            owner = ENGINE_NAMES.get(row.engine, row.engine) + " (ours)" if row.engine else "other"
            cells = (str(row.pid), row.name or "N/A", str(row.gpu_index), format_bytes(row.used_bytes), owner)
            for c, text in enumerate(cells):
                self.setItem(r, c, QTableWidgetItem(text))


class AlertList(QListWidget):
    def display(self, alerts: tuple[Alert, ...]) -> None:
        texts = [f"{'⛔' if a.level == 'critical' else '⚠'} {a.message}" for a in alerts] or ["No alerts."]
        if texts != [self.item(i).text() for i in range(self.count())]:
            self.clear()
            self.addItems(texts)


def chart_grid(charts: list[QWidget]) -> QGridLayout:
    grid = QGridLayout()
    for i, chart in enumerate(charts):
        grid.addWidget(chart, i // 2, i % 2)
    return grid
