"""The memory estimator on the Models page: live controls, breakdown bars and the fits verdict.

Recomputing is pure arithmetic on a header already read (``estimate_memory`` / ``fit_verdict``), so it runs
on every control change; the machine's memory is read once per refresh, off the Qt thread.
"""

from __future__ import annotations

import asyncio
import html
import logging

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.gguf.header import GgufFileError, GgufHeader
from app.core.memory.estimate import EstimateSettings, MemoryEstimate, estimate_memory
from app.core.memory.fit import FitVerdict, MachineMemory, fit_verdict
from app.core.params import KV_CACHE_TYPES
from app.core.units import format_bytes
from app.services.monitor.machine_memory import read_machine_memory
from app.ui.pages.models.memory_bars import BarRow, MemoryBars
from app.ui.pages.models.widgets import shrinking_label, verdict_details
from app.ui.widgets.palette import error_color, set_text_color

log = logging.getLogger("app.ui.models")
MAX_CONTEXT = 1 << 20


class ModelEstimator(QWidget):
    """``verdict_changed`` carries the new ``FitVerdict`` (or None) after every recompute."""

    verdict_changed = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("model_estimator")
        self.header: GgufHeader | None = None
        self.projector_bytes = 0  # the vision projector loaded with the model
        self.draft: GgufHeader | None = None  # the draft model it speculates with (its memory joins the estimate)
        self.machine: MachineMemory | None = None
        self.estimate: MemoryEstimate | None = None
        self.verdict: FitVerdict | None = None
        self._build()
        self.set_header(None)

    def _build(self) -> None:
        self.context_size = QSpinBox()
        self.context_size.setRange(16, MAX_CONTEXT)
        self.context_size.setSingleStep(1024)
        self.context_size.setValue(4096)
        self.context_size.setSuffix(" tokens")
        self.context_size.setGroupSeparatorShown(True)  # 4,096 as everywhere else
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(0, 0)
        self.type_k = QComboBox()
        self.type_v = QComboBox()
        for combo in (self.type_k, self.type_v):
            combo.addItems(list(KV_CACHE_TYPES))
        self.flash_attn = QCheckBox("Flash attention")
        kv = QHBoxLayout()
        kv.addWidget(QLabel("K"))
        kv.addWidget(self.type_k)
        kv.addWidget(QLabel("V"))
        kv.addWidget(self.type_v)
        kv.addStretch(1)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow("Context", self.context_size)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("KV cache", kv)
        form.addRow("", self.flash_attn)
        self.bars = MemoryBars()
        self.verdict_label = shrinking_label(name="fit_verdict")
        self.suggestions_label = shrinking_label(name="fit_suggestions")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addWidget(self.bars)
        layout.addWidget(self.verdict_label)
        layout.addWidget(self.suggestions_label)
        for spin in (self.context_size, self.gpu_layers):
            spin.valueChanged.connect(self.recompute)
        for combo in (self.type_k, self.type_v):
            combo.currentIndexChanged.connect(self.recompute)
        self.flash_attn.toggled.connect(self.recompute)

    def settings(self) -> EstimateSettings:
        return EstimateSettings(
            n_ctx=self.context_size.value(),
            n_gpu_layers=self.gpu_layers.value(),
            type_k=self.type_k.currentText(),
            type_v=self.type_v.currentText(),
            flash_attn=self.flash_attn.isChecked(),
            cpu_amx=self.machine is not None and self.machine.cpu_amx,
            projector_bytes=self.projector_bytes,
            draft=self.draft,
        )

    def set_draft(self, draft: GgufHeader | None) -> None:
        """The header (already read) of the draft model the chosen model speculates with; None: no draft."""
        if draft is not self.draft:
            self.draft = draft
            self.recompute()

    def set_header(self, header: GgufHeader | None, projector_bytes: int = 0) -> None:
        """A GGUF's header (already read) to estimate for, with its vision projector's size when it has one;
        None for HF folders and broken files."""
        self.header = header
        self.projector_bytes = projector_bytes
        self.setEnabled(header is not None)
        if header is None:
            self.estimate = self.verdict = None
            self.bars.set_rows([])
            self.verdict_label.setText("The estimate covers GGUF models (llama.cpp).")
            self.suggestions_label.setText("")
            self.verdict_changed.emit(None)
            return
        with QSignalBlocker(self.gpu_layers), QSignalBlocker(self.context_size):
            self.gpu_layers.setRange(0, self._gpu_layer_max())
            has_gpu = self.machine is not None and bool(self.machine.gpu_free_bytes)
            self.gpu_layers.setValue(self.gpu_layers.maximum() if has_gpu else 0)
            trained = header.context_length or 4096
            self.context_size.setValue(min(trained, 4096))
        self.recompute()

    async def refresh_machine(self) -> None:
        """Read this machine's GPU and RAM (NVML, /proc) off the Qt thread, then recompute."""
        machine = await asyncio.get_running_loop().run_in_executor(None, read_machine_memory)
        first = self.machine is None
        self.machine = machine
        has_gpu = bool(machine.gpu_free_bytes)
        reason = machine.gpu_unavailable_reason or "No GPU found."
        self.gpu_layers.setToolTip(", ".join(machine.gpu_names) if has_gpu else f"{reason} Everything runs from RAM.")
        self.gpu_layers.setSpecialValueText("" if has_gpu else "none (no GPU here)")
        self.gpu_layers.setEnabled(has_gpu)  # llama.cpp without a GPU keeps every layer on the host
        with QSignalBlocker(self.gpu_layers):
            self.gpu_layers.setRange(0, self._gpu_layer_max())
            if first and has_gpu and self.gpu_layers.value() == 0:
                self.gpu_layers.setValue(self.gpu_layers.maximum())
        self.recompute()

    def _gpu_layer_max(self) -> int:
        """The repeating blocks plus the output layer; 0 without a header or on a machine without a GPU."""
        if self.header is None or (self.machine is not None and not self.machine.gpu_free_bytes):
            return 0
        return (self.header.block_count or 0) + 1

    def recompute(self, *_args: object) -> None:
        if self.header is None:
            return
        settings = self.settings()
        try:
            self.estimate = estimate_memory(self.header, settings)
        except GgufFileError as exc:  # an architecture or layout the estimator does not know
            self.estimate = self.verdict = None
            self.bars.set_rows([])
            self.verdict_label.setText(html.escape(str(exc)))
            self.suggestions_label.setText("")
            self.verdict_changed.emit(None)
            return
        self.bars.set_rows(self._rows(self.estimate))
        if self.machine is None:
            self.verdict = None
            needed = format_bytes(self.estimate.total_bytes)
            self.verdict_label.setText(f"Needs about {needed}. Reading this machine's memory…")
            self.suggestions_label.setText("")
            self.verdict_changed.emit(None)
            return
        self.verdict = fit_verdict(self.header, settings, self.machine)
        self._show_verdict(self.verdict)
        self.verdict_changed.emit(self.verdict)

    def _rows(self, e: MemoryEstimate) -> list[BarRow]:
        rows = []
        machine = self.machine
        if e.gpu_bytes or (machine is not None and machine.gpu_free_bytes):
            free = sum(machine.gpu_free_bytes) if machine is not None and machine.gpu_free_bytes else None
            weights_gpu = e.weights_gpu_bytes + e.projector_gpu_bytes  # the vision projector counts as weights
            other_gpu = e.gpu_bytes - weights_gpu - e.kv_gpu_bytes  # compute buffers
            rows.append(BarRow("GPU", (weights_gpu, e.kv_gpu_bytes, max(other_gpu, 0)), free))
        ram = machine.ram_available_bytes if machine is not None else None
        weights_host = e.weights_host_bytes + e.projector_bytes - e.projector_gpu_bytes
        other_host = e.host_bytes - weights_host - e.kv_host_bytes  # compute and output buffers
        rows.append(BarRow("RAM", (weights_host, e.kv_host_bytes, max(other_host, 0)), ram))
        return rows

    def _show_verdict(self, verdict: FitVerdict) -> None:
        projector = (
            f" Includes the vision projector ({format_bytes(self.projector_bytes)})." if self.projector_bytes else ""
        )
        # The verdict itself is the pane's one fit line (short_verdict); here only what that line leaves out.
        has_gpu = self.machine is not None and bool(self.machine.gpu_free_bytes)
        gpu_bytes = self.estimate.gpu_bytes if self.estimate is not None else 0
        draft_bytes = self.estimate.draft_bytes if self.estimate is not None else 0
        draft = f"Includes the draft model ({format_bytes(draft_bytes)})." if draft_bytes else ""
        parts = (verdict_details(verdict, gpu_bytes, has_gpu), projector.strip(), draft)
        details = " ".join(part for part in parts if part)
        self.verdict_label.setText(html.escape(details))
        palette = self.palette()
        set_text_color(
            self.verdict_label, error_color(palette) if verdict.state == "wont_fit" else palette.windowText().color()
        )
        self.suggestions_label.setText("\n".join(f"• {s}" for s in verdict.suggestions))
