"""The vLLM page: which vLLM (detect, or install one into its own environment), and a server — started by the app
(managed: options, start-up phases, log tail, crash cause, the commands to start it by hand) or someone else's
(remote: address and key). Whichever is ready is offered to the engine host (``host.offer_vllm``) and its
``/metrics`` read every 2 s while the page shows. Choices are remembered through ``workstation.update_settings``.

Nothing here blocks the Qt thread: detection runs in an executor, the install, the server and the HTTP checks
are tasks on the qasync loop. The server, the detector and the installer can be injected (tests use stubs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QHideEvent, QPalette
from PySide6.QtWidgets import (
    QButtonGroup,
    QFrame,
    QLabel,
    QRadioButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.snapshot import GpuReadout
from app.core.vllm.log import PhaseEvent
from app.core.vllm.options import VllmServerOptions
from app.services.engines.events import EngineEvent, VllmEndpoint, VllmEndpointChanged
from app.services.engines.vllm_server import ManagedServer
from app.services.settings_changes import SettingsChanged
from app.services.vllm.environment import VllmInstall
from app.services.vllm.metrics import MetricsUnavailableError, metrics_summary, read_metrics
from app.services.vllm.server import VllmServerError, server_for_install
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.vllm.environment_box import Detector, Installer, VllmEnvironmentBox, shrinkable
from app.ui.pages.vllm.hardware import GpuProbe, machine_fit, read_gpus
from app.ui.pages.vllm.log_tail import LogTail, PhaseList
from app.ui.pages.vllm.options_form import VllmOptionsForm
from app.ui.pages.vllm.remote_box import VllmRemoteBox
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_L, SPACE_M, SPACE_S, set_role, tokens
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button, widget_row, wrapped_label
from app.ui.widgets.notices import NoticeArea
from app.ui.widgets.palette import error_color, muted_color, set_text_color

METRICS_MS = 2000
TICK_MS = 250
CRASH_KEY = "vllm-crash"
LOG_HINT = "The start-up phases and vLLM's log show here once the server starts."


ServerFactory = Callable[[str, VllmServerOptions, VllmInstall | None], ManagedServer]


class VllmPanel(Page):
    server_ready = Signal(str, str, str)  # base URL, served model name, API key ("" when none)
    server_stopped = Signal()

    def __init__(
        self,
        workstation: Workstation,
        parent: QWidget | None = None,
        *,
        server_factory: ServerFactory | None = None,
        detector: Detector | None = None,
        installer: Installer | None = None,
        gpu_probe: GpuProbe | None = None,
    ) -> None:
        super().__init__(workstation, parent)
        self._gpu_probe: GpuProbe = gpu_probe or read_gpus
        self._factory: ServerFactory = server_factory or server_for_install
        self.host = workstation.host
        self.endpoint: tuple[str, str, str] | None = None  # (base URL, model, key) of the announced server
        self.follow(self.host.subscribe(self._engine_event))
        self._started: asyncio.Task[Any] | None = None
        self._start_task: asyncio.Task[Any] | None = None
        self._polling: asyncio.Task[Any] | None = None  # the /metrics read in flight
        self.metrics_timer = _timer(self, METRICS_MS, self._poll_metrics)
        self.tick_timer = _timer(self, TICK_MS, self._tick)
        settings = workstation.settings
        self.environment = VllmEnvironmentBox(workstation, settings.vllm_python, detector=detector, installer=installer)
        self.remote = VllmRemoteBox(settings.vllm_remote_url)
        self._build()
        with contextlib.suppress(TypeError, ValueError):
            self.form.set_values(dict(settings.vllm_options))

    # --- layout -----------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.managed_radio = QRadioButton("Managed: the app starts vLLM")
        self.managed_radio.setChecked(True)
        self.remote_radio = QRadioButton("Remote: a server already running")
        self._modes = QButtonGroup(self)
        self.stack = QStackedWidget()
        for index, radio in enumerate((self.managed_radio, self.remote_radio)):
            self._modes.addButton(radio, index)
        self.form = VllmOptionsForm()
        self.stack.addWidget(_card(self.form))
        self.stack.addWidget(_card(self.remote))
        self.remote_radio.toggled.connect(self._mode_changed)
        self.metrics_label = shrinkable(wrapped_label(name="vllm_metrics"))
        self.metrics_label.hide()
        setup = QWidget()
        box = QVBoxLayout(setup)
        box.setContentsMargins(SPACE_L, SPACE_M, SPACE_L, SPACE_S)
        box.setSpacing(SPACE_S)
        box.addWidget(_section("Environment"))
        box.addWidget(self.environment)
        modes = widget_row(_section("Server"), self.managed_radio, self.remote_radio, QWidget(), stretch_at=3)
        modes.setSpacing(SPACE_L)
        box.addLayout(modes)
        box.addWidget(self.stack)
        box.addStretch(1)
        scroll = QScrollArea()
        scroll.setObjectName("vllm_setup")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(setup)
        self.run_area = self._run_area()
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setObjectName("vllm_split")
        self.split.addWidget(scroll)
        self.split.addWidget(self.run_area)
        self.split.setStretchFactor(0, 3)
        self.split.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.split, 1)
        strip = QVBoxLayout()  # the announced server's live figures, for a managed and a remote server alike
        strip.setContentsMargins(SPACE_L, 0, SPACE_L, SPACE_S)
        strip.addWidget(self.metrics_label)
        layout.addLayout(strip)
        self.environment.python_chosen.connect(lambda python: self.workstation.update_settings(vllm_python=python))
        self.environment.detected.connect(self._detected)
        self.remote.connected.connect(self._remote_connected)
        self.remote.disconnected.connect(lambda: self.host.withdraw_vllm("remote"))
        self._update_buttons()

    def _run_area(self) -> QWidget:
        """Start/Stop and the copy buttons, the status, the crash notice, then the phases beside the log."""
        self.start_button = slot_button("Start", self.start_server)
        set_role(self.start_button, "accent")
        self.stop_button = slot_button("Stop", self.stop_server)
        self.copy_button = slot_button("Copy command", self.copy_command)
        self.docker_button = slot_button("Copy docker run", self.copy_docker)
        for button, name in ((self.start_button, "play"), (self.stop_button, "stop"), (self.copy_button, "copy"),
                             (self.docker_button, "copy")):  # fmt: skip
            button.setIcon(icon(name))
        self.start_button.setIcon(icon("play", tokens(self.palette()).on_accent))
        self.copy_button.setToolTip("The shell line that starts this server by hand (the API key masked).")
        self.docker_button.setToolTip("The same server as a docker run line, for an NVIDIA machine.")
        self.server_status = shrinkable(wrapped_label("Not running.", "vllm_server_status"))
        self.notices = NoticeArea()
        self.log_hint = shrinkable(wrapped_label(LOG_HINT, "vllm_log_hint"))
        set_role(self.log_hint, "muted")
        self.phase_list = PhaseList()
        self.phase_list.setMinimumWidth(160)
        self.log_view = LogTail()
        self.log_split = QSplitter()
        self.log_split.setObjectName("vllm_log_split")
        self.log_split.addWidget(self.phase_list)
        self.log_split.addWidget(self.log_view)
        self.log_split.setSizes([260, 600])
        self.log_split.hide()
        area = QWidget()
        layout = QVBoxLayout(area)
        layout.setContentsMargins(SPACE_L, SPACE_S, SPACE_L, SPACE_M)
        buttons = (self.start_button, self.stop_button, self.copy_button, self.docker_button, self.server_status)
        layout.addLayout(widget_row(*buttons, stretch_at=4))
        layout.addWidget(self.notices)
        layout.addWidget(self.log_hint)
        layout.addWidget(self.log_split, 1)
        return area

    def _mode_changed(self, remote: bool) -> None:
        self.stack.setCurrentIndex(1 if remote else 0)
        self.run_area.setVisible(not remote)

    def _show_log(self) -> None:
        """The phases and the log take the lower part of the page once a start begins."""
        if not self.log_split.isVisible():
            self.log_hint.hide()
            self.log_split.show()
            total = max(1, self.split.height())
            self.split.setSizes([total * 2 // 5, total - total * 2 // 5])
            width = max(1, self.log_split.width() or self.width())
            self.log_split.setSizes([width * 2 // 5, width - width * 2 // 5])  # room for "… 0 s so far"

    @property
    def crash_text(self) -> str:
        """The crash notice's text ("" when none shows)."""
        notice = next((n for n in self.notices.notices() if n.key == CRASH_KEY), None)
        return notice.text if notice else ""

    def settings_changed(self, event: SettingsChanged) -> None:
        """Another interpreter was chosen (the Settings page): it is detected again."""
        if not event.touches("vllm_python"):
            return
        python = self.workstation.settings.vllm_python
        if python != self.environment.python and not self.environment.installing:
            self.environment.set_python(python)
            if self._started is not None:
                self.environment.detect()

    # --- showing ---------------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """Check for an NVIDIA GPU and detect vLLM (both off the Qt thread); the first call's task."""
        if self._started is None:
            self._started = spawn(self._start_up(), "vllm: check the machine")
            self.metrics_timer.start()
        return self._started

    async def _start_up(self) -> None:
        detecting = self.environment.detect()
        try:
            readout = await asyncio.get_running_loop().run_in_executor(None, self._gpu_probe)
        except Exception as exc:  # a broken probe must not leave the page checking forever
            readout = GpuReadout((), f"The GPU check failed ({exc}).", None, None)
        self.environment.set_machine(machine_fit(readout))
        await detecting

    def shown_again(self) -> None:
        self.metrics_timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.metrics_timer.stop()

    def _detected(self, install: VllmInstall | None) -> None:
        if install is None:
            self.form.set_version(None)
        else:
            self.form.set_version(install.version, install.use_module, install.cpu_build)

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
        self.workstation.update_settings(vllm_options=self.form.settings())
        server = self._factory(python, options, self.environment.install)
        self.phase_list.clear_phases()
        self.log_view.clear()
        self.notices.dismiss(CRASH_KEY)
        self._show_log()
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
            why = exc.strerror or type(exc).__name__
            self._failed(f"Could not run the vLLM interpreter ({why}). Choose it again under Environment.", [str(exc)])
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
        self.notices.show_notice(message, "error", key=CRASH_KEY)
        self._show_log()
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
        self.workstation.update_settings(vllm_remote_url=base_url)
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
        if self.endpoint is not None and self._polling is None and self.isVisible():
            self._polling = spawn(self.refresh_metrics(), "vllm: metrics")

    async def refresh_metrics(self) -> None:
        """Read the announced server's ``/metrics`` once and show the summary."""
        endpoint = self.endpoint
        try:
            if endpoint is not None:
                text = metrics_summary(await read_metrics(endpoint[0]))
                if self.endpoint == endpoint:
                    self._say(self.metrics_label, f"{endpoint[1]} at {endpoint[0]}: {text}")
        except MetricsUnavailableError as exc:
            if self.endpoint == endpoint:
                self._say(self.metrics_label, f"Live figures unavailable: {exc}", muted=True)
        finally:
            self._polling = None

    async def shutdown(self) -> None:
        """Stop the managed server and any install (the window calls this when it closes)."""
        await super().shutdown()
        self.metrics_timer.stop()
        if self._polling is not None:
            self._polling.cancel()
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


def _section(text: str) -> QLabel:
    label = QLabel(text)
    set_role(label, "section")
    return label


def _card(content: QWidget) -> QFrame:
    frame = QFrame()
    set_role(frame, "card")
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
    layout.addWidget(content)
    return frame


def _timer(parent: QWidget, interval_ms: int, slot: Callable[[], None]) -> QTimer:
    timer = QTimer(parent)
    timer.setInterval(interval_ms)
    timer.timeout.connect(slot)
    return timer
