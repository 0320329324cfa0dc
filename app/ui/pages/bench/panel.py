"""The Bench page: the throughput table of one engine on this machine, charts, and saved runs to compare.

The run is ``app.services.bench.run.run_bench`` as a workstation job (``workstation.jobs``, kind ``bench``: it
goes on while the page is hidden), the same as ``llm-workstation bench run``. llama.cpp runs in a bench worker
of its own (the chat's model stays loaded), or, with "llama.cpp parallel sequences" ticked, N sequences in one
context of a child process; vLLM is the server the vLLM page announced (:meth:`BenchPanel.set_vllm_server`) or a
typed address; Ollama is the settings' host unless one is typed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.bench.stats import BenchRow, csv_text, markdown_table
from app.core.bench.workload import BenchWorkload, parse_concurrencies
from app.services.bench.job import BENCH, BenchOutcome, start_bench
from app.services.bench.store import BenchStore, rows_of
from app.services.engines.events import EngineEvent, ModelLoaded, ModelUnloaded, VllmEndpoint
from app.services.jobs.events import Job
from app.services.workstation import Workstation
from app.ui.engine_events import follow_vllm_endpoint
from app.ui.job_follow import JobFollower
from app.ui.page import Page
from app.ui.pages.bench.defaults import default_concurrency, is_a_default, loaded_model
from app.ui.pages.bench.empty_state import FIRST_RUN, BenchEmptyState, next_step
from app.ui.pages.bench.results import BenchResults
from app.ui.pages.bench.saved import BenchSavedRuns
from app.ui.pages.bench.sizing import (
    PROPOSALS,
    SMALL,
    WorkloadSize,
    default_size,
    estimate_text,
    estimated_seconds,
    guessed_tokens_per_s,
)
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_L, SPACE_M, SPACE_S, set_role, tokens
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.factories import slot_button, widget_row, wrapped_label
from app.ui.widgets.palette import error_color, set_text_color

if TYPE_CHECKING:  # the run's modules (httpx among them) load with the first run, not with the window
    from app.services.bench.engines import BenchTarget
    from app.services.bench.run import BenchProgress

ENGINES = (("llama.cpp", "llamacpp"), ("vLLM server", "vllm"), ("Ollama", "ollama"))
_MODEL_HINTS = {
    "llamacpp": "path to a .gguf file",
    "vllm": "served model name (default: the first the server lists)",
    "ollama": "Ollama model name, e.g. llama3.2",
}
_ENDPOINT_HINTS = {"llamacpp": "", "vllm": "http://127.0.0.1:8000", "ollama": "Ollama host (default: Settings)"}


class BenchPanel(Page):
    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.store = BenchStore(workstation.paths.data_dir / "bench")
        self.rows: list[BenchRow] = []
        self.result: dict[str, Any] | None = None
        self._task: asyncio.Task[Any] | None = None  # waiting for the bench job shown
        self._job_id: str | None = None
        self._listed = False  # the saved runs are read when the page is first shown
        self._dialog: QFileDialog | None = None
        self._vllm: tuple[str, str, str] | None = None  # (base URL, served model, API key) from the vLLM page
        self._active = False  # a bench is running (Run off, Cancel on)
        self._fields: dict[str, tuple[str, str, str]] = {}  # per engine: model, address, key as last typed
        self._filled: dict[str, str] = {}  # per engine: the model the page filled in itself
        self._has_gpu: bool | None = None  # read off the Qt thread when the page is first shown
        self._model_bytes: dict[str, int | None] = {}  # a GGUF's size by path (None: being read, or unreadable)
        self._build()
        self._kind = self.kind()
        self.follow(follow_vllm_endpoint(workstation.host, self._vllm_changed))
        self.follow(workstation.host.subscribe(self._engine_event))
        follower = JobFollower(BENCH, lambda: self._job_id, self._show_job, self._step, self._finished)
        self.follow(workstation.jobs.subscribe(follower))
        self._engine_changed()
        self._running(False)

    # --- layout -------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.engine = QComboBox()
        for label, kind in ENGINES:
            self.engine.addItem(label, kind)
        self.engine.currentIndexChanged.connect(lambda _i: self._engine_changed())
        self.model_edit, self.endpoint_edit, self.key_edit = QLineEdit(), QLineEdit(), QLineEdit()
        self.model_edit.setMinimumWidth(120)
        self.key_edit.setPlaceholderText("API key (if the server needs one)")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setMinimumWidth(160)
        self.browse_button = slot_button("Browse…", self.browse_model)
        self.browse_button.setIcon(icon("folder"))
        self.vllm_note = _shrinkable(wrapped_label(name="bench_vllm_note", hidden=True))
        set_role(self.vllm_note, "muted")
        self.concurrency_edit = QLineEdit(default_concurrency("llamacpp"))
        self.concurrency_edit.setToolTip("Comma-separated: each level runs that many requests at once")
        self.requests = _spin(1, 100_000, SMALL.requests)  # the machine is read when the page shows: see _propose_size
        self.max_tokens = _spin(1, 100_000, SMALL.max_tokens)
        self.warmup = _spin(0, 1000, BenchWorkload().warmup)
        self.estimate_label = _shrinkable(wrapped_label(name="bench_estimate"))
        set_role(self.estimate_label, "muted")
        self.parallel_check = QCheckBox("Parallel sequences")
        self.parallel_check.setToolTip("Concurrency N runs N sequences in one llama.cpp context (plain-text "
                                       "prompts, no chat template); off: one stream, the clients queue")  # fmt: skip
        self.parallel_check.toggled.connect(lambda _on: self._propose_concurrency())
        self.save_check = QCheckBox("Save the run")
        self.save_check.setChecked(True)
        self.run_button = slot_button("Run", self.start_run)
        set_role(self.run_button, "accent")
        self.run_button.setIcon(icon("play", tokens(self.palette()).on_accent))
        self.cancel_button = slot_button("Cancel", self.cancel_run)
        self.cancel_button.setIcon(icon("stop"))
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setMinimumWidth(60)
        self.status = _shrinkable(wrapped_label(name="bench_status", hidden=True))
        self.results = BenchResults(self.copy_markdown, self.copy_csv)
        self.table = self.results.table
        self.copy_markdown_button, self.copy_csv_button = (
            self.results.copy_markdown_button,
            self.results.copy_csv_button,
        )
        self.throughput_chart, self.latency_chart = self.results.throughput_chart, self.results.latency_chart
        self.empty_state = BenchEmptyState()
        self.saved_runs = BenchSavedRuns(self.store)
        self.saved_runs.hide()  # shown once the store lists a run
        self.saved_runs.run_loaded.connect(self._saved_run_loaded)
        self.saved_runs.failed.connect(lambda text: self._say(text, error=True))
        self.saved_runs.listed.connect(lambda count: self.saved_runs.setVisible(count > 0))
        for edit in (self.model_edit, self.concurrency_edit):
            edit.textChanged.connect(lambda _text: self._refresh_empty_state())
        for spin in (self.requests, self.max_tokens):
            spin.valueChanged.connect(lambda _value: self._refresh_empty_state())
        for spin in (self.requests, self.max_tokens, self.warmup):
            spin.valueChanged.connect(lambda _value: self._refresh_estimate())
        for edit in (self.model_edit, self.concurrency_edit):
            edit.textChanged.connect(lambda _text: self._refresh_estimate())
        self._lay_out()

    def _lay_out(self) -> None:
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        grid.addWidget(self.engine, 0, 0)
        grid.addWidget(self.model_edit, 0, 1)
        grid.addWidget(self.browse_button, 0, 2)
        grid.addWidget(self.endpoint_edit, 1, 1)
        grid.addWidget(self.key_edit, 1, 2)
        grid.addWidget(self.parallel_check, 1, 1)
        grid.addWidget(self.vllm_note, 2, 0, 1, 3)
        workload = QHBoxLayout()
        for text, widget in (("Concurrency", self.concurrency_edit), ("Requests", self.requests),
                             ("Max tokens", self.max_tokens), ("Warm-up", self.warmup)):  # fmt: skip
            label = QLabel(text)
            label.setToolTip("A fixed, seeded workload: see llm-workstation bench run --help")
            workload.addWidget(label)
            widget.setMaximumWidth(260 if widget is self.concurrency_edit else 120)
            workload.addWidget(widget, 2 if widget is self.concurrency_edit else 1)
        workload.addStretch(0)
        controls = QFrame()
        set_role(controls, "card")
        box = QVBoxLayout(controls)
        box.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
        box.addLayout(grid)
        box.addLayout(workload)
        box.addWidget(self.estimate_label)
        run_row = widget_row(self.run_button, self.cancel_button, self.save_check, self.progress, stretch_at=3)
        run_row.addStretch(0)  # takes the width while the progress bar is hidden
        self.body = QStackedWidget()
        self.body.addWidget(self.empty_state)
        self.body.addWidget(self.results)
        split = QSplitter()
        split.setObjectName("bench_split")
        split.addWidget(self.body)
        split.addWidget(self.saved_runs)
        split.setStretchFactor(0, 5)
        split.setStretchFactor(1, 2)
        split.setSizes([700, 250])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_L, SPACE_M, SPACE_L, SPACE_M)
        layout.setSpacing(SPACE_S)
        layout.addWidget(controls)
        layout.addLayout(run_row)
        layout.addWidget(self.status)
        layout.addWidget(split, 1)

    # --- the target ---------------------------------------------------------------------------------------
    def kind(self) -> str:
        return str(self.engine.currentData())

    def select_engine(self, kind: str) -> None:
        self.engine.setCurrentIndex(self.engine.findData(kind))

    def _engine_changed(self) -> None:
        """Another engine: its own fields back, its defaults proposed, its loaded model filled in."""
        previous, kind = self._kind, self.kind()
        if previous != kind:
            self._fields[previous] = (self.model_edit.text(), self.endpoint_edit.text(), self.key_edit.text())
            model, endpoint, key = self._fields.get(kind, ("", "", ""))
            self.model_edit.setText(model)
            self.endpoint_edit.setText(endpoint)
            self.key_edit.setText(key)
            self._kind = kind
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
        self._propose_concurrency()
        self._propose_size()
        self._prefill()

    def _propose_size(self) -> None:
        """The engine's and machine's workload size, unless the user chose one of their own."""
        if WorkloadSize(self.requests.value(), self.max_tokens.value()) in PROPOSALS:
            size = default_size(self.kind(), bool(self._has_gpu))
            self.requests.setValue(size.requests)
            self.max_tokens.setValue(size.max_tokens)
        self._refresh_estimate()

    async def _read_machine(self) -> None:
        from app.services.monitor.machine_memory import read_machine_memory

        machine = await asyncio.get_running_loop().run_in_executor(None, read_machine_memory)
        self._has_gpu = bool(machine.gpu_free_bytes)
        self._propose_size()

    def _refresh_estimate(self) -> None:
        """How long Run will take, shown before it is pressed (the workload in words when it cannot be told)."""
        if not hasattr(self, "estimate_label"):
            return
        try:
            workload = self._workload()
        except ValueError as exc:
            self.estimate_label.setText(str(exc)[:1].upper() + str(exc)[1:] + ".")
            return
        measured = self._measured_tokens_per_s()
        rate = measured or self._guessed_tokens_per_s()
        seconds = estimated_seconds(workload, self.kind(), rate, measured is not None) if rate else None
        self.estimate_label.setText(estimate_text(workload, seconds, measured is not None))

    def _measured_tokens_per_s(self) -> float | None:
        """One stream's output speed in the result shown, when it is of this engine and model."""
        target = (self.result or {}).get("target") or {}
        if target.get("backend") != self.kind() or target.get("model") != self.model_edit.text().strip():
            return None
        rows = sorted((r for r in self.rows if not r.skipped and r.output_tokens_per_s), key=lambda r: r.concurrency)
        return rows[0].output_tokens_per_s / rows[0].concurrency if rows else None

    def _guessed_tokens_per_s(self) -> float | None:
        """From the GGUF's size (read off the Qt thread, once per path); None until known, and for servers."""
        path = self.model_edit.text().strip()
        if self.kind() != "llamacpp" or not path or self._has_gpu is None:
            return None
        if path not in self._model_bytes and loop_running():
            self._model_bytes[path] = None
            spawn(self._read_size(path), "bench: model size")
        size = self._model_bytes.get(path)
        return guessed_tokens_per_s(size, self._has_gpu) if size else None

    async def _read_size(self, path: str) -> None:
        import os

        try:
            size = await asyncio.get_running_loop().run_in_executor(None, os.path.getsize, path)
        except OSError:
            return
        self._model_bytes[path] = size
        self._refresh_estimate()

    def _propose_concurrency(self) -> None:
        """The engine's default levels, unless the user typed levels of their own."""
        if is_a_default(self.concurrency_edit.text()):
            parallel = self.parallel_check.isChecked()
            self.concurrency_edit.setText(default_concurrency(self.kind(), parallel))

    def _prefill(self) -> None:
        """The engine's loaded model (llama.cpp: else the last one used) into an empty or page-filled field."""
        kind = self.kind()
        model = loaded_model(self.workstation.host, kind)
        if model is None and kind == "llamacpp" and self.workstation.settings.recent_models:
            model = self.workstation.settings.recent_models[0]
        current = self.model_edit.text().strip()
        if model and (not current or current == self._filled.get(kind)):
            self._filled[kind] = model
            self.model_edit.setText(model)
        self._refresh_empty_state()

    def _engine_event(self, event: EngineEvent) -> None:
        if isinstance(event, ModelLoaded | ModelUnloaded):
            self._prefill()

    def set_vllm_server(self, base_url: str, served_model: str, api_key: str) -> None:
        """The vLLM page has a server ready (``""``: none any more); it becomes the vLLM choice."""
        self._vllm = (base_url, served_model, api_key) if base_url else None
        if not base_url:
            self.vllm_note.setText("Start a vLLM server on the vLLM page, or type the address of a running one.")
            return
        self.vllm_note.setText(f"The vLLM page's server is ready: {served_model} at {base_url}.")
        self._filled["vllm"] = served_model
        if self.kind() == "vllm":
            self.endpoint_edit.setText(base_url)
            self.key_edit.setText(api_key)
            self.model_edit.setText(served_model)
        else:
            self._fields["vllm"] = (served_model, base_url, api_key)

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
            endpoint = endpoint or self.workstation.settings.ollama_host or None
        workload = self._workload()
        target = BenchTarget(kind, model, endpoint=endpoint, api_key=self.key_edit.text().strip() or None,
                             vllm_python=self.workstation.settings.vllm_python or None,
                             parallel=kind == "llamacpp" and self.parallel_check.isChecked())  # fmt: skip
        return target, workload

    def _workload(self) -> BenchWorkload:
        """Raises ValueError when the concurrency levels do not parse."""
        return BenchWorkload(
            concurrencies=parse_concurrencies(self.concurrency_edit.text()),
            requests=self.requests.value(),
            max_tokens=self.max_tokens.value(),
            warmup=self.warmup.value(),
        )

    # --- running ------------------------------------------------------------------------------------------
    def start_run(self) -> asyncio.Task[Any] | None:
        """Start the bench; None (and the reason shown) when a field needs fixing."""
        if self._task is not None and not self._task.done():
            return self._task
        running = self.workstation.jobs.running(BENCH)
        if running is None:
            try:
                target, workload = self._target_and_workload()
            except ValueError as exc:
                self._say(str(exc)[:1].upper() + str(exc)[1:], error=True)
                return None
            store = self.store if self.save_check.isChecked() else None
            running = start_bench(self.workstation.jobs, target, workload, store)
        self._task = spawn(self.workstation.jobs.wait(running.id), "bench: run")
        return self._task

    def _refresh_empty_state(self) -> None:
        """Before any result: the next step for the chosen engine, or what the running bench will show."""
        if self.rows:
            return
        if self._active:
            self.empty_state.show_state("Measuring…", "The table and the charts appear here when the run ends.")
            return
        kind, model = self.kind(), self.model_edit.text().strip()
        workload = (self.concurrency_edit.text().strip(), self.requests.value(), self.max_tokens.value())
        text = next_step(kind, model, *workload)
        if model:
            self.empty_state.show_state(FIRST_RUN, text, (FIRST_RUN, "play", self.start_run))
        elif kind == "llamacpp":
            self.empty_state.show_state(FIRST_RUN, text, ("Choose a GGUF file…", "folder", self.browse_model), False)
        else:
            self.empty_state.show_state(FIRST_RUN, text)

    def cancel_run(self) -> None:
        if self._job_id is not None and self.workstation.jobs.cancel(self._job_id):
            self._say("Cancelling…")

    # --- the job's news -----------------------------------------------------------------------------------
    def _show_job(self, job: Job) -> None:
        """Follow this bench job: running (its progress so far) or finished (its outcome)."""
        self._job_id = job.id
        if not job.running:
            self._finished(job)
            return
        self._running(True)
        self._say(f"{job.title}…")
        self._progressed(job)

    def _progressed(self, job: Job) -> None:
        if job.progress is not None:
            self._step(cast("BenchProgress", job.progress))

    def _step(self, step: BenchProgress) -> None:
        self.progress.setValue(round(step.fraction * 1000))
        self._say(step.text()[:1].upper() + step.text()[1:])

    def _finished(self, job: Job) -> None:
        self._progressed(job)
        self._running(False)
        if job.cancelled:
            self._say("Cancelled: nothing was saved.")
            return
        if not isinstance(job.result, BenchOutcome):
            self._say(str(job.error), error=True)
            return
        outcome = job.result
        self.show_result(outcome.result)
        if outcome.all_skipped:
            self._say(f"Skipped: {self.rows[0].skipped}", error=True)
            return
        message = f"Done: {len(self.rows)} configurations."
        if outcome.save_error:
            self._say(f"{message} It could not be saved: {outcome.save_error}", error=True)
            return
        if outcome.run_id:
            message += f" Saved as {outcome.run_id}."
            spawn(self.saved_runs.refresh(), "bench: list saved runs")
        self._say(message)

    def show_result(self, result: dict[str, Any]) -> None:
        """Fill the table and the charts from a run's result (a fresh one or a saved one)."""
        self.result = result
        self.rows = rows_of(result)
        self.results.show_rows(self.rows)
        self.body.setCurrentWidget(self.results if self.rows else self.empty_state)
        self._refresh_estimate()  # a measured speed replaces the guess
        self._running(self._active)  # a saved run may be shown while a bench runs: Cancel stays

    def copy_markdown(self) -> str | None:
        return self._copy(markdown_table(self.rows)) if self.rows else None

    def copy_csv(self) -> str | None:
        return self._copy(csv_text(self.rows)) if self.rows else None

    def _copy(self, text: str) -> str:
        QGuiApplication.clipboard().setText(text)
        return text

    def start(self) -> None:
        """The first show: list the saved runs, read the machine, and show the latest bench job, if any."""
        if self._listed:
            return
        self._listed = True
        spawn(self.saved_runs.refresh(), "bench: list saved runs")
        spawn(self._read_machine(), "bench: read the machine")
        self.shown_again()

    def shown_again(self) -> None:
        latest = self.workstation.jobs.last(BENCH)
        if latest is not None and latest.id != self._job_id:
            self._show_job(latest)

    async def shutdown(self) -> None:
        """Stop following; a running bench is the workstation's (its close cancels it)."""
        await super().shutdown()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the wait, never the job

    # --- saved runs ---------------------------------------------------------------------------------------

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
        self.progress.setVisible(active or self.progress.value() > 0)
        if active:
            self.progress.setValue(0)
        self._refresh_empty_state()

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))
        palette = self.palette()
        color = error_color(palette) if error else None
        set_text_color(self.status, color or palette.color(QPalette.ColorRole.WindowText))


def _shrinkable(label: QLabel) -> QLabel:
    """A wrapped label whose width follows the layout's: a long message never widens the window."""
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


def _spin(low: int, high: int, value: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(value)
    spin.setMinimumWidth(64)  # its own minimum fits 100,000; the usual values are short
    return spin
