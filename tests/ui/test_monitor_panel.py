"""The Monitor page, offscreen: a view of the workstation's monitor service, whose real sampler thread runs on a
fake NVML (no GPU here) and a recorded vLLM page; in the window, on the real NVML."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import shiboken6
from PySide6.QtGui import QPalette

from app.backends.protocol import KvUsage
from app.services.engines.events import VllmEndpoint
from app.services.monitor.engine_processes import EngineTarget, vllm_target
from app.services.monitor.events import ExporterChanged
from app.services.monitor.nvml import NvmlReader
from app.services.monitor.sampler import MonitorSampler
from app.services.monitor.service import MonitorService
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakePynvml
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.waiting import until

METRICS = (Path(__file__).parents[1] / "data" / "vllm_metrics_real.txt").read_text()
KV_USAGE = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.007813453790745939'
KV_FULL = METRICS.replace(KV_USAGE, KV_USAGE.replace("0.007813453790745939", "0.95"))
GIB = 1024**3
CPU_LINE = "RAM and CPU are shown; llama.cpp runs on the CPU"


def sampler_factory(fake: FakePynvml, page: str = METRICS):
    def make(targets):
        return MonitorSampler(nvml=NvmlReader(fake), targets=targets, metrics_fetch=lambda u: page)

    return make


def fast_monitor(workstation, fake: FakePynvml, targets=None, page: str = METRICS) -> MonitorService:
    """The workstation's monitor on a fake NVML, sampling at its fastest (set before anything asks for it)."""
    workstation.update_settings(monitor_interval_s=0.1)
    workstation.monitor = MonitorService.for_workstation(
        workstation, targets=targets, sampler_factory=sampler_factory(fake, page)
    )
    return workstation.monitor


def engines() -> list[EngineTarget]:
    me = os.getpid()
    return [
        EngineTarget("llamacpp", "llama.cpp: tiny", True, me, KvUsage(120, 512, {0: 120})),
        vllm_target("http://127.0.0.1:8000", label="vLLM: tiny-llama"),
    ]


@pytest.fixture
def make_panel(make_standalone_panel):
    from app.ui.pages.monitor.panel import MonitorPanel

    async def make(fake: FakePynvml, targets=engines, page: str = METRICS):
        def build(workstation):
            fast_monitor(workstation, fake, targets, page)
            return MonitorPanel(workstation)

        panel = await make_standalone_panel(build, (1100, 900))
        await panel.start()
        return panel

    return make


def test_gpu_cards_engines_kv_grid_processes_and_charts(qloop, make_panel) -> None:
    fake = FakePynvml(
        [FakeGpu(used_bytes=20 * GIB, compute=[(os.getpid(), 3 * GIB), (4321, GIB)])], process_names={4321: "blender"}
    )

    async def scenario():
        panel = await make_panel(fake)
        await until(lambda: len(panel.history) >= 3, 10)
        await until(lambda: not panel._redraw_pending)
        panel.redraw()
        system = panel.system_view
        assert not system.no_gpu_label.isVisible()
        (card,) = system.cards
        assert card.title() == "GPU 0 · NVIDIA H200"
        assert card.memory_bar.text().startswith("VRAM 20.0 GiB / 133.9 GiB")
        assert "power 74 W / 700 W" in card.details.text() and "SM 1980 MHz" in card.details.text()
        assert system.ram_bar.text().startswith("RAM ") and system.cpu_bar.text().startswith("CPU ")
        view = panel.engines_view
        assert "llama.cpp: tiny" in view.summary.text() and "VRAM 3.0 GiB" in view.summary.text()
        assert "seq 0: 120 / 512 cells" in view.llama_bar.text()
        grid = view.kv_grid
        assert grid.isVisible() and grid.total_blocks == 8192 and grid.cells <= 2000
        assert "each cell = 5 blocks" in grid.caption()
        caption = view.kv_caption.text()
        assert "block size 128 tokens" in caption and "running 32" in caption and "preemptions 0" in caption
        table = panel.process_table
        rows = {table.item(r, 0).text(): table.item(r, 4).text() for r in range(table.rowCount())}
        assert rows == {str(os.getpid()): "llama.cpp (ours)", "4321": "other"}
        names = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}
        assert names["4321"] == "blender"
        assert panel.process_table.isVisible() and panel.processes_title.isVisible()
        assert panel.charts["memory"].series[0][0] == "VRAM" and panel.charts["memory"].series[0][1]
        assert panel.charts["requests"].latest_text().startswith("running 32")
        assert not panel.alert_list.isVisible() and not panel.alerts_title.isVisible()

    qloop.run_until_complete(scenario())


def test_no_gpu_shows_the_reason_plus_ram_and_cpu(qloop, make_panel) -> None:
    fake = FakePynvml([FakeGpu()], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)

    async def scenario():
        panel = await make_panel(fake, targets=lambda: [])
        await until(lambda: panel.latest is not None, 10)
        panel.redraw()
        label = panel.system_view.no_gpu_label
        assert label.isVisible()
        assert label.text() == f"No NVIDIA GPU: NVML library not found — {CPU_LINE}"
        assert label.toolTip().startswith("No NVIDIA driver found")  # NVML's whole reason
        assert panel.system_view.cards == [] and not panel.system_view.has_gpu
        assert not panel.process_table.isVisible() and not panel.processes_title.isVisible()  # collapsed
        assert panel.system_view.ram_bar.value() > 0
        assert [name for name, _points in panel.charts["memory"].series] == ["RAM", "engines"]  # no VRAM line
        empty = panel.engines_view.empty
        assert empty.isVisible() and not panel.engines_view.running.isVisible()
        assert empty.title_label.text() == "No engine running"
        assert "memory, KV cache and tokens/s show here" in empty.text_label.text()
        assert not panel.engines_view.kv_grid.isVisible()

    qloop.run_until_complete(scenario())


def test_exports_png_and_csv(qloop, make_panel, tmp_path) -> None:
    async def scenario():
        panel = await make_panel(FakePynvml([FakeGpu()]))
        await until(lambda: len(panel.history) >= 2, 10)
        await panel.export_png(tmp_path / "charts.png")
        assert (tmp_path / "charts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "Saved the charts" in panel.export_label.text()
        await panel.export_csv(tmp_path / "data.csv")
        lines = (tmp_path / "data.csv").read_text().splitlines()
        assert lines[0].startswith("time_s,gpu_used_bytes,ram_used_bytes") and len(lines) >= 3
        await panel.export_csv(tmp_path / "missing-folder" / "data.csv")
        assert panel.export_label.text().startswith("Could not save the data")

    qloop.run_until_complete(scenario())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_prometheus_endpoint_opt_in_and_port_in_use(qloop, make_panel) -> None:
    async def scenario():
        panel = await make_panel(FakePynvml([FakeGpu()]))
        settings = panel.workstation.settings
        await until(lambda: panel.latest is not None, 10)
        port = _free_port()
        panel.prometheus_port.setValue(port)
        panel.prometheus_check.setChecked(True)  # the setting; the monitor follows it
        await until(lambda: panel.exporter_state.running, 10)
        assert panel.exporter_state.url == f"http://127.0.0.1:{port}/metrics" and not panel.prometheus_port.isEnabled()
        assert (settings.prometheus_enabled, settings.prometheus_port) == (True, port)
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
        assert 'llmws_gpu_memory_used_bytes{gpu="0",name="NVIDIA H200"} 1.073741824e+09' in page
        assert "llmws_kv_cache_usage_ratio" in page and "llmws_ram_used_bytes" in page
        panel.prometheus_check.setChecked(False)
        await until(lambda: panel.export_label.text() == "Prometheus endpoint stopped.", 10)
        assert not panel.exporter_state.running and not settings.prometheus_enabled
        tries = []
        panel.follow(panel.monitor.subscribe(lambda e: tries.append(e) if isinstance(e, ExporterChanged) else None))
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            panel.prometheus_port.setValue(port)
            panel.prometheus_check.setChecked(True)
            await until(lambda: len(tries) == 1 and not panel.prometheus_check.isChecked(), 10)
            assert f"could not listen on 127.0.0.1:{port}" in panel.export_label.text()
            assert not panel.exporter_state.running and settings.prometheus_enabled  # the choice stays
            panel.prometheus_check.setChecked(True)  # the same choice again: tried again
            await until(lambda: len(tries) == 2 and not panel.prometheus_check.isChecked(), 10)
        panel.prometheus_check.setChecked(True)  # the port is free now
        await until(lambda: panel.exporter_state.running and panel.prometheus_check.isChecked(), 10)

    qloop.run_until_complete(scenario())


def test_the_page_owns_nothing_closing_the_workstation_stops_the_sampler(qloop, make_panel) -> None:
    async def scenario():
        panel = await make_panel(FakePynvml([FakeGpu()]))
        monitor = panel.monitor
        sampler = monitor.sampler
        assert sampler is not None and sampler.running
        await panel.shutdown()
        before = len(monitor.snapshot().samples)
        await until(lambda: len(monitor.snapshot().samples) > before, 10)  # the page gone, the monitor samples on
        await panel.workstation.close()
        assert not sampler.running and monitor.sampler is None
        count = len(monitor.snapshot().samples)
        await until(lambda: True)
        assert len(monitor.snapshot().samples) == count

    qloop.run_until_complete(scenario())


@contextmanager
def metrics_server(page: str):
    """A local HTTP server answering ``/metrics`` with ``page``: a vLLM server as the monitor reads it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_alerts_reach_the_status_bar_with_the_monitor_page_never_opened(qloop, make_window) -> None:
    """The window starts the monitor a few seconds after it shows; a vLLM server whose KV cache is 95% full raises
    an alert that the status bar shows, though the Monitor page was never built."""

    async def scenario():
        window = await make_window()
        label = window.status.alert_label
        assert not label.isVisible()
        with metrics_server(KV_FULL) as url:
            window.workstation.host.offer_vllm(VllmEndpoint(url, "tiny-llama", None, "remote"))
            await until(lambda: label.isVisible(), 30)  # the real sampler, real NVML, the page's /metrics
            window.workstation.host.withdraw_vllm("remote")
        assert label.text().startswith("⚠ ") and "vLLM: tiny-llama: KV cache 95% full" in label.toolTip()
        assert "monitor" not in window._widgets
        await until(lambda: not label.isVisible(), 30)  # the server withdrawn: its alert clears

    qloop.run_until_complete(scenario())


def test_the_page_opened_late_shows_the_history_gathered_before_and_keeps_it(qloop, make_window) -> None:
    async def scenario():
        window = await make_window()
        monitor = window.workstation.monitor
        await monitor.start()  # as the window does a few seconds after it shows
        await until(lambda: len(monitor.snapshot().samples) >= 3, 30)
        assert "monitor" not in window._widgets
        first = monitor.snapshot().samples[0].taken_at_s
        panel = window.open_path("monitor")
        assert len(panel.history) >= 3 and panel.history.series["ram_used_bytes"].points()[0][0] == first
        await until(lambda: not panel._redraw_pending)
        assert panel.system_view.ram_bar.text().startswith("RAM ")
        window.open_path("chat")
        seen = len(panel.history)
        await until(lambda: len(monitor.snapshot().samples) > seen + 1, 30)
        assert window.open_path("monitor") is panel  # reopened: the same page, its history kept and grown
        assert len(panel.history) > seen and panel.history.series["ram_used_bytes"].points()[0][0] == first

    qloop.run_until_complete(scenario())


def test_kv_grid_aggregation_and_chart_colours(qapp) -> None:
    from app.ui.pages.monitor.kv_grid import grid_cells
    from app.ui.widgets.timeseries_chart import series_colors

    assert grid_cells(100, 50) == (100, 50, 1)
    assert grid_cells(8192, 64) == (1639, 13, 5)
    assert grid_cells(100_000, 100_000) == (2000, 2000, 50)
    assert grid_cells(0, 0) == (0, 0, 1)
    shown = {}
    for name in ("light", "dark"):
        with themed(name):
            palette = qapp.palette()
            shown[name] = (series_colors(palette)[:4], palette.color(QPalette.ColorRole.Base))
    for name, (colors, base) in shown.items():
        hues = [c.hslHue() for c in colors]
        for i, a in enumerate(hues):  # four hues apart from each other: no two blues
            for b in hues[i + 1 :]:
                assert min(abs(a - b), 360 - abs(a - b)) >= 25, (name, [c.name() for c in colors])
        for color in colors:  # each reads on the chart's background
            assert abs(color.lightness() - base.lightness()) >= 70, (name, color.name(), base.name())
    assert all(c.lightness() > 128 for c in shown["dark"][0])
    assert [c.name() for c in shown["light"][0]] != [c.name() for c in shown["dark"][0]]


def test_a_page_deleted_without_shutdown_stops_following_and_the_monitor_samples_on(qloop, qtbot) -> None:
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.monitor.panel import MonitorPanel

    async def scenario():
        workstation = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        monitor = fast_monitor(workstation, FakePynvml([]), lambda: [])
        try:
            panel = MonitorPanel(workstation)
            await panel.start()
            listeners = monitor._events.listeners
            panel.deleteLater()
            await until(lambda: not shiboken6.isValid(panel), 5)
            assert monitor._events.listeners == listeners - 1
            before = len(monitor.snapshot().samples)
            await until(lambda: len(monitor.snapshot().samples) > before + 1, 10)
        finally:
            await workstation.close()

    qloop.run_until_complete(scenario())


def test_interval_and_prometheus_come_from_settings_and_follow_them(qloop, make_standalone_panel) -> None:
    from app.ui.pages.monitor.panel import MonitorPanel

    port = _free_port()

    def build(workstation):
        workstation.update_settings(prometheus_enabled=True, prometheus_port=port)
        monitor = fast_monitor(workstation, FakePynvml([]), lambda: [])
        workstation.update_settings(monitor_interval_s=0.25)
        assert monitor.sampler is None  # nothing starts before the window or the page asks
        return MonitorPanel(workstation)

    async def scenario():
        panel = await make_standalone_panel(build)
        await panel.start()
        monitor, workstation = panel.monitor, panel.workstation
        assert monitor.sampler is not None and monitor.sampler.interval_s == 0.25
        assert panel.status_label.text() == "Sampling every 0.25 s."
        await until(lambda: panel.exporter_state.running, 10)
        assert panel.exporter_state.url == f"http://127.0.0.1:{port}/metrics" and panel.prometheus_check.isChecked()
        workstation.update_settings(monitor_interval_s=0.5)  # the Settings page's road
        assert monitor.sampler.interval_s == 0.5 and panel.status_label.text() == "Sampling every 0.5 s."
        panel.prometheus_check.setChecked(False)
        await until(lambda: not panel.exporter_state.running, 10)
        await workstation.settings_saved()
        saved = (workstation.paths.settings_file).read_text()
        assert '"prometheus_enabled": false' in saved and f'"prometheus_port": {port}' in saved

    qloop.run_until_complete(scenario())


def test_real_llamacpp_worker_cells_reach_the_engines_view(qloop, make_panel, tiny_gguf) -> None:
    """A snapshot taken by the real sampler from a real llama.cpp worker after a chat turn, drawn by the views."""
    from app.backends.llamacpp.backend import LlamaCppBackend
    from app.core.params import LoadParams, SamplingParams
    from app.services.monitor.engine_processes import llamacpp_target

    backend = LlamaCppBackend()

    async def scenario():
        try:
            await backend.load(str(tiny_gguf), LoadParams(n_ctx=512))
            prompt = [{"role": "user", "content": "Hello there, tell me about the weather today. " * 4}]
            async for _delta in backend.stream_chat(prompt, SamplingParams(max_tokens=16, temperature=0.0, seed=1)):
                pass
            kv = backend.kv_usage()
            assert kv is not None and kv.used_cells > 20
            panel = await make_panel(FakePynvml([]), targets=lambda: [t for t in [llamacpp_target(backend)] if t])
            await until(lambda: panel.latest is not None and panel.latest.engines, 10)
            panel.redraw()
            (engine,) = panel.latest.engines
            assert engine.pids[0] == backend.worker_pid and engine.kv is not None
            assert engine.kv.used_cells == kv.used_cells and engine.kv.total_cells == 512
            view = panel.engines_view
            bar = view.llama_bar
            assert bar.isVisible() and bar.value() == round(100 * kv.used_cells / 512) > 0
            assert f"seq 0: {kv.used_cells:,} / 512 cells (n_ctx)" in bar.text()
            assert "llama.cpp: " in view.summary.text() and "KV " in view.summary.text()
            assert not view.kv_grid.isVisible()  # no vLLM here
        finally:
            await backend.close()

    qloop.run_until_complete(scenario())


@pytest.mark.slow
def test_real_vllm_under_load_fills_the_kv_grid(qloop, make_standalone_panel, vllm_server) -> None:
    """The real sampler reading the session vLLM server's /metrics while long completions run: the grid and
    caption show the used blocks and running requests."""
    import threading

    from app.ui.pages.monitor.panel import MonitorPanel

    url, model = vllm_server.base_url, vllm_server.served_model_name
    stop = threading.Event()

    def complete() -> None:
        body = {"model": model, "prompt": "hello " * 20, "max_tokens": 400, "ignore_eos": True}  # max_model_len 512
        with httpx.Client(timeout=120, trust_env=False, headers=vllm_server.headers) as client:
            while not stop.is_set():
                try:
                    client.post(f"{url}/v1/completions", json=body)
                except httpx.HTTPError:  # the session's server stopped under a request still running
                    return

    def real_sampler(targets):
        return MonitorSampler(nvml=NvmlReader(FakePynvml([])), targets=targets)

    def build(workstation):
        targets = lambda: [vllm_target(url, pid=vllm_server.server.pid, label="vLLM: tiny")]  # noqa: E731
        workstation.update_settings(monitor_interval_s=0.2)
        workstation.monitor = MonitorService.for_workstation(workstation, targets=targets, sampler_factory=real_sampler)
        return MonitorPanel(workstation)

    async def scenario():
        panel = await make_standalone_panel(build, (1100, 900))
        await panel.start()

        def busy() -> bool:
            engine = panel.latest.engines[0] if panel.latest and panel.latest.engines else None
            return bool(engine and engine.kv and engine.kv.used_blocks and engine.kv.requests_running)

        await until(busy, 60)
        panel.redraw()
        kv = panel.latest.engines[0].kv
        grid = panel.engines_view.kv_grid
        assert grid.isVisible() and grid.total_blocks == kv.num_blocks
        assert grid.used_blocks == kv.used_blocks > 0 and grid.used_cells > 0
        assert f"running {kv.requests_running}" in panel.engines_view.kv_caption.text()

    workers = [threading.Thread(target=complete, daemon=True) for _ in range(6)]
    for worker in workers:
        worker.start()
    try:
        qloop.run_until_complete(scenario())
    finally:
        stop.set()


def test_a_remote_vllm_server_never_gets_a_local_pid() -> None:
    from app.backends.llamacpp.backend import LlamaCppBackend
    from app.services.engines.events import VllmEndpoint
    from app.services.engines.host import EngineHost
    from app.services.monitor.engine_processes import host_targets

    host = EngineHost(LlamaCppBackend())  # no worker: no llama.cpp target
    host.offer_vllm(VllmEndpoint("https://gpu-box.lan:8000", "big", "key", "remote"))
    (target,) = host_targets(host)
    assert (target.metrics_url, target.root_pid, target.label) == ("https://gpu-box.lan:8000", None, "vLLM: big")
    host.withdraw_vllm("remote")
    host.offer_vllm(VllmEndpoint("http://127.0.0.1:8000", "tiny-llama", None, "managed", 4242))
    (target,) = host_targets(host)
    assert (target.root_pid, target.label) == (4242, "vLLM: tiny-llama")


def test_save_dialogs_are_deleted_when_closed(qloop, make_panel) -> None:
    from PySide6.QtWidgets import QFileDialog

    async def scenario():
        panel = await make_panel(FakePynvml([]), targets=lambda: [])
        for button in (panel.png_button, panel.csv_button, panel.png_button):
            button.click()
            (dialog,) = panel.findChildren(QFileDialog)
            dialog.reject()
            await until(lambda: not panel.findChildren(QFileDialog), 5)  # not one more per click

    qloop.run_until_complete(scenario())


def test_chart_leaves_gaps_for_missing_values(qtbot) -> None:
    from app.ui.widgets.timeseries_chart import ChartWidget, gap_segments, series_colors

    points = [(0.0, 1.0), (1.0, 2.0), (2.0, None), (3.0, None), (4.0, 3.0), (5.0, None), (6.0, 4.0), (7.0, 5.0)]
    assert gap_segments(points) == [[(0.0, 1.0), (1.0, 2.0)], [(4.0, 3.0)], [(6.0, 4.0), (7.0, 5.0)]]
    chart = ChartWidget("tok/s", lambda v: f"{v:.0f}", window_s=100.0)
    qtbot.addWidget(chart)
    chart.resize(400, 200)
    chart.y_max = 2.0
    chart.set_series([("x", [(float(t), None if 30 < t < 70 else 1.0) for t in range(101)])], 100.0)
    assert chart.latest_text() == "x 1"
    image = chart.grab().toImage()
    line = series_colors(chart.palette())[0]
    plot = chart.plot_rect()

    def line_pixels(t: float) -> int:
        x = round(chart.x_at(t))
        near = 0
        for y in range(int(plot.top()) + 2, int(plot.bottom()) - 1):
            c = image.pixelColor(x, y)
            if abs(c.red() - line.red()) + abs(c.green() - line.green()) + abs(c.blue() - line.blue()) < 60:
                near += 1
        return near

    assert line_pixels(15) > 0 and line_pixels(85) > 0
    assert line_pixels(50) == 0  # the gap is not bridged by a line


def test_axis_ticks_are_round_in_the_figures_unit() -> None:
    from app.ui.widgets.chart_axes import (
        AXES,
        byte_ticks,
        nice_step,
        number_label,
        time_label,
        time_step,
        time_ticks,
        value_ticks,
    )

    assert value_ticks(58) == [0, 20, 40, 60]
    assert value_ticks(1430) == [0, 500, 1000, 1500]
    assert value_ticks(0.37) == [0, 0.1, 0.2, 0.3, 0.4]
    assert value_ticks(0) == [0, 1]  # nothing yet: a unit axis, not a division by zero
    assert value_ticks(3, whole=True) == [0, 1, 2, 3] and value_ticks(0.4, whole=True) == [0, 1]
    assert nice_step(float("nan")) == 1.0
    _make, bytes_label = AXES["bytes"]
    assert [bytes_label(v) for v in byte_ticks(6.1 * GIB)] == ["0 B", "2.0 GiB", "4.0 GiB", "6.0 GiB", "8.0 GiB"]
    assert [bytes_label(v) for v in byte_ticks(300 * 2**20)] == ["0 B", "100.0 MiB", "200.0 MiB", "300.0 MiB"]
    assert [AXES["fraction"][1](v) for v in AXES["fraction"][0](0.3, 4)] == ["0%", "25%", "50%", "75%", "100%"]
    assert [number_label(v) for v in value_ticks(20400)] == ["0", "10,000", "20,000", "30,000"]
    assert time_step(120, 4) == 30 and time_step(3600, 5) == 900 and time_step(30 * 3600, 5) == 21600
    now = 1_700_000_047.0  # 22:14:07 UTC
    ticks, step = time_ticks(now - 120, now, 4)
    assert step == 30 and all(t % 30 == 0 for t in ticks) and now - 120 <= ticks[0] and ticks[-1] <= now
    assert len(ticks) == 4
    labels = [time_label(t, step) for t in ticks]
    assert all(len(label) == 8 and label.count(":") == 2 for label in labels)  # HH:MM:SS
    assert len(time_label(now, 300)) == 5  # HH:MM on a step of minutes


def test_chart_axes_and_hover_show_the_value_at_the_pointer(qtbot) -> None:
    from PySide6.QtCore import QPoint
    from PySide6.QtTest import QTest

    from app.core.units import format_bytes
    from app.ui.widgets.chart_axes import time_label
    from app.ui.widgets.timeseries_chart import ChartWidget

    now = 1_700_000_040.0
    chart = ChartWidget("Memory", format_bytes, window_s=120.0, axis="bytes")
    qtbot.addWidget(chart)
    chart.resize(480, 220)
    chart.show()
    ram = [(now - 120 + t, (2 + t / 60) * GIB) for t in range(0, 121, 2)]  # 2 GiB rising to 4 GiB
    engines = [(t, None if t < now - 30 else 0.5 * GIB) for t, _v in ram]  # started 30 s ago
    chart.set_series([("RAM", ram), ("engines", engines)], now)
    assert chart.y_labels() == ["0 B", "1.0 GiB", "2.0 GiB", "3.0 GiB", "4.0 GiB"]
    ticks, step = chart.x_ticks()
    assert step == 30 and chart.x_labels() == [time_label(t, 30) for t in ticks]
    assert chart.hover is None and chart.hover_text() == ""
    at = now - 60  # RAM 3 GiB there; engines not yet running
    QTest.mouseMove(chart, QPoint(round(chart.x_at(at)), chart.height() // 2))
    assert chart.hover is not None and abs(chart.hover.t_s - at) < 1
    assert chart.hover_text() == f"{time_label(chart.hover.t_s, 1)} · RAM 3.0 GiB · engines —"
    hovered = chart.grab().toImage()
    QTest.mouseMove(chart, QPoint(round(chart.x_at(now - 10)), chart.height() // 2))
    assert chart.hover_text().endswith("· engines 512.0 MiB")
    QTest.mouseMove(chart, QPoint(2, 2))  # over the y labels, outside the plot
    assert chart.hover is None
    assert chart.grab().toImage() != hovered  # the crosshair and its box are drawn only while hovering


def test_no_gpu_lines_say_why_in_nvmls_words() -> None:
    from app.ui.pages.monitor.views import no_gpu_line
    from tests.support.fake_pynvml import NVML_ERROR_DRIVER_NOT_LOADED

    reasons = {
        NVML_ERROR_LIBRARY_NOT_FOUND: "No NVIDIA GPU: NVML library not found",
        NVML_ERROR_DRIVER_NOT_LOADED: "No NVIDIA GPU: NVML: Driver Not Loaded",
    }
    for code, start in reasons.items():
        readout = NvmlReader(FakePynvml([FakeGpu()], init_error=code)).read()
        line = no_gpu_line(readout.unavailable_reason)
        assert line == f"{start} — {CPU_LINE}"
    no_gpus = NvmlReader(FakePynvml([])).read()
    assert no_gpu_line(no_gpus.unavailable_reason).startswith("No NVIDIA GPU: the NVIDIA driver reports none — ")
    permission = no_gpu_line("No permission to query the NVIDIA driver (NVML: Insufficient Permissions). Check …")
    assert permission == "GPU readings unavailable: NVML: Insufficient Permissions — RAM and CPU are shown"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_monitor_fits_a_small_laptop_in_every_state(qloop, make_panel, theme) -> None:
    """No GPU (collapsed to one line), GPUs with processes, engines running, alerts: the window around the page
    stays within 1024×700."""
    gpus = FakePynvml(
        [FakeGpu(used_bytes=20 * GIB, compute=[(os.getpid(), 3 * GIB)]), FakeGpu(name="NVIDIA H200 NVL")],
        process_names={os.getpid(): "python3 -m app.backends.llamacpp.worker --with-a-long-command-line"},
    )

    async def scenario():
        with themed(theme):
            no_gpu = await make_panel(FakePynvml([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND), targets=lambda: [])
            with window_frame(no_gpu) as frame:
                await until(lambda: no_gpu.latest is not None, 10)
                no_gpu.redraw()
                assert no_gpu.system_view.no_gpu_row.isVisible() and no_gpu.engines_view.empty.isVisible()
                assert_fits(frame)
            panel = await make_panel(gpus)
            with window_frame(panel) as frame:
                await until(lambda: panel.latest is not None and len(panel.latest.engines) == 2, 10)
                panel.redraw()
                assert len(panel.system_view.cards) == 2 and panel.engines_view.running.isVisible()
                assert panel.process_table.isVisible()
                assert_fits(frame)
            full = FakePynvml([FakeGpu(used_bytes=133 * GIB, compute=[(os.getpid(), 3 * GIB)])])
            alerting = await make_panel(full, page=KV_FULL)  # VRAM and the KV cache nearly full: two alerts
            with window_frame(alerting) as frame:
                await until(lambda: alerting.alert_list.isVisible() and alerting.alert_list.count() == 2, 10)
                assert alerting.alerts_title.isVisible()
                assert_fits(frame)

    qloop.run_until_complete(scenario())


def test_the_empty_engines_card_opens_chat_and_the_window_fits(qloop, make_window) -> None:
    async def scenario():
        window = await make_window()
        panel = window.open_path("monitor")
        assert panel is window.monitor_panel
        await until(lambda: panel.latest is not None, 15)  # the real sampler, real NVML
        panel.redraw()
        if not panel.latest.gpus:  # this machine: the GPU parts are one line
            assert panel.system_view.no_gpu_row.isVisible() and not panel.process_table.isVisible()
        assert_fits(window)
        panel.engines_view.empty.open_chat_button.click()
        assert window.pages.currentWidget() is window.chat_panel

    qloop.run_until_complete(scenario())
