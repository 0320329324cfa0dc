"""The Batch page: a JSONL or CSV file of requests through one OpenAI-compatible server, many at once.

The server is the one the vLLM page announced (:meth:`BatchPanel.set_endpoint`), this app's own API server (the
model the app has loaded, :meth:`BatchPanel.set_app_server`) or a typed address. Bad input
lines are listed with their numbers and skipped; results are appended to the output file as they finish (a
re-run skips the ids already done), so Cancel keeps everything that finished. At the end the summary (latency
and time to first token percentiles among them) is a small table that copies as Markdown.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QProgressBar,
    QRadioButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.batch.input import BatchInput, BatchInputError, BatchRequest, load_batch_input
from app.core.units import MISSING, format_duration, format_tokens_per_s
from app.services.api.events import ApiEvent, ApiSnapshot, ApiStateChanged
from app.services.batch.job import BATCH, BatchJob, start_batch
from app.services.batch.runner import BatchError, BatchProgress, BatchRunner, BatchSummary
from app.services.engines.entries import EngineKind
from app.services.engines.events import EngineEvent, ModelLoaded, ModelUnloaded, VllmEndpoint
from app.services.jobs.events import Job
from app.services.library.names import model_display_name
from app.services.workstation import Workstation
from app.ui.engine_events import follow_vllm_endpoint
from app.ui.job_follow import JobFollower
from app.ui.page import Page
from app.ui.pages.batch.empty_state import BatchEmptyState, write_example
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_S, set_role
from app.ui.tasks import spawn
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.factories import read_only_table, slot_button, widget_row, wrapped_label
from app.ui.widgets.status_text import show_status

PROGRESS_INTERVAL_S = 0.25
PREVIEW_ROWS = 5
PREVIEW_CHARS = 80
DEFAULT_ADDRESS = "http://127.0.0.1:8000/v1"  # where `vllm serve` listens unless told otherwise


def _ms(value: float | None) -> str:
    return MISSING if value is None else f"{value:,.0f} ms"


def summary_rows(summary: BatchSummary) -> list[tuple[str, str]]:
    """The summary as (figure, value) rows: what the table shows and the Markdown copies."""
    rows = [
        ("Model", summary.model),
        ("Requests", f"{summary.count}" + (f" (+{summary.skipped} already done)" if summary.skipped else "")),
        ("Succeeded", str(summary.done)),
        ("Failed", str(summary.failed)),
        ("Wall time", f"{summary.wall_s:.1f} s"),
        ("Output tokens", f"{summary.output_tokens:,}"),
        ("Output tok/s", f"{summary.output_tokens_per_s:,.1f}"),
    ]
    for name, values in (("Latency", summary.latency_ms), ("TTFT", summary.ttft_ms)):
        rows += [(f"{name} {pct}", _ms(values.get(pct))) for pct in ("p50", "p90", "p99")]
    if summary.first_error:
        rows.append(("First error", summary.first_error))
    return rows


def markdown_table(rows: list[tuple[str, str]]) -> str:
    lines = ["| Figure | Value |", "| --- | ---: |"]
    lines += [f"| {name} | {value.replace('|', '/')} |" for name, value in rows]
    return "\n".join(lines) + "\n"


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


class BatchPanel(Page):
    """A view of the workstation's batch job (``workstation.jobs``, kind ``batch``): a run goes on while the page
    is hidden, and the page shows the latest run, running or finished, whenever it is shown."""

    open_page_requested = Signal(str)  # a page path: "server" when the API server must be started first

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.summary: BatchSummary | None = None
        self.loaded: BatchInput | None = None
        self._announced: tuple[str, str, str] | None = None  # (base URL, key, model) from the vLLM page
        self._app_server: tuple[str, str | None] | None = None  # (base URL, key) of this app's API server
        self._last_progress: BatchProgress | None = None
        self._job_id: str | None = None  # the batch job shown (running or finished)
        self._task: asyncio.Task[Any] | None = None  # reading the input, starting the job and waiting for it
        self._dialog: QFileDialog | None = None
        self._build()

    # --- layout -----------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.server_radio = QRadioButton("The vLLM page's server")
        self.server_detail = ElidedLabel(mode=Qt.TextElideMode.ElideRight)
        self.server_detail.setObjectName("batch_server_detail")
        set_role(self.server_detail, "muted")
        self.app_radio = QRadioButton("This app's API server")
        self.app_radio.setToolTip("The model this app has loaded, through its API server (the API server page)")
        self.app_detail = ElidedLabel(mode=Qt.TextElideMode.ElideRight)
        self.app_detail.setObjectName("batch_app_detail")
        set_role(self.app_detail, "muted")
        self.open_server = slot_button("Open the API server page", lambda: self.open_page_requested.emit("server"))
        self.url_radio = QRadioButton("This address")
        self.url_radio.setChecked(True)
        group = QButtonGroup(self)
        for radio in (self.server_radio, self.app_radio, self.url_radio):
            group.addButton(radio)
        self.url_edit = _line("http://HOST:PORT/v1 of an OpenAI-compatible server")
        self.url_edit.setText(DEFAULT_ADDRESS)
        self.key_edit = _line("API key (if the server needs one)")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.model_edit = _line("model (default: the first the server lists)")
        self.input_edit = _line("requests.jsonl or .csv")
        self.input_edit.setObjectName("batch_input")
        self.output_edit = _line("results.jsonl: one line per finished request, appended")
        self.as_chat = QCheckBox("CSV prompts go to the chat endpoint")
        self.concurrency = QSpinBox()
        self.concurrency.setRange(1, 1024)
        self.concurrency.setValue(8)
        self.concurrency.setToolTip("Requests in flight at once")
        self.shortest_first = QCheckBox("Shortest prompts first")
        self.priority = QCheckBox("Send priorities (vLLM --scheduling-policy priority)")
        self.input_info = wrapped_label(name="batch_input_info", hidden=True)
        self.preview_label = _caption("Preview: the first requests")
        self.preview = _list("batch_preview")
        self.problems_label = _caption("Lines that will not run")
        self.problems = _list("batch_problems")
        self.run_button = slot_button("Run", self.run_batch)
        self.run_button.setIcon(icon("play"))
        set_role(self.run_button, "accent")
        self.cancel_button = slot_button("Cancel", self.cancel_batch)
        self.run_hint = wrapped_label(name="batch_run_hint", hidden=True)  # why Run is disabled
        set_role(self.run_hint, "muted")
        self.progress = QProgressBar()
        self.progress_label = wrapped_label(name="batch_progress", hidden=True)
        self.status = wrapped_label(name="batch_status", hidden=True)
        self.table = read_only_table(("Figure", "Value"), "batch_summary", stretch=1)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.copy_button = slot_button("Copy as Markdown", self.copy_markdown)
        self.copy_button.setIcon(icon("copy"))
        self.empty_state = BatchEmptyState(self.open_example, self.browse_input)
        self._lay_out()
        self._show_preview(None)
        self.input_edit.editingFinished.connect(self._input_edited)
        for edit in (self.url_edit, self.key_edit, self.model_edit):
            self.url_radio.toggled.connect(edit.setEnabled)
        for edit in (self.input_edit, self.output_edit, self.url_edit):
            edit.textChanged.connect(self._sync_run)
        self.url_radio.toggled.connect(self._sync_run)
        self.app_radio.toggled.connect(self._sync_run)
        self._app_server_follows(self.workstation.api.snapshot())
        self._running(False)
        self.follow(follow_vllm_endpoint(self.workstation.host, self._vllm_changed))
        self.follow(self.workstation.host.subscribe(self._engine_event))
        follower = JobFollower(BATCH, lambda: self._job_id, self._show_job, self._progressed, self._finished)
        self.follow(self.workstation.jobs.subscribe(follower))

    def _lay_out(self) -> None:
        setup = QWidget()
        column = QVBoxLayout(setup)
        column.setContentsMargins(0, 0, SPACE_S, 0)
        column.addWidget(self._server_box())
        column.addWidget(self._requests_box())
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(setup)
        self.results = QStackedWidget()
        empty = QWidget()  # the card keeps its own height, at the top
        empty_layout = QVBoxLayout(empty)
        empty_layout.setContentsMargins(0, 0, 0, 0)
        empty_layout.addWidget(self.empty_state)
        empty_layout.addStretch(1)
        self.results.addWidget(empty)
        self.results.addWidget(self._results_box())
        run = QWidget()
        run_column = QVBoxLayout(run)
        run_column.setContentsMargins(SPACE_S, 0, 0, 0)
        run_column.addLayout(widget_row(self.run_button, self.cancel_button, QWidget(), stretch_at=2))
        run_column.addWidget(self.run_hint)
        run_column.addWidget(self.status)
        run_column.addWidget(self.results, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(scroll)
        splitter.addWidget(run)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([460, 420])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_S, SPACE_S, SPACE_S, SPACE_S)
        layout.addWidget(splitter)

    def _server_box(self) -> QGroupBox:
        server = QGroupBox("Server")
        grid = QGridLayout(server)
        grid.addWidget(self.server_radio, 0, 0)
        grid.addWidget(self.server_detail, 0, 1)
        grid.addWidget(self.app_radio, 1, 0)
        grid.addLayout(widget_row(self.app_detail, self.open_server, stretch_at=0), 1, 1)
        grid.addWidget(self.url_radio, 2, 0)
        grid.addWidget(self.url_edit, 2, 1)
        grid.addWidget(self.key_edit, 3, 1)
        grid.addWidget(self.model_edit, 4, 1)
        grid.setColumnStretch(1, 1)
        return server

    def _requests_box(self) -> QGroupBox:
        files = QGroupBox("Requests")
        rows = QGridLayout(files)
        for row, (label, edit, browse) in enumerate(
            (("Input", self.input_edit, self.browse_input), ("Output", self.output_edit, self.browse_output))
        ):
            rows.addWidget(QLabel(label), row, 0)
            rows.addWidget(edit, row, 1)
            rows.addWidget(slot_button("Browse…", browse), row, 2)
        options = widget_row(QLabel("Concurrency"), self.concurrency, self.shortest_first)
        options.addStretch(1)
        below = QVBoxLayout()
        below.addWidget(self.input_info)
        for widget in (self.preview_label, self.preview, self.problems_label, self.problems):
            below.addWidget(widget)
        below.addLayout(options)
        below.addWidget(self.priority)
        below.addWidget(self.as_chat)
        rows.addLayout(below, 2, 1, 1, 2)
        rows.setColumnStretch(1, 1)
        return files

    def _results_box(self) -> QGroupBox:
        results = QGroupBox("Progress and summary")
        box = QVBoxLayout(results)
        self.results_hint = wrapped_label(name="batch_results_hint")
        set_role(self.results_hint, "muted")
        box.addWidget(self.results_hint)
        box.addWidget(self.progress)
        box.addWidget(self.progress_label)
        box.addWidget(self.table, 1)
        box.addLayout(widget_row(self.copy_button, QWidget(), stretch_at=1))
        box.addStretch(0)  # takes the height while the table is hidden
        return results

    # --- the server ----------------------------------------------------------------------------------------
    def set_endpoint(self, base_url: str, api_key: str, model: str) -> None:
        """The server the vLLM page has ready (``""`` when none): offered first, and chosen."""
        self._announced = (base_url, api_key, model) if base_url else None
        if base_url:
            self.server_detail.set_full_text(f"{model} at {base_url}")
            self.server_radio.setChecked(True)
        else:
            self.server_detail.set_full_text("none yet: start or connect one on the vLLM page")
            self.url_radio.setChecked(True)
        self.server_radio.setEnabled(bool(base_url))
        self._sync_run()

    def clear_endpoint(self) -> None:
        self.set_endpoint("", "", "")

    def set_app_server(self, base_url: str | None, api_key: str | None) -> None:
        """This app's API server: its address and key while it runs (None when it is stopped)."""
        self._app_server = (base_url, api_key) if base_url else None
        if base_url:
            model = self._app_model()
            self.app_detail.set_full_text(f"{model or 'the first model it lists'} at {base_url}")
        else:
            self.app_detail.set_full_text("not running")
        self.open_server.setVisible(not base_url)
        self._sync_run()

    def _app_server_follows(self, snapshot: ApiSnapshot) -> None:
        """``workstation.api`` now, then its every change: the app target follows the server, page or not."""
        self.set_app_server(snapshot.url, snapshot.api_key)
        self.follow(self.workstation.api.subscribe(self._api_event))

    def _api_event(self, event: ApiEvent) -> None:
        if isinstance(event, ApiStateChanged):
            self.set_app_server(event.snapshot.url, event.snapshot.api_key)

    def _engine_event(self, event: EngineEvent) -> None:
        """Another model loaded or unloaded: the app target names the one the API server now serves."""
        if isinstance(event, ModelLoaded | ModelUnloaded) and self._app_server is not None:
            self.set_app_server(*self._app_server)

    def _app_model(self) -> str | None:
        """The llama.cpp model the app has loaded, by the id the API server gives it (None: none loaded)."""
        loaded = self.workstation.host.loaded(EngineKind.LLAMACPP)
        return model_display_name(loaded.info.name, loaded.info.path) if loaded is not None else None

    def _vllm_changed(self, endpoint: VllmEndpoint | None) -> None:
        if endpoint is None:
            self.clear_endpoint()
        else:
            self.set_endpoint(endpoint.base_url, endpoint.api_key or "", endpoint.served_model)

    def _endpoint(self) -> tuple[str, str | None, str | None]:
        if self.server_radio.isChecked() and self._announced:
            base, key, model = self._announced
        elif self.app_radio.isChecked():
            if self._app_server is None:
                return "", None, None
            base, api_key = self._app_server
            return base, api_key, self._app_model()
        else:
            base, key, model = self.url_edit.text().strip(), self.key_edit.text().strip(), self.model_edit.text()
        return base, key or None, model.strip() or None

    def missing(self) -> list[str]:
        """What Run still needs, in words ("a server address", "an input file", "an output file")."""
        base, _key, _model = self._endpoint()
        server = "the API server started" if self.app_radio.isChecked() else "a server address"
        values = (
            (server, base),
            ("an input file", self.input_edit.text()),
            ("an output file", self.output_edit.text()),
        )
        return [what for what, value in values if not value.strip()]

    def _sync_run(self) -> None:
        """Run is offered only when everything is set; its tooltip says what is missing."""
        if not hasattr(self, "cancel_button"):
            return
        active = self._task is not None and not self._task.done()
        missing = self.missing()
        self.run_button.setEnabled(not active and not missing)
        why = f"Choose {' and '.join(missing)} first." if missing else ""
        self.run_button.setToolTip(why or "Send every request to the server, at most Concurrency at once.")
        self.run_hint.setText(why)
        self.run_hint.setVisible(bool(why) and not active)
        self.results.setCurrentIndex(1 if self.input_edit.text().strip() or self.summary is not None else 0)

    # --- files ---------------------------------------------------------------------------------------------
    def browse_input(self) -> None:
        self._open_dialog("Choose the requests file", "Requests (*.jsonl *.json *.csv);;All files (*)", False)

    def browse_output(self) -> None:
        self._open_dialog("Choose where the results go", "JSON lines (*.jsonl);;All files (*)", True)

    def _open_dialog(self, title: str, filters: str, save: bool) -> None:
        """A non-blocking file dialog; an existing output file is appended to (finished ids are skipped)."""
        self._dialog = QFileDialog(self, title, "", filters)
        if save:
            self._dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
            self._dialog.setOption(QFileDialog.Option.DontConfirmOverwrite, True)
            self._dialog.setDefaultSuffix("jsonl")
        else:
            self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(self._output_chosen if save else self._input_chosen)
        self._dialog.open()

    def _input_chosen(self, path: str) -> None:
        if path:
            self.input_edit.setText(path)
            self._input_edited()

    def _output_chosen(self, path: str) -> None:
        if path:
            self.output_edit.setText(path)

    def _input_edited(self) -> None:
        path = self.input_edit.text().strip()
        if path and not self.output_edit.text().strip():
            source = Path(path)
            self.output_edit.setText(str(source.with_name(f"{source.stem}.results.jsonl")))
        if path:
            spawn(self.read_input(), "batch: read input")

    def open_example(self) -> asyncio.Task[Any]:
        """Write the example requests into the app's data folder and use them as the input."""
        return spawn(self._open_example(), "batch: open the example")

    async def _open_example(self) -> None:
        folder = self.workstation.paths.data_dir / "batch"
        try:
            path = await asyncio.get_running_loop().run_in_executor(None, write_example, folder)
        except OSError as exc:
            show_status(self.status, f"Cannot write the example: {exc.strerror or exc}.", error=True)
            return
        self.input_edit.setText(str(path))
        self.output_edit.clear()
        self._input_edited()

    async def read_input(self) -> BatchInput | None:
        """Read the input file in an executor; list its bad lines. None (and the reason shown) when unreadable."""
        path = self.input_edit.text().strip()
        self._show_preview(None)
        try:
            loaded = await asyncio.get_running_loop().run_in_executor(
                None, load_batch_input, path, self.as_chat.isChecked()
            )
        except BatchInputError as exc:
            self.loaded = None
            show_status(self.input_info, _sentence(str(exc)), error=True)
            return None
        self.loaded = loaded
        self._show_preview(loaded)
        if self._task is None or self._task.done():
            self._sync_results()
        bad = f"; {len(loaded.problems)} bad lines will not run (listed below)" if loaded.problems else ""
        notes = "".join(f" {note}" for note in loaded.notes)
        show_status(self.input_info, f"{len(loaded.requests)} requests{bad}.{notes}", muted=not loaded.problems)
        return loaded

    def _show_preview(self, loaded: BatchInput | None) -> None:
        """The first requests and the bad lines, each under its caption; hidden when there are none."""
        self.preview.clear()
        self.problems.clear()
        requests = loaded.requests if loaded else []
        problems = loaded.problems if loaded else []
        for request in requests[:PREVIEW_ROWS]:
            self.preview.addItem(request_preview(request))
        if len(requests) > PREVIEW_ROWS:
            self.preview.addItem(f"… and {len(requests) - PREVIEW_ROWS:,} more")
        for problem in problems:
            self.problems.addItem(str(problem))
        for label, view, shown in (
            (self.preview_label, self.preview, bool(requests)),
            (self.problems_label, self.problems, bool(problems)),
        ):
            label.setVisible(shown)
            view.setVisible(shown)

    # --- running -------------------------------------------------------------------------------------------
    def run_batch(self) -> asyncio.Task[Any] | None:
        """Run the input through the server; None (and the reason shown) when something is missing."""
        if self._task is not None and not self._task.done():
            return self._task
        running = self.workstation.jobs.running(BATCH)
        if running is not None:  # started before this page was built: wait for that one
            self._task = spawn(self.workstation.jobs.wait(running.id), "batch: wait")
            return self._task
        missing = self.missing()
        if missing:
            show_status(self.status, f"Choose {' and '.join(missing)} first.", error=True)
            return None
        self._task = spawn(self._run(), "batch: run")
        return self._task

    def cancel_batch(self) -> None:
        """Stop launching and cancel what is in flight; finished results stay in the output file."""
        job = self.workstation.jobs.job(self._job_id) if self._job_id else None
        if job is not None and job.running and not job.cancel_requested:
            self.workstation.jobs.cancel(job.id)
            show_status(self.status, "Cancelling…")

    async def _run(self) -> None:
        """Read the input, start the batch job, wait until it ends (the job's events fill the page)."""
        self.summary = None
        self._last_progress = None
        self.table.setRowCount(0)
        self._running(True)
        output = self.output_edit.text().strip()
        try:
            loaded = await self.read_input()
            if loaded is None:
                self._running(False)
                return
            if not loaded.requests:
                show_status(self.status, "No line of the input can run: fix the lines listed above.", error=True)
                self._running(False)
                return
            job = start_batch(self.workstation.jobs, self._runner(), loaded.requests, output)
        except (BatchError, ValueError) as exc:
            self._running(False)
            show_status(
                self.status, f"The batch stopped: {_sentence(str(exc))}. {written_note(None, output)}", error=True
            )
            return
        await self.workstation.jobs.wait(job.id)

    def _runner(self) -> BatchRunner:
        base, key, model = self._endpoint()
        return BatchRunner(
            base,
            api_key=key,
            model=model,
            concurrency=self.concurrency.value(),
            order="shortest" if self.shortest_first.isChecked() else "input",
            priority=self.priority.isChecked(),
            progress_interval_s=PROGRESS_INTERVAL_S,
        )

    # --- the job's news ------------------------------------------------------------------------------------
    def _show_job(self, job: Job) -> None:
        """Follow this batch job: running (its progress so far) or finished (its outcome)."""
        self._job_id = job.id
        if not job.running:
            self._finished(job)
            return
        self.summary = None
        self._last_progress = None
        self.table.setRowCount(0)
        self._running(True)
        show_status(self.status, f"{job.title}…")
        if isinstance(job.progress, BatchProgress):
            self._progressed(job.progress)

    def _finished(self, job: Job) -> None:
        spec = job.spec if isinstance(job.spec, BatchJob) else BatchJob("", "", 0)
        if isinstance(job.progress, BatchProgress):
            self._progressed(job.progress)
        self._running(False)
        if isinstance(job.result, BatchSummary):
            self._show_summary(job.result, spec.output)
        elif job.cancelled:
            show_status(self.status, f"Cancelled. Finished results are in {spec.output}; Run again to go on.")
        else:
            stopped = f"The batch stopped: {_sentence(str(job.error))}."
            show_status(self.status, f"{stopped} {written_note(self._last_progress, spec.output)}", error=True)

    def _progressed(self, progress: BatchProgress) -> None:
        self._last_progress = progress
        finished = progress.done + progress.failed
        self.progress.setRange(0, max(1, progress.total))
        self.progress.setValue(finished)
        parts = [
            f"{finished} of {progress.total} finished",
            f"{progress.failed} failed",
            f"{progress.in_flight} in flight",
        ]
        parts.append(format_tokens_per_s(progress.output_tokens_per_s))
        if progress.eta_s is not None and finished < progress.total:
            parts.append(f"about {format_duration(progress.eta_s)} left")
        if progress.skipped:
            parts.append(f"{progress.skipped} already done earlier")
        show_status(self.progress_label, " · ".join(parts))

    def _show_summary(self, summary: BatchSummary, output: str) -> None:
        self.summary = summary
        rows = summary_rows(summary)
        self.table.setRowCount(len(rows))
        for row, (name, value) in enumerate(rows):
            self.table.setItem(row, 0, QTableWidgetItem(name))
            self.table.setItem(row, 1, QTableWidgetItem(value))
        self.copy_button.setEnabled(True)
        self._sync_results()
        if summary.cancelled:
            text = f"Cancelled. {summary.done + summary.failed} finished results are in {output}; Run again to go on."
        elif summary.count and not summary.done:
            text = f"Every request failed. The first: {summary.first_error}"
        elif not summary.count:
            text = f"Nothing to do: every request already finished in {output}."
        else:
            text = f"Done: {summary.done} of {summary.count} succeeded; results are in {output}."
        show_status(self.status, text, error=bool(summary.count and not summary.done))

    def start(self) -> None:
        """The latest batch job, should one have started before the page was built."""
        self.shown_again()

    def shown_again(self) -> None:
        latest = self.workstation.jobs.last(BATCH)
        if latest is not None and latest.id != self._job_id:
            self._show_job(latest)

    async def shutdown(self) -> None:
        """Stop following; a running batch is the workstation's (its close cancels it, results kept)."""
        await super().shutdown()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the wait (or the input read), never the job

    def copy_markdown(self) -> str | None:
        if self.summary is None:
            return None
        text = markdown_table(summary_rows(self.summary))
        QGuiApplication.clipboard().setText(text)
        return text

    def _running(self, active: bool) -> None:
        self.run_button.setEnabled(not active and not self.missing())
        self.run_hint.setVisible(not active and bool(self.missing()))
        self.cancel_button.setEnabled(active)
        self.copy_button.setEnabled(not active and self.summary is not None)
        if active:
            self.progress.setRange(0, 0)
            self.progress_label.clear()
        self._sync_results(active)

    def _sync_results(self, active: bool = False) -> None:
        """Before a run, a sentence; while it runs, the progress; after it, the summary."""
        done = self.summary is not None
        self.progress.setVisible(active or done)
        self.table.setVisible(done)
        self.copy_button.setVisible(done)
        count = len(self.loaded.requests) if self.loaded is not None else 0
        ready = f"Press Run to send the {count:,} requests." if count else "Press Run to send the requests."
        self.results_hint.setText(f"{ready} Progress and the summary (latency, time to first token) show here.")
        self.results_hint.setVisible(not active and not done)


def written_note(progress: BatchProgress | None, output: str) -> str:
    """After a failed run, what it wrote to the output: nothing, or how many results (and what was there before)."""
    written = progress.done + progress.failed if progress is not None else 0
    earlier = progress.skipped if progress is not None else 0
    before = f" ({earlier} results from an earlier run are still there)" if earlier else ""
    if not written:
        return f"Nothing was written to {output}{before}."
    results = "1 result of this run was" if written == 1 else f"{written} results of this run were"
    return f"{results} written to {output}{before}."


def request_preview(request: BatchRequest) -> str:
    """One line for the preview list: ``id · chat · first words`` (or ``prompt``)."""
    if request.messages:
        last = request.messages[-1].get("content", "")
        text = last if isinstance(last, str) else "(structured content)"
    else:
        text = request.prompt or ""
    words = " ".join(text.split())
    words = words if len(words) <= PREVIEW_CHARS else words[: PREVIEW_CHARS - 1] + "…"
    return f"{request.id} · {'chat' if request.is_chat else 'prompt'} · {words}"


def _line(placeholder: str) -> QLineEdit:
    edit = QLineEdit()
    edit.setPlaceholderText(placeholder)
    return edit


def _caption(text: str) -> QLabel:
    label = QLabel(text)
    set_role(label, "muted")
    return label


def _list(name: str) -> QListWidget:
    view = QListWidget()
    view.setObjectName(name)
    view.setMaximumHeight(110)
    view.setMinimumHeight(50)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    return view
