"""The Bench page: the throughput table of one engine on this machine, charts, and saved runs to compare.

The run is ``app.services.bench.run.run_bench`` as an asyncio task (its blocking parts run in executors), the
same as ``llm-workstation bench run``. llama.cpp runs in a bench worker of its own (the chat's model stays
loaded), or, with "llama.cpp parallel sequences" ticked, N sequences in one context of a child process; vLLM
is the server the vLLM page announced (:meth:`BenchPanel.set_vllm_server`) or a typed address; Ollama is the
settings' host unless one is typed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QGuiApplication, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.bench.stats import COLUMNS, BenchRow, cell, csv_text, markdown_table
from app.core.bench.workload import BenchWorkload, parse_concurrencies
from app.services.bench.store import BenchStore, BenchStoreError, rows_of
from app.services.engines.events import VllmEndpoint
from app.services.workstation import Workstation
from app.ui.engine_events import follow_vllm_endpoint
from app.ui.pages.bench.chart import BenchChart
from app.ui.pages.bench.saved import BenchSavedRuns
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.factories import slot_button, widget_row, wrapped_label
from app.ui.widgets.palette import error_color, set_text_color

if TYPE_CHECKING:  # the run's modules (httpx among them) load with the first run, not with the window
    from app.services.bench.engines import BenchTarget
    from app.services.bench.run import BenchProgress

ENGINES = (("llama.cpp (GGUF file)", "llamacpp"), ("vLLM server", "vllm"), ("Ollama", "ollama"))
_MODEL_HINTS = {
    "llamacpp": "path to a .gguf file",
    "vllm": "served model name (default: the first the server lists)",
    "ollama": "Ollama model name, e.g. llama3.2",
}
_ENDPOINT_HINTS = {"llamacpp": "", "vllm": "http://127.0.0.1:8000", "ollama": "Ollama host (default: Settings)"}


class BenchPanel(QWidget):
    def __init__(self, context: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.store = BenchStore(context.paths.data_dir / "bench")
        self.rows: list[BenchRow] = []
        self.result: dict[str, Any] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._dialog: QFileDialog | None = None
        self._vllm: tuple[str, str, str] | None = None  # (base URL, served model, API key) from the vLLM page
        self._listed = False  # the saved runs are read when the page is first shown
        self._active = False  # a bench is running (Run off, Cancel on)
        self._build()
        self._unfollow = follow_vllm_endpoint(context.host, self._vllm_changed)
        self._engine_changed()
        self._running(False)

    # --- layout -------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.engine = QComboBox()
        for label, kind in ENGINES:
            self.engine.addItem(label, kind)
        self.engine.currentIndexChanged.connect(lambda _i: self._engine_changed())
        self.model_edit, self.endpoint_edit, self.key_edit = QLineEdit(), QLineEdit(), QLineEdit()
        self.key_edit.setPlaceholderText("API key (if the server needs one)")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.browse_button = slot_button("Browse…", self.browse_model)
        self.vllm_note = wrapped_label(name="bench_vllm_note", hidden=True)
        self.concurrency_edit = QLineEdit("1,8,16,32,64")
        self.requests = _spin(1, 100_000, BenchWorkload().requests)
        self.max_tokens = _spin(1, 100_000, BenchWorkload().max_tokens)
        self.warmup = _spin(0, 1000, BenchWorkload().warmup)
        self.parallel_check = QCheckBox("llama.cpp parallel sequences")
        self.parallel_check.setToolTip("Concurrency N runs N sequences in one llama.cpp context (plain-text "
                                       "prompts, no chat template); off: one stream, the clients queue")  # fmt: skip
        self.save_check = QCheckBox("Save the run")
        self.save_check.setChecked(True)
        self.run_button = slot_button("Run", self.start_run)
        self.cancel_button = slot_button("Cancel", self.cancel_run)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.status = wrapped_label(name="bench_status", hidden=True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("bench_results")
        self.table.setHorizontalHeaderLabels([title for _key, title in COLUMNS])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.copy_markdown_button = slot_button("Copy as Markdown", self.copy_markdown)
        self.copy_csv_button = slot_button("Copy as CSV", self.copy_csv)
        self.throughput_chart, self.latency_chart = BenchChart("throughput"), BenchChart("latency")
        self.saved_runs = BenchSavedRuns(self.store)
        self.saved_runs.run_loaded.connect(self._saved_run_loaded)
        self.saved_runs.failed.connect(lambda text: self._say(text, error=True))
        self._lay_out()

    def _lay_out(self) -> None:
        target = QGroupBox("Engine and model")
        grid = QGridLayout(target)
        grid.addWidget(self.engine, 0, 0)
        grid.addWidget(self.model_edit, 0, 1)
        grid.addWidget(self.browse_button, 0, 2)
        grid.addWidget(self.endpoint_edit, 1, 1)
        grid.addWidget(self.key_edit, 1, 2)
        grid.addWidget(self.parallel_check, 1, 1)
        grid.addWidget(self.vllm_note, 2, 0, 1, 3)
        workload = QGroupBox("Workload (fixed and seeded: see `llm-workstation bench run --help`)")
        row = QHBoxLayout(workload)
        for text, widget in (("Concurrency", self.concurrency_edit), ("Requests", self.requests),
                             ("Max tokens", self.max_tokens), ("Warm-up", self.warmup)):  # fmt: skip
            row.addWidget(QLabel(text))
            row.addWidget(widget)
        row.addWidget(self.save_check)
        row.addStretch(1)
        results = QWidget()
        box = QVBoxLayout(results)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(widget_row(self.run_button, self.cancel_button, self.progress, stretch_at=2))
        box.addWidget(self.status)
        box.addWidget(self.table, 2)
        box.addLayout(widget_row(self.copy_markdown_button, self.copy_csv_button, QWidget(), stretch_at=2))
        charts = QSplitter()
        charts.addWidget(self.throughput_chart)
        charts.addWidget(self.latency_chart)
        box.addWidget(charts, 3)
        split = QSplitter()
        split.addWidget(results)
        split.addWidget(self.saved_runs)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(target)
        layout.addWidget(workload)
        layout.addWidget(split, 1)

    # --- the target ---------------------------------------------------------------------------------------
    def kind(self) -> str:
        return str(self.engine.currentData())

    def select_engine(self, kind: str) -> None:
        self.engine.setCurrentIndex(self.engine.findData(kind))

    def _engine_changed(self) -> None:
        kind = self.kind()
        self.model_edit.setPlaceholderText(_MODEL_HINTS[kind])
        self.endpoint_edit.setPlaceholderText(_ENDPOINT_HINTS[kind])
        self.endpoint_edit.setVisible(kind != "llamacpp")
        self.key_edit.setVisible(kind == "vllm")
        self.browse_button.setVisible(kind == "llamacpp")
        self.parallel_check.setVisible(kind == "llamacpp")
        self.vllm_note.setVisible(kind == "vllm")
        if kind == "vllm" and self._vllm and not self.endpoint_edit.text():
            self.endpoint_edit.setText(self._vllm[0])
            self.key_edit.setText(self._vllm[2])
            self.model_edit.setText(self._vllm[1])
        if kind == "llamacpp" and not self.model_edit.text() and self.context.settings.recent_models:
            self.model_edit.setText(self.context.settings.recent_models[0])

    def set_vllm_server(self, base_url: str, served_model: str, api_key: str) -> None:
        """The vLLM page has a server ready (``""``: none any more); it becomes the vLLM choice."""
        self._vllm = (base_url, served_model, api_key) if base_url else None
        if base_url:
            self.vllm_note.setText(f"The vLLM page's server is ready: {served_model} at {base_url}.")
            if self.kind() == "vllm":
                self.endpoint_edit.setText(base_url)
                self.key_edit.setText(api_key)
                self.model_edit.setText(served_model)
        else:
            self.vllm_note.setText("Start a vLLM server on the vLLM page, or type the address of a running one.")

    def clear_vllm_server(self) -> None:
        self.set_vllm_server("", "", "")

    def _vllm_changed(self, endpoint: VllmEndpoint | None) -> None:
        if endpoint is None:
            self.clear_vllm_server()
        else:
            self.set_vllm_server(endpoint.base_url, endpoint.served_model, endpoint.api_key or "")

    def browse_model(self) -> None:
        self._dialog = QFileDialog(self, "Choose a GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(self._model_chosen)
        self._dialog.open()

    def _model_chosen(self, path: str) -> None:
        if path:
            self.model_edit.setText(path)

    def _target_and_workload(self) -> tuple[BenchTarget, BenchWorkload]:
        """Raises ValueError with what to fix."""
        from app.services.bench.engines import BenchTarget

        kind, model = self.kind(), self.model_edit.text().strip()
        if kind == "llamacpp" and not model:
            raise ValueError("Choose a .gguf file to bench.")
        if kind == "ollama" and not model:
            raise ValueError("Type the name of an Ollama model (the Models → Ollama page lists them).")
        endpoint = self.endpoint_edit.text().strip() or None
        if kind == "vllm" and not endpoint:
            raise ValueError("Type the vLLM server's address, or start a server on the vLLM page.")
        if kind == "ollama":
            endpoint = endpoint or self.context.settings.ollama_host or None
        workload = BenchWorkload(
            concurrencies=parse_concurrencies(self.concurrency_edit.text()),
            requests=self.requests.value(),
            max_tokens=self.max_tokens.value(),
            warmup=self.warmup.value(),
        )
        target = BenchTarget(kind, model, endpoint=endpoint, api_key=self.key_edit.text().strip() or None,
                             vllm_python=self.context.settings.vllm_python or None,
                             parallel=kind == "llamacpp" and self.parallel_check.isChecked())  # fmt: skip
        return target, workload

    # --- running ------------------------------------------------------------------------------------------
    def start_run(self) -> asyncio.Task[Any] | None:
        """Start the bench; None (and the reason shown) when a field needs fixing."""
        if self._task is not None and not self._task.done():
            return self._task
        try:
            target, workload = self._target_and_workload()
        except ValueError as exc:
            self._say(str(exc)[:1].upper() + str(exc)[1:], error=True)
            return None
        self._running(True)
        self._task = spawn(self._run(target, workload), "bench: run")
        return self._task

    def cancel_run(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            self._say("Cancelling…")

    async def _run(self, target: BenchTarget, workload: BenchWorkload) -> None:
        from app.services.bench.run import BenchRunError, run_bench

        self._say(f"Benchmarking {target.model or target.endpoint} on {target.backend}…")
        try:
            result = await run_bench(target, workload, progress=self._progressed)
        except asyncio.CancelledError:
            self._say("Cancelled: nothing was saved.")
            return
        except BenchRunError as exc:
            self._say(str(exc), error=True)
            return
        finally:
            self._running(False)
        self.show_result(result)
        skipped = [r for r in self.rows if r.skipped]
        if skipped and len(skipped) == len(self.rows):
            self._say(f"Skipped: {skipped[0].skipped}", error=True)
            return
        message = f"Done: {len(self.rows)} configurations."
        if self.save_check.isChecked():
            try:
                run_id = await asyncio.get_running_loop().run_in_executor(None, self.store.save, result)
            except BenchStoreError as exc:
                self._say(f"{message} It could not be saved: {exc}", error=True)
                return
            message += f" Saved as {run_id}."
            await self.saved_runs.refresh()
        self._say(message)

    def _progressed(self, step: BenchProgress) -> None:
        self.progress.setValue(round(step.fraction * 1000))
        self._say(step.text()[:1].upper() + step.text()[1:])

    def show_result(self, result: dict[str, Any]) -> None:
        """Fill the table and the charts from a run's result (a fresh one or a saved one)."""
        self.result = result
        self.rows = rows_of(result)
        self.table.setRowCount(len(self.rows))
        for index, row in enumerate(self.rows):
            for column, (key, _title) in enumerate(COLUMNS):
                self.table.setItem(index, column, QTableWidgetItem(cell(row, key)))
        self.throughput_chart.set_rows(self.rows)
        self.latency_chart.set_rows(self.rows)
        self._running(self._active)  # a saved run may be shown while a bench runs: Cancel stays

    def copy_markdown(self) -> str | None:
        return self._copy(markdown_table(self.rows)) if self.rows else None

    def copy_csv(self) -> str | None:
        return self._copy(csv_text(self.rows)) if self.rows else None

    def _copy(self, text: str) -> str:
        QGuiApplication.clipboard().setText(text)
        return text

    def start(self) -> None:
        """The saved runs are listed when the page is first shown (``showEvent``)."""

    def settings_changed(self) -> None:
        """Ollama's address is read from the settings when a bench starts."""

    async def shutdown(self) -> None:
        """Cancel a running bench and wait until its engine is closed."""
        self._unfollow()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=15)

    # --- saved runs ---------------------------------------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._listed and loop_running():
            self._listed = True
            spawn(self.saved_runs.refresh(), "bench: list saved runs")

    def _saved_run_loaded(self, run: dict[str, Any]) -> None:
        self.show_result(run)
        machine = run.get("machine", {})
        self._say(f"Saved run {run.get('id')}, measured on {machine.get('cpu_model') or 'an unknown CPU'}.")

    # --- helpers ------------------------------------------------------------------------------------------
    def _running(self, active: bool) -> None:
        self._active = active
        self.run_button.setEnabled(not active)
        self.cancel_button.setEnabled(active)
        for button in (self.copy_markdown_button, self.copy_csv_button):
            button.setEnabled(not active and bool(self.rows))
        if active:
            self.progress.setValue(0)

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))
        palette = self.palette()
        color = error_color(palette) if error else None
        set_text_color(self.status, color or palette.color(QPalette.ColorRole.WindowText))


def _spin(low: int, high: int, value: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(value)
    return spin
