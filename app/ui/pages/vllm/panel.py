"""The vLLM page: which vLLM (detect, or install one into its own environment), and a server — started by the app
(managed: options, start-up phases, log tail, crash cause, the commands to start it by hand) or someone else's
(remote: address and key). Whichever is ready is announced with ``server_ready`` and watched every 2 s.

Nothing here blocks the Qt thread: detection runs in an executor, the install, the server and the HTTP checks
are tasks on the qasync loop. The server, the detector and the installer can be injected (tests use stubs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QHideEvent, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QGroupBox,
    QLabel,
    QRadioButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.vllm.log import PhaseEvent
from app.core.vllm.options import VllmServerOptions
from app.services.engines.events import EngineEvent, VllmEndpoint, VllmEndpointChanged
from app.services.engines.vllm_server import ManagedServer
from app.services.vllm.environment import VllmInstall
from app.services.vllm.server import VllmServer, VllmServerError
from app.services.workstation import Workstation
from app.ui.pages.vllm.environment_box import Detector, Installer, VllmEnvironmentBox
from app.ui.pages.vllm.log_tail import LogTail, PhaseList
from app.ui.pages.vllm.options_form import VllmOptionsForm
from app.ui.pages.vllm.remote_box import RemoteError, VllmRemoteBox, metrics_summary, read_metrics
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.factories import slot_button, widget_row, wrapped_label
from app.ui.widgets.palette import error_color, muted_color, set_text_color

METRICS_MS = 2000
TICK_MS = 250


ServerFactory = Callable[[str, VllmServerOptions, VllmInstall | None], ManagedServer]


def default_server_factory(python: str, options: VllmServerOptions, install: VllmInstall | None) -> VllmServer:
    """A real server; how to start it (module or script, CPU build) as detected."""
    if install is None:
        return VllmServer(python, options)
    return VllmServer(python, options, use_module=install.use_module, cpu_build=install.cpu_build)


class VllmPanel(QWidget):
    settings_changed_requested = Signal(dict)  # {"vllm_python": …} / {"vllm_options": …} / {"vllm_remote_url": …}
    server_ready = Signal(str, str, str)  # base URL, served model name, API key ("" when none)
    server_stopped = Signal()

    def __init__(
        self,
        context: Workstation,
        parent: QWidget | None = None,
        *,
        server_factory: ServerFactory | None = None,
        detector: Detector | None = None,
        installer: Installer | None = None,
    ) -> None:
        super().__init__(parent)
        self.context = context
        self._factory: ServerFactory = server_factory or default_server_factory
        self.host = context.host
        self.endpoint: tuple[str, str, str] | None = None  # (base URL, model, key) of the announced server
        self._unsubscribe = self.host.subscribe(self._engine_event)
        self._started: asyncio.Task[Any] | None = None
        self._start_task: asyncio.Task[Any] | None = None
        self._polling = False
        self.metrics_timer = _timer(self, METRICS_MS, self._poll_metrics)
        self.tick_timer = _timer(self, TICK_MS, self._tick)
        settings = context.settings
        self.environment = VllmEnvironmentBox(
            context.paths, getattr(settings, "vllm_python", "") or "", detector=detector, installer=installer
        )
        self.remote = VllmRemoteBox(getattr(settings, "vllm_remote_url", "") or "")
        self._build()
        with contextlib.suppress(TypeError, ValueError):
            self.form.set_values(dict(getattr(settings, "vllm_options", {}) or {}))

    # --- layout -----------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.managed_radio = QRadioButton("Managed: the app starts vLLM")
        self.managed_radio.setChecked(True)
        self.remote_radio = QRadioButton("Remote: a vLLM server that is already running")
        self._modes = QButtonGroup(self)
        self.stack = QStackedWidget()
        for index, radio in enumerate((self.managed_radio, self.remote_radio)):
            self._modes.addButton(radio, index)
        self.stack.addWidget(self._managed_page())
        self.stack.addWidget(self.remote)
        self.remote_radio.toggled.connect(lambda on: self.stack.setCurrentIndex(1 if on else 0))
        self.metrics_label = wrapped_label(name="vllm_metrics")
        self.metrics_label.hide()
        server = QGroupBox("Server")
        box = QVBoxLayout(server)
        box.addLayout(widget_row(self.managed_radio, self.remote_radio, QWidget(), stretch_at=2))
        box.addWidget(self.metrics_label)
        box.addWidget(self.stack, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.environment)
        layout.addWidget(server, 1)
        self.environment.python_chosen.connect(
            lambda python: self.settings_changed_requested.emit({"vllm_python": python})
        )
        self.environment.detected.connect(self._detected)
        self.remote.connected.connect(self._remote_connected)
        self.remote.disconnected.connect(lambda: self.host.withdraw_vllm("remote"))
        self._update_buttons()

    def _managed_page(self) -> QWidget:
        self.form = VllmOptionsForm()
        self.start_button = slot_button("Start", self.start_server)
        self.stop_button = slot_button("Stop", self.stop_server)
        self.copy_button = slot_button("Copy command", self.copy_command)
        self.docker_button = slot_button("Copy docker run", self.copy_docker)
        self.server_status = wrapped_label("Not running.", "vllm_server_status")
        self.crash_label = wrapped_label(name="vllm_crash")
        self.crash_label.hide()
        self.phase_list = PhaseList()
        self.log_view = LogTail()
        split = QSplitter()
        split.addWidget(self.phase_list)
        split.addWidget(self.log_view)
        split.setSizes([300, 600])
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.form)
        buttons = (self.start_button, self.stop_button, self.copy_button, self.docker_button, self.server_status)
        layout.addLayout(widget_row(*buttons, stretch_at=4))
        layout.addWidget(self.crash_label)
        layout.addWidget(split, 1)
        return page

    def settings_changed(self) -> None:
        """Call after the settings change: the interpreter is detected again."""
        python = getattr(self.context.settings, "vllm_python", "") or ""
        if python != self.environment.python and not self.environment.installing:
            self.environment.set_python(python)
            if self._started is not None:
                self.environment.detect()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._say(self.crash_label, self.crash_label.text(), error=True)

    # --- showing ---------------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """Detect vLLM (off the Qt thread); the first call's task."""
        if self._started is None:
            self._started = self.environment.detect()
        return self._started

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not loop_running():
            return
        self.start()
        self.metrics_timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.metrics_timer.stop()

    def _detected(self, install: VllmInstall | None) -> None:
        self.form.set_version(install.version if install else None, install.use_module if install else True)

    @property
    def server(self) -> ManagedServer | None:
        """The app's own vLLM server (the engine host owns it), starting or running."""
        return self.host.vllm_server.server

    # --- managed server --------------------------------------------------------------------------------------
    def start_server(self) -> asyncio.Task[Any] | None:
        """Start vLLM with the form's options; None (and the reason on screen) when it cannot start."""
        if self.server is not None:
            return self._start_task
        options, problems = self.form.options()
        python = self.environment.python
        if not python:
            problems.insert(0, "Choose the vLLM interpreter under Environment, or Install vLLM.")
        if problems:
            self._say(self.server_status, " ".join(problems), error=True)
            return None
        self.settings_changed_requested.emit({"vllm_options": self.form.settings()})
        server = self._factory(python, options, self.environment.install)
        self.phase_list.clear_phases()
        self.log_view.clear()
        self.crash_label.hide()
        self._start_task = spawn(self._start(server, options.api_key or ""), "vllm: start")
        return self._start_task

    async def _start(self, server: ManagedServer, key: str) -> None:
        self._say(self.server_status, "Starting vLLM…")
        self.tick_timer.start()
        try:
            started = self.host.vllm_server.start(server, key, self.log_view.add_line, self._phase, self._crashed)
            self._update_buttons()
            await started
        except VllmServerError as exc:
            self._failed(str(exc), exc.log_tail or server.log_tail)
        except OSError as exc:  # the interpreter is missing or cannot run
            self._failed(f"Could not run {self.environment.python}: {exc}. Choose the vLLM interpreter again.", [])
        except asyncio.CancelledError:
            self._say(self.server_status, "Start cancelled; vLLM was stopped.")
            raise
        else:
            self._say(self.server_status, f"● Serving {server.served_model_name} at {server.base_url}")
        finally:
            self.tick_timer.stop()
            self._tick()
            self._update_buttons()

    def _phase(self, event: PhaseEvent) -> None:
        self.phase_list.add_phase(event, self.server.elapsed if self.server else None)

    def _tick(self) -> None:
        elapsed = self.server.elapsed if self.server else None
        self.phase_list.tick(elapsed)
        if self.tick_timer.isActive() and elapsed is not None:
            self._say(self.server_status, f"Starting vLLM… {elapsed:.0f} s")

    @property
    def starting(self) -> bool:
        return self._start_task is not None and not self._start_task.done()

    def _failed(self, message: str, tail: list[str], how: str = "stopped") -> None:
        self.phase_list.fail(how)
        self._say(self.server_status, "vLLM is not running.", error=True)
        self._say(self.crash_label, message, error=True)
        if tail:
            self.log_view.set_lines(tail)

    def _crashed(self, error: VllmServerError) -> None:
        """vLLM stopped on its own after start-up: the cause and the last lines (the host has withdrawn it)."""
        self._failed(str(error), error.log_tail, "stopped on its own")
        self._update_buttons()

    def stop_server(self) -> asyncio.Task[Any]:
        return spawn(self._stop(), "vllm: stop")

    async def _stop(self) -> None:
        task = self._start_task
        starting = task is not None and not task.done()
        running = self.server is not None and not starting
        if task is not None and starting:
            task.cancel()  # its own handler says the start was cancelled
        if running:
            self._say(self.server_status, "Stopping vLLM…")
        await self.host.vllm_server.stop()
        if task is not None and starting:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if running:
            self._say(self.server_status, "Stopped.")
        self._update_buttons()

    def copy_command(self) -> str | None:
        """The shell line that starts this server by hand (the API key masked) onto the clipboard."""
        return self._copy(lambda server: server.launch_command(), "the command")

    def copy_docker(self) -> str | None:
        """The equivalent ``docker run`` line (NVIDIA machines; the API key masked) onto the clipboard."""
        return self._copy(lambda server: server.docker_command(), "the docker run line")

    def _copy(self, make: Callable[[ManagedServer], str], what: str) -> str | None:
        server = self.server
        if server is None:
            options, problems = self.form.options()
            if problems:
                self._say(self.server_status, " ".join(problems), error=True)
                return None
            server = self._factory(self.environment.python or "python", options, self.environment.install)
        text = make(server)
        QGuiApplication.clipboard().setText(text)
        self._say(self.server_status, f"Copied {what} to the clipboard (the API key shows as ****).")
        return text

    # --- remote, the announced server and its figures ---------------------------------------------------------
    def connect_remote(self) -> asyncio.Task[Any]:
        """Connect to the address in the Remote tab (health, served models); ``server_ready`` when it answers."""
        self.remote_radio.setChecked(True)
        return self.remote.connect_remote()

    def _remote_connected(self, base_url: str, model: str, key: str) -> None:
        self.settings_changed_requested.emit({"vllm_remote_url": base_url})
        self.host.offer_vllm(VllmEndpoint(base_url, model, key or None, "remote"))

    def _engine_event(self, event: EngineEvent) -> None:
        """The host offered a vLLM server (ours or a remote one) or withdrew it: say so and show its figures."""
        if not isinstance(event, VllmEndpointChanged):
            return
        endpoint = event.endpoint
        if endpoint is None:
            if self.endpoint is not None:
                self.endpoint = None
                self.metrics_label.hide()
                self.server_stopped.emit()
            return
        self.endpoint = (endpoint.base_url, endpoint.served_model, endpoint.api_key or "")
        self.server_ready.emit(*self.endpoint)
        self._say(self.metrics_label, "Reading the server's figures…", muted=True)
        self._poll_metrics()

    def _poll_metrics(self) -> None:
        if self.endpoint is not None and not self._polling and self.isVisible():
            self._polling = True
            spawn(self.refresh_metrics(), "vllm: metrics")

    async def refresh_metrics(self) -> None:
        """Read the announced server's ``/metrics`` once and show the summary."""
        endpoint = self.endpoint
        try:
            if endpoint is not None:
                text = metrics_summary(await read_metrics(endpoint[0], endpoint[2] or None))
                if self.endpoint == endpoint:
                    self._say(self.metrics_label, f"{endpoint[1]} at {endpoint[0]}: {text}")
        except RemoteError as exc:
            if self.endpoint == endpoint:
                self._say(self.metrics_label, f"Live figures unavailable: {exc}", muted=True)
        finally:
            self._polling = False

    async def shutdown(self) -> None:
        """Stop the managed server and any install (the window calls this when it closes)."""
        self._unsubscribe()
        self.metrics_timer.stop()
        await self.environment.shutdown()
        await self._stop()

    # --- helpers ---------------------------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        self.start_button.setEnabled(self.server is None)
        self.stop_button.setEnabled(self.server is not None)

    def _say(self, label: QLabel, text: str, error: bool = False, muted: bool = False) -> None:
        label.setText(text)
        label.setVisible(bool(text))
        palette = self.palette()
        color = error_color(palette) if error else muted_color(palette) if muted else None
        set_text_color(label, color or palette.color(QPalette.ColorRole.WindowText))


def _timer(parent: QWidget, interval_ms: int, slot: Callable[[], None]) -> QTimer:
    timer = QTimer(parent)
    timer.setInterval(interval_ms)
    timer.timeout.connect(slot)
    return timer
