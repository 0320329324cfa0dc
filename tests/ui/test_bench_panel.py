"""The Bench page, offscreen: a real llama.cpp bench fills the table and charts, copies, saves, compares, cancels."""

from __future__ import annotations

import psutil
import pytest
from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QGuiApplication

from app.core.bench.stats import BenchRow
from app.ui.tasks import running_tasks
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.processes import children_running
from tests.support.waiting import until


async def _idle() -> None:
    await until(lambda: not running_tasks(), timeout=60)


@pytest.fixture
def make_panel(make_standalone_panel):
    from app.ui.pages.bench.panel import BenchPanel

    return lambda: make_standalone_panel(BenchPanel, (1200, 800))


def _small(panel, model: str, concurrency: str = "1,2", requests: int = 3, max_tokens: int = 8) -> None:
    panel.select_engine("llamacpp")
    panel.model_edit.setText(model)
    panel.concurrency_edit.setText(concurrency)
    panel.requests.setValue(requests)
    panel.max_tokens.setValue(max_tokens)
    panel.warmup.setValue(0)


def _worker_children() -> list[psutil.Process]:
    return children_running("app.backends.llamacpp.worker")


def test_llamacpp_bench_fills_table_charts_and_saved_runs(qloop, make_panel, long_context_gguf):
    async def scenario():
        panel = await make_panel()
        _small(panel, str(long_context_gguf))
        assert not panel.copy_markdown_button.isEnabled()
        panel.run_button.click()
        assert not panel.run_button.isEnabled() and panel.cancel_button.isEnabled()
        await panel._task
        await _idle()
        assert panel.table.rowCount() == 2
        headers = [panel.table.horizontalHeaderItem(c).text() for c in range(panel.table.columnCount())]
        cells = [{h: panel.table.item(r, c).text() for c, h in enumerate(headers)} for r in range(2)]
        assert [c["Concurrency"] for c in cells] == ["1", "2"]
        assert all(c["Engine"] == "llamacpp" and c["Errors"] == "0" and c["Output tokens"] == "24" for c in cells)
        assert all(c["Peak memory"].endswith("(rss)") and c["Max sustained"] == "1" for c in cells)
        assert "one stream" in cells[1]["Note"]
        assert panel.progress.value() == 1000
        assert "Saved as" in panel.status.text()
        assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()  # the finished run's table
        markdown = panel.copy_markdown()
        assert markdown == QGuiApplication.clipboard().text()
        lines = markdown.strip().splitlines()
        assert lines[0].startswith("| Engine | Concurrency | Output tok/s |") and len(lines) == 4
        assert lines[2].startswith("| llamacpp | 1 | ") and lines[3].startswith("| llamacpp | 2 | ")
        csv = panel.copy_csv()
        assert csv.splitlines()[0].startswith("backend,concurrency,") and len(csv.splitlines()) == 3
        (throughput,) = panel.throughput_chart.series()
        assert throughput[0] == "llamacpp" and [c for c, _v in throughput[2]] == [1, 2]
        assert all(v > 0 for _c, v in throughput[2])
        assert [label for label, _s, _p in panel.latency_chart.series()] == ["llamacpp p50", "llamacpp p90"]
        assert panel.saved_runs.list.count() == 1 and "llamacpp" in panel.saved_runs.list.item(0).text()
        assert not _worker_children()

    qloop.run_until_complete(scenario())


def test_chart_draws_lines_only_with_rows(qloop, qtbot):
    from app.ui.pages.bench.chart import BenchChart

    chart = BenchChart("latency")
    qtbot.addWidget(chart)
    chart.resize(400, 240)
    empty = chart.grab().toImage()
    rows = [BenchRow("vllm", c, requests=4, latency_p50_ms=10.0 * c, latency_p90_ms=15.0 * c) for c in (1, 8, 32)]
    chart.set_rows([*rows, BenchRow("ollama", 1, skipped="not running")])
    drawn = chart.grab().toImage()
    assert drawn != empty
    assert [label for label, _s, _p in chart.series()] == ["vllm p50", "vllm p90"]  # skipped rows are not drawn
    with pytest.raises(ValueError):
        BenchChart("pie")


def test_chart_axes_legend_and_hover(qtbot):
    from PySide6.QtCore import QPoint
    from PySide6.QtTest import QTest

    from app.ui.pages.bench.chart import BenchChart

    chart = BenchChart("throughput")
    qtbot.addWidget(chart)
    chart.resize(420, 260)
    chart.show()
    rows = [BenchRow("vllm", c, requests=4, output_tokens_per_s=r) for c, r in ((1, 45.1), (8, 260.0), (64, 610.0))]
    chart.set_rows([*rows, BenchRow("llamacpp", 1, requests=4, output_tokens_per_s=41.5)])
    assert chart.y_labels() == ["0", "200", "400", "600", "800"] and chart.levels() == [1, 8, 64]
    assert chart.backends() == ["vllm", "llamacpp"]
    QTest.mouseMove(chart, QPoint(round(chart.x_at(8)) + 3, chart.height() // 2))
    assert chart.hover_level == 8 and chart.hover_text() == "concurrency 8 · vllm 260 tok/s"
    QTest.mouseMove(chart, QPoint(round(chart.x_at(1)), chart.height() // 2))
    assert chart.hover_text() == "concurrency 1 · vllm 45 tok/s · llamacpp 42 tok/s"


def test_missing_fields_and_unreachable_engines_are_explained(qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.select_engine("llamacpp")
        panel.model_edit.clear()
        assert panel.start_run() is None
        assert panel.status.text() == "Choose a .gguf file to bench."
        panel.model_edit.setText("/tmp/x.gguf")
        panel.concurrency_edit.setText("1,eight")
        assert panel.start_run() is None and "Concurrency must be a list" in panel.status.text()
        panel.select_engine("vllm")
        panel.endpoint_edit.clear()
        panel.concurrency_edit.setText("1")
        assert panel.start_run() is None and "vLLM server's address" in panel.status.text()
        panel.select_engine("ollama")
        panel.model_edit.setText("llama3.2")
        panel.endpoint_edit.setText(FakeOllama.unused_host())
        await panel.start_run()
        assert panel.status.text().startswith("Skipped: ") and "Ollama is not running" in panel.status.text()
        assert "skipped: " in panel.table.item(0, panel.table.columnCount() - 1).text()
        assert panel.saved_runs.list.count() == 0  # nothing measured, nothing saved

    qloop.run_until_complete(scenario())


def test_vllm_server_from_the_vllm_page_is_offered(qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.set_vllm_server("http://127.0.0.1:8123", "tiny-llama", "k3y")
        panel.select_engine("vllm")
        assert panel.endpoint_edit.text() == "http://127.0.0.1:8123"
        assert panel.model_edit.text() == "tiny-llama" and panel.key_edit.text() == "k3y"
        assert "tiny-llama at http://127.0.0.1:8123" in panel.vllm_note.text()
        panel.clear_vllm_server()
        assert "Start a vLLM server" in panel.vllm_note.text()

    qloop.run_until_complete(scenario())


def test_compare_two_saved_runs(qloop, make_panel):
    def run(rate: float) -> dict:
        row = BenchRow("vllm", 8, requests=4, output_tokens=40, output_tokens_per_s=rate, latency_p90_ms=50.0)
        return {"target": {"backend": "vllm", "model": "tiny"}, "rows": [row.to_dict()], "machine": {}}

    async def scenario():
        from app.services.bench.store import BenchStore
        from app.services.paths import app_paths

        store = BenchStore(app_paths().data_dir / "bench")
        first, second = store.save(run(100.0)), store.save(run(300.0))
        panel = await make_panel()
        saved = panel.saved_runs
        await _idle()  # the list is read when the page is first shown
        assert saved.list.count() == 2 and not saved.compare_button.isEnabled()
        for row in range(2):
            saved.list.selectionModel().select(
                saved.list.model().index(row, 0), QItemSelectionModel.SelectionFlag.Select
            )
        assert saved.compare_button.isEnabled() and not saved.show_button.isEnabled()
        ratios = await saved.compare(first, second)
        assert ratios[0]["output_tokens_per_s_ratio"] == pytest.approx(3.0)
        assert "vllm ×8: tok/s 3.00×, latency p90 1.00×" in saved.compare_label.text()
        saved.list.clearSelection()
        saved.list.item(0).setSelected(True)
        saved.show_selected()
        await _idle()
        assert panel.table.rowCount() == 1 and panel.table.item(0, 0).text() == "vllm"
        assert panel.status.text().startswith("Saved run ")
        assert await saved.load("nope") is None  # reported on the page, not raised
        assert "no saved bench run 'nope'" in panel.status.text()

    qloop.run_until_complete(scenario())


def test_cancel_stops_the_run_and_the_worker(qloop, make_panel, long_context_gguf):
    async def scenario():
        panel = await make_panel()
        _small(panel, str(long_context_gguf), concurrency="1", requests=500, max_tokens=64)
        task = panel.start_run()
        assert task is not None
        await until(lambda: "measuring" in panel.status.text(), timeout=60)
        panel.cancel_button.click()
        await task
        await _idle()
        assert panel.status.text() == "Cancelled: nothing was saved."
        assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
        await until(lambda: not _worker_children(), timeout=60)
        assert panel.saved_runs.list.count() == 0

    qloop.run_until_complete(scenario())


def test_showing_a_saved_run_during_a_run_keeps_cancel(qloop, make_panel):
    async def scenario():
        from app.services.bench.store import BenchStore
        from app.services.paths import app_paths

        saved = BenchRow("vllm", 8, requests=4, output_tokens=40, output_tokens_per_s=50.0)
        run_id = BenchStore(app_paths().data_dir / "bench").save(
            {"target": {"backend": "vllm", "model": "old"}, "rows": [saved.to_dict()], "machine": {}}
        )
        with FakeOpenAIServer(models=("tiny",)) as fake:
            fake.token_delay_s = 0.02
            panel = await make_panel()
            panel.select_engine("vllm")
            panel.endpoint_edit.setText(fake.base_url)
            panel.model_edit.setText("tiny")
            panel.concurrency_edit.setText("1")
            panel.requests.setValue(200)
            panel.max_tokens.setValue(50)
            panel.warmup.setValue(0)
            task = panel.start_run()
            assert task is not None
            await until(lambda: "measuring" in panel.status.text(), timeout=30)
            assert await panel.saved_runs.load(run_id) is not None
            assert panel.table.rowCount() == 1 and panel.table.item(0, 1).text() == "8"  # the saved run shows
            assert panel.cancel_button.isEnabled() and not panel.run_button.isEnabled()  # the run still runs
            panel.cancel_button.click()
            await task
            await _idle()
            assert panel.status.text() == "Cancelled: nothing was saved."
            assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
            await panel.saved_runs.load(run_id)  # with no run going, the buttons stay as they are
            assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()

    qloop.run_until_complete(scenario())


def test_main_window_has_the_bench_page(qloop, make_window):
    from app.services.engines.events import VllmEndpoint

    async def scenario():
        window = await make_window()
        names = [window.nav.item(i).text() for i in range(window.nav.count())]
        assert names.index("Bench") == names.index("Batch") + 1
        window.workstation.host.offer_vllm(VllmEndpoint("http://127.0.0.1:8124", "served", None, "remote"))
        assert "served at http://127.0.0.1:8124" in window.bench_panel.vllm_note.text()
        window.workstation.host.withdraw_vllm("remote")
        assert "Start a vLLM server" in window.bench_panel.vllm_note.text()

    qloop.run_until_complete(scenario())


def test_parallel_sequences_checkbox_runs_llamacpp_parallel(qloop, make_panel, long_context_gguf):
    async def scenario():
        panel = await make_panel()
        _small(panel, str(long_context_gguf), concurrency="2", requests=2, max_tokens=4)
        assert panel.parallel_check.isVisibleTo(panel) and not panel.parallel_check.isChecked()
        panel.parallel_check.setChecked(True)
        target, _workload = panel._target_and_workload()
        assert target.parallel
        panel.run_button.click()
        await panel._task
        await _idle()
        assert panel.table.rowCount() == 1
        headers = [panel.table.horizontalHeaderItem(c).text() for c in range(panel.table.columnCount())]
        cells = {h: panel.table.item(0, c).text() for c, h in enumerate(headers)}
        assert cells["Engine"] == "llamacpp-parallel" and cells["Errors"] == "0" and cells["Output tokens"] == "8"
        assert cells["Max sustained"] == "2" and "continuous batching" in cells["Note"]
        panel.select_engine("vllm")
        assert not panel.parallel_check.isVisibleTo(panel)
        panel.endpoint_edit.setText("http://127.0.0.1:9")
        assert not panel._target_and_workload()[0].parallel  # ticked, but only llama.cpp has it

    qloop.run_until_complete(scenario())


def test_each_engine_gets_its_own_default_concurrency(qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        levels = panel.concurrency_edit
        assert panel.kind() == "llamacpp" and levels.text() == "1"  # one stream: its clients would only queue
        panel.parallel_check.setChecked(True)
        assert levels.text() == "1,2,4"  # N sequences in one context
        panel.parallel_check.setChecked(False)
        assert levels.text() == "1"
        panel.select_engine("vllm")
        assert levels.text() == "1,8,16,32,64"
        panel.select_engine("ollama")
        assert levels.text() == "1,2,4"
        levels.setText("3, 5")  # the user's own levels stay through engine changes
        panel.select_engine("vllm")
        assert levels.text() == "3, 5"

    qloop.run_until_complete(scenario())


def test_the_loaded_model_is_filled_in_and_followed(qloop, make_panel, tiny_gguf, tiny_gguf_no_template):
    from app.core.params import LoadParams
    from app.services.engines.entries import EngineKind

    async def scenario():
        panel = await make_panel()
        host = panel.workstation.host
        empty = panel.empty_state
        assert panel.model_edit.text() == "" and panel.body.currentWidget() is empty
        assert empty.button.text() == "Choose a GGUF file…"  # nothing loaded yet: the next step is a file
        await host.load(str(tiny_gguf), LoadParams(n_ctx=256))  # the chat's engine, through the host
        assert panel.model_edit.text() == str(tiny_gguf)
        assert empty.title.text() == "Run a first benchmark" and empty.button.text() == "Run a first benchmark"
        assert empty.text.text().startswith("Measure tiny-chatml.gguf on llama.cpp: output tokens/s and latency")
        size = f"{panel.requests.value()} requests of up to {panel.max_tokens.value()} tokens"
        assert f"concurrency 1, {size}" in empty.text.text()
        await host.load(str(tiny_gguf_no_template), LoadParams(n_ctx=256))
        assert panel.model_edit.text() == str(tiny_gguf_no_template)  # the page filled it: it follows the host
        panel.model_edit.setText("/models/mine.gguf")
        await host.unload(EngineKind.LLAMACPP)
        await host.load(str(tiny_gguf), LoadParams(n_ctx=256))
        assert panel.model_edit.text() == "/models/mine.gguf"  # typed by the user: kept
        panel.select_engine("vllm")
        assert panel.model_edit.text() == ""  # each engine keeps its own model
        panel.select_engine("llamacpp")
        assert panel.model_edit.text() == "/models/mine.gguf"
        await host.unload(EngineKind.LLAMACPP)

    qloop.run_until_complete(scenario())


def test_the_empty_state_runs_a_first_benchmark(qloop, make_panel, long_context_gguf):
    async def scenario():
        panel = await make_panel()
        _small(panel, str(long_context_gguf), concurrency="1", requests=2, max_tokens=4)
        panel.empty_state.button.click()
        assert panel._task is not None and panel.empty_state.title.text() == "Measuring…"
        assert not panel.empty_state.button.isVisible()
        await panel._task
        await _idle()
        assert panel.body.currentWidget() is panel.results and panel.table.rowCount() == 1
        assert panel.saved_runs.isVisible()  # the run was saved: the list shows

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_page_fits_a_small_laptop_in_every_state(qloop, make_panel, theme):
    """Empty, running, results and saved runs: the window around the page stays within 1024×700."""
    from app.services.bench.store import BenchStore
    from app.services.paths import app_paths

    def result(backend: str, rates) -> dict:
        rows = [BenchRow(backend, c, requests=64, output_tokens=8192, output_tokens_per_s=r, latency_p50_ms=9.0 * c,
                         latency_p90_ms=12.0 * c) for c, r in rates]  # fmt: skip
        return {"target": {"backend": backend, "model": "a-long-model-name-" * 4}, "rows": [r.to_dict() for r in rows],
                "machine": {}}  # fmt: skip

    async def scenario():
        with themed(theme):
            store = BenchStore(app_paths().data_dir / "bench")
            store.save(result("llamacpp", [(1, 41.5)]))
            panel = await make_panel()
            with window_frame(panel) as frame, FakeOpenAIServer(models=("tiny",)) as fake:
                await _idle()
                assert panel.body.currentWidget() is panel.empty_state and panel.saved_runs.isVisible()
                assert_fits(frame)
                fake.token_delay_s = 0.02
                panel.select_engine("vllm")
                panel.endpoint_edit.setText(fake.base_url)
                panel.model_edit.setText("tiny")
                panel.requests.setValue(200)
                panel.warmup.setValue(0)
                task = panel.start_run()
                await until(lambda: "measuring" in panel.status.text(), timeout=30)
                assert panel.progress.isVisible()
                assert_fits(frame)
                panel.cancel_run()
                await task
                vllm = result("vllm", [(1, 45.0), (8, 260.0), (16, 410.0), (32, 555.0), (64, 610.0)])
                panel.show_result(vllm)
                assert panel.body.currentWidget() is panel.results
                assert_fits(frame)
                store.save(vllm)
                await panel.saved_runs.refresh()
                for row in range(2):
                    panel.saved_runs.list.item(row).setSelected(True)
                await panel.saved_runs.compare(*sorted(panel.saved_runs.selected_ids()))
                assert panel.saved_runs.compare_label.isVisible()
                assert_fits(frame)

    qloop.run_until_complete(scenario())


def test_the_window_with_the_bench_page_fits(qloop, make_window):
    async def scenario():
        window = await make_window()
        assert window.open_path("bench") is window.bench_panel
        assert_fits(window)

    qloop.run_until_complete(scenario())


def test_the_workload_fits_the_engine_and_the_machine_and_its_time_shows_before_run(qloop, make_panel, tiny_gguf):
    from app.core.bench.workload import BenchWorkload
    from app.ui.pages.bench.sizing import FULL, SMALL, estimated_seconds, guessed_tokens_per_s

    async def scenario():
        panel = await make_panel()
        await until(lambda: panel._has_gpu is not None)  # this machine read (off the Qt thread) when shown
        panel._has_gpu = False  # as on a machine without a GPU
        panel._propose_size()
        assert (panel.requests.value(), panel.max_tokens.value()) == (SMALL.requests, SMALL.max_tokens)
        panel.model_edit.setText(str(tiny_gguf))
        await until(lambda: panel.estimate_label.text().startswith("About "))
        assert "(a guess from the model's size): 12 requests of up to 64 tokens at concurrency 1." in (
            panel.estimate_label.text()
        )
        measured = BenchRow("llamacpp", 1, requests=12, output_tokens=768, output_tokens_per_s=16.0)
        panel.show_result({"target": {"backend": "llamacpp", "model": str(tiny_gguf)}, "rows": [measured.to_dict()]})
        assert panel.estimate_label.text().startswith("About 55 s (from the last run of this model):")  # 14 × 4 s
        panel.select_engine("vllm")  # batches: the full workload
        assert (panel.requests.value(), panel.max_tokens.value()) == (FULL.requests, FULL.max_tokens)
        assert panel.estimate_label.text() == "64 requests of up to 128 tokens at concurrency 1, 8, 16, 32, 64."
        panel.select_engine("llamacpp")
        assert panel.requests.value() == SMALL.requests
        panel.requests.setValue(30)  # the user's own size stays through engine and machine changes
        panel.select_engine("vllm")
        panel._has_gpu = True
        panel._propose_size()
        assert panel.requests.value() == 30
        panel.concurrency_edit.setText("1,x")
        assert "x" in panel.estimate_label.text()  # what is wrong, before Run

    qloop.run_until_complete(scenario())
    small_cpu_model = guessed_tokens_per_s(300 * 2**20, has_gpu=False)  # a 270M-parameter model at Q8
    small = BenchWorkload(concurrencies=(1,), requests=12, max_tokens=64)
    minute = estimated_seconds(small, "llamacpp", small_cpu_model)
    assert 20 < minute < 90  # "about a minute" on a CPU
    old_default = estimated_seconds(BenchWorkload(concurrencies=(1,)), "llamacpp", small_cpu_model)
    assert old_default > 3 * minute
