"""The Monitor page's views of one snapshot: hardware cards (GPUs, or one line saying why there are none, plus RAM
and CPU), the engines and their KV cache, GPU processes and alerts.

Each ``display(snapshot)`` only sets widget contents; nothing here reads the system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.conversation import ReplyStats
from app.core.monitor.alerts import Alert
from app.core.monitor.snapshot import EngineReading, GpuReading, MonitorSnapshot
from app.core.units import MISSING, format_bytes
from app.ui.pages.monitor.engine_figures import engine_figure_lines
from app.ui.pages.monitor.kv_grid import KvGridWidget
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import SPACE_M, SPACE_S, set_role, tokens

ENGINE_NAMES = {
    "llamacpp": "llama.cpp",
    "llamacpp-embeddings": "llama.cpp (embeddings)",
    "llamacpp-parallel": "llama.cpp (parallel)",
    "vllm": "vLLM",
}
CPU_NOTE = "RAM and CPU are shown; llama.cpp runs on the CPU"
NO_ENGINE_TITLE = "No engine running"
NO_ENGINE_TEXT = (
    "Load a model in Chat or start vLLM: its memory, KV cache and tokens/s show here and in the charts below."
)


def _na(value: object, unit: str = "") -> str:
    return MISSING if value is None else f"{value}{unit}"


def _percent(used: int | None, total: int | None) -> int:
    return round(100 * used / total) if used is not None and total else 0


def no_gpu_line(reason: str) -> str:
    """One line for a machine without GPU readings: NVML's own words where the reason quotes them.

    ``No NVIDIA GPU: NVML library not found — RAM and CPU are shown; llama.cpp runs on the CPU``."""
    quoted = re.search(r"\(([^()]*NVML[^()]*)\)", reason)
    if "reports no GPUs" in reason:
        return f"No NVIDIA GPU: the NVIDIA driver reports none — {CPU_NOTE}"
    if "nvidia-ml-py" in reason:
        return f"No GPU readings: the nvidia-ml-py package is missing — {CPU_NOTE}"
    if quoted and ("not found" in quoted.group(1) or "Not Loaded" in quoted.group(1)):
        return f"No NVIDIA GPU: {quoted.group(1)} — {CPU_NOTE}"
    if quoted:
        return f"GPU readings unavailable: {quoted.group(1)} — RAM and CPU are shown"
    return f"GPU readings unavailable: {reason.rstrip('.')} — RAM and CPU are shown"


def shrinkable(label: QLabel) -> QLabel:
    """A label that never widens the window: it wraps, and its width follows the layout's."""
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


def card(*widgets: QWidget, name: str = "") -> QFrame:
    frame = QFrame()
    set_role(frame, "card")
    frame.setObjectName(name)
    box = QVBoxLayout(frame)
    box.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_M)
    box.setSpacing(SPACE_S)
    for widget in widgets:
        box.addWidget(widget)
    return frame


def caption(text: str = "") -> QLabel:
    label = QLabel(text)
    set_role(label, "muted")
    return label


def section(text: str) -> QLabel:
    label = QLabel(text)
    set_role(label, "section")
    return label


def bar() -> QProgressBar:
    meter = QProgressBar()
    meter.setRange(0, 100)
    meter.setMinimumWidth(60)
    meter.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
    return meter


class GpuCard(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "card")
        self.setObjectName("monitor_gpu_card")
        self.title_label = QLabel()
        bold = self.title_label.font()
        bold.setBold(True)
        self.title_label.setFont(bold)
        self.memory_bar = bar()
        self.details = shrinkable(caption())
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box = QVBoxLayout(self)
        box.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_M)
        for widget in (self.title_label, self.memory_bar, self.details):
            box.addWidget(widget)

    def title(self) -> str:
        return self.title_label.text()

    def show_gpu(self, gpu: GpuReading) -> None:
        self.title_label.setText(f"GPU {gpu.index} · {gpu.name}")
        self.memory_bar.setValue(_percent(gpu.memory_used_bytes, gpu.memory_total_bytes))
        self.memory_bar.setFormat(
            f"VRAM {format_bytes(gpu.memory_used_bytes)} / {format_bytes(gpu.memory_total_bytes)} (%p%)"
        )
        power = MISSING if gpu.power_mw is None else f"{gpu.power_mw / 1000:.0f} W"
        limit = MISSING if gpu.power_limit_mw is None else f"{gpu.power_limit_mw / 1000:.0f} W"
        self.details.setText(
            f"Utilisation {_na(gpu.utilization_percent, '%')} · {_na(gpu.temperature_c, ' °C')} · "
            f"power {power} / {limit} · SM {_na(gpu.clock_sm_mhz, ' MHz')} · "
            f"memory {_na(gpu.clock_memory_mhz, ' MHz')}"
        )


class SystemView(QWidget):
    """GPU cards — or one line saying why there are none — then RAM and CPU cards side by side."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.no_gpu_icon = QLabel()
        self.no_gpu_icon.setPixmap(icon("info").pixmap(icon_size(18)))
        self.no_gpu_label = shrinkable(QLabel())
        self.no_gpu_label.setObjectName("monitor_no_gpu")
        self.no_gpu_row = QWidget()
        row = QHBoxLayout(self.no_gpu_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.no_gpu_icon, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.no_gpu_label, 1)
        self.no_gpu_row.hide()
        self.cards: list[GpuCard] = []
        self.cards_grid = QGridLayout()
        self.cards_grid.setSpacing(SPACE_S)
        self.ram_bar, self.cpu_bar = bar(), bar()
        self.ram_bar.setFormat(MISSING)
        self.cpu_label = caption("Processor")
        cores = os.cpu_count() or 0
        self._cpu_format = f"CPU %p% of {cores} cores" if cores else "CPU %p% of all cores"
        self.cpu_bar.setFormat(f"CPU {MISSING}")
        self.cpu_bar.setValue(0)
        machine = QHBoxLayout()
        machine.setSpacing(SPACE_S)
        machine.addWidget(card(caption("Memory"), self.ram_bar, name="monitor_ram_card"), 1)
        machine.addWidget(card(self.cpu_label, self.cpu_bar, name="monitor_cpu_card"), 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(SPACE_S)
        layout.addWidget(self.no_gpu_row)
        layout.addLayout(self.cards_grid)
        layout.addLayout(machine)

    @property
    def has_gpu(self) -> bool:
        return bool(self.cards)

    def display(self, snapshot: MonitorSnapshot) -> None:
        reason = snapshot.gpu_unavailable_reason
        self.no_gpu_row.setVisible(bool(reason) and not snapshot.gpus)
        if reason:
            self.no_gpu_label.setText(no_gpu_line(reason))
            self.no_gpu_label.setToolTip(reason)
        self._show_gpus(snapshot.gpus)
        ram = snapshot.ram
        self.ram_bar.setValue(_percent(ram.used_bytes, ram.total_bytes))
        self.ram_bar.setFormat(f"RAM {format_bytes(ram.used_bytes)} / {format_bytes(ram.total_bytes)} (%p%)")
        cpu = snapshot.cpu_percent
        self.cpu_bar.setValue(0 if cpu is None else round(cpu))
        self.cpu_bar.setFormat(self._cpu_format if cpu is not None else f"CPU {MISSING}")

    def _show_gpus(self, gpus: tuple[GpuReading, ...]) -> None:
        while len(self.cards) < len(gpus):
            gpu_card = GpuCard()
            index = len(self.cards)
            self.cards.append(gpu_card)
            self.cards_grid.addWidget(gpu_card, index // 2, index % 2)
        while len(self.cards) > len(gpus):
            self.cards.pop().deleteLater()
        for gpu_card, gpu in zip(self.cards, gpus, strict=True):
            gpu_card.show_gpu(gpu)


class EmptyEngines(QFrame):
    """What the engines card says before any engine runs: what will show, and a way to start one."""

    def __init__(self, open_chat: Callable[[], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "card")
        self.setObjectName("monitor_no_engine")
        self.title_label = QLabel(NO_ENGINE_TITLE)
        set_role(self.title_label, "empty-title")
        self.text_label = shrinkable(caption(NO_ENGINE_TEXT))
        self.open_chat_button = QPushButton(icon("chat"), "Open Chat")
        self.open_chat_button.clicked.connect(lambda _checked=False: open_chat())
        box = QVBoxLayout(self)
        box.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
        box.addWidget(self.title_label)
        box.addWidget(self.text_label)
        box.addWidget(self.open_chat_button, 0, Qt.AlignmentFlag.AlignLeft)


class EnginesView(QWidget):
    """Each engine's memory; llama.cpp's cells per sequence; vLLM's KV block grid and queue."""

    def __init__(self, open_chat: Callable[[], None] = lambda: None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.empty = EmptyEngines(open_chat)
        self.summary = shrinkable(QLabel(f"{NO_ENGINE_TITLE}."))
        self.summary.setObjectName("monitor_engines")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.llama_bar = bar()
        self.kv_grid = KvGridWidget()
        self.kv_grid.setMaximumHeight(110)
        self.kv_caption = shrinkable(caption())
        self.figures = shrinkable(caption())  # speculation, host KV tier, cached prompt tokens by source
        self.figures.setObjectName("monitor_engine_figures")
        self.llama_reply: ReplyStats | None = None  # the last llama.cpp reply's figures (the engine host's event)
        self.running = card(
            self.summary, self.llama_bar, self.kv_grid, self.kv_caption, self.figures, name="monitor_engines_card"
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.empty)
        layout.addWidget(self.running)
        for widget in (self.running, self.llama_bar, self.kv_grid, self.kv_caption, self.figures):
            widget.hide()

    def display(self, snapshot: MonitorSnapshot) -> None:
        engines = snapshot.engines
        self.empty.setVisible(not engines)
        self.running.setVisible(bool(engines))
        gpu = bool(snapshot.gpus)
        self.summary.setText("<br>".join(_engine_line(e, gpu) for e in engines) if engines else f"{NO_ENGINE_TITLE}.")
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
            hit = MISSING if kv.prefix_cache_hit_rate is None else f"{kv.prefix_cache_hit_rate:.1%}"
            self.kv_caption.setText(
                f"vLLM KV pool: {self.kv_grid.caption()}; block size {_na(kv.block_size_tokens, ' tokens')}; "
                f"running {_na(kv.requests_running)}, waiting {_na(kv.requests_waiting)}; "
                f"preemptions {_na(kv.preemptions_total)}; prefix-cache hit rate {hit}"
            )
        vllm_kv = next((e.kv for e in engines if e.kind == "vllm" and e.kv), None)
        llama_loaded = any(e.kind == "llamacpp" for e in engines)
        lines = engine_figure_lines(vllm_kv, self.llama_reply if llama_loaded else None)
        self.figures.setText("\n".join(lines))
        self.figures.setVisible(bool(lines))


def _engine_line(engine: EngineReading, gpu: bool) -> str:
    name = ENGINE_NAMES.get(engine.kind, engine.kind)
    state = "" if engine.loaded else " (no model loaded)"
    pids = ", ".join(str(p) for p in engine.pids[:4]) + ("…" if len(engine.pids) > 4 else "")
    line = f"<b>{engine.label}</b>{state} — {name} pid {pids or MISSING}: RAM {format_bytes(engine.rss_bytes)}"
    if gpu or engine.gpu_bytes is not None:
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
        self.setObjectName("monitor_gpu_processes")
        self.setHorizontalHeaderLabels(list(self.HEADERS))
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)
        self.verticalHeader().hide()
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.setMinimumHeight(90)
        self.setMaximumHeight(180)

    def display(self, snapshot: MonitorSnapshot) -> None:
        rows = snapshot.processes
        self.setRowCount(len(rows))
        for r, row in enumerate(rows):
            owner = ENGINE_NAMES.get(row.engine, row.engine) + " (ours)" if row.engine else "other"
            cells = (str(row.pid), row.name or MISSING, str(row.gpu_index), format_bytes(row.used_bytes), owner)
            for c, text in enumerate(cells):
                self.setItem(r, c, QTableWidgetItem(text))


class AlertList(QListWidget):
    """The alerts in force, each with a warning or error icon; hidden (a muted line instead) when there are none."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("monitor_alerts")
        self.setIconSize(icon_size(16))
        self.messages: list[str] = []

    def display(self, alerts: tuple[Alert, ...]) -> None:
        messages = [a.message for a in alerts]
        self.setVisible(bool(alerts))
        if messages == self.messages:
            return
        self.messages = messages
        self.clear()
        for alert in alerts:
            theme = tokens(self.palette())
            name, color = ("error", theme.error) if alert.level == "critical" else ("warning", theme.warning)
            self.addItem(QListWidgetItem(icon(name, color), alert.message))
        self.setFixedHeight(min(96, 8 + 22 * max(1, len(alerts))))


def chart_grid(charts: list[QWidget]) -> QGridLayout:
    grid = QGridLayout()
    grid.setSpacing(SPACE_S)
    grid.setContentsMargins(0, 0, 0, 0)
    for i, chart in enumerate(charts):
        grid.addWidget(chart, i // 2, i % 2)
    return grid
