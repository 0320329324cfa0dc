"""The Batch page, offscreen, against FakeOpenAIServer (real HTTP): progress, bad lines, the summary, Cancel."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication

from app.ui.tasks import running_tasks
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.waiting import until

KEY = "batch-key"


async def _idle() -> None:
    await until(lambda: not running_tasks(), timeout=30)


@pytest.fixture
def fake():
    with FakeOpenAIServer(models=("tiny-llama",), api_key=KEY) as server:
        yield server


@pytest.fixture
def make_panel(make_standalone_panel):
    from app.ui.pages.batch.panel import BatchPanel

    return lambda: make_standalone_panel(BatchPanel, (1000, 800))


def _write_input(path: Path, count: int, max_tokens: int, bad: dict[int, str] | None = None) -> Path:
    """``count`` chat requests; ``bad`` puts a broken line at a 1-based line number."""
    good = (
        json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": max_tokens,
                    "ignore_eos": True})
        for i in range(count)
    )  # fmt: skip
    lines = list(good)
    for number, text in sorted((bad or {}).items()):
        lines.insert(number - 1, text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _table(panel) -> dict[str, str]:
    return {panel.table.item(row, 0).text(): panel.table.item(row, 1).text() for row in range(panel.table.rowCount())}


def test_batch_shows_progress_bad_lines_and_the_summary(qloop, make_panel, fake, tmp_path):
    fake.token_delay_s = 0.01
    source = _write_input(
        tmp_path / "requests.jsonl", 16, 20, bad={3: "{not json", 7: json.dumps({"id": "empty", "messages": []})}
    )

    async def scenario():
        panel = await make_panel()
        panel.set_endpoint(fake.base_url, KEY, "tiny-llama")
        assert panel.server_radio.isChecked() and "tiny-llama at" in panel.server_detail.full_text()
        panel.input_edit.setText(str(source))
        panel._input_edited()  # as when the field loses focus: fills the output name, lists bad lines
        await _idle()
        assert panel.output_edit.text() == str(tmp_path / "requests.results.jsonl")
        assert "16 requests; 2 bad lines" in panel.input_info.text()
        problems = [panel.problems.item(row).text() for row in range(panel.problems.count())]
        assert problems[0].startswith("line 3: bad JSON") and problems[1].startswith("line 7: messages")
        panel.concurrency.setValue(4)
        panel.run_button.click()
        seen: set[str] = set()
        while panel._task is not None and not panel._task.done():
            seen.add(panel.progress_label.text())
            await asyncio.sleep(0.02)
        await _idle()
        ticking = [text for text in seen if re.match(r"\d+ of 16 finished · 0 failed · [1-4] in flight", text)]
        assert len(ticking) >= 2, seen
        assert panel.progress.value() == 16 and panel.progress.maximum() == 16
        figures = _table(panel)
        assert figures["Requests"] == "16" and figures["Succeeded"] == "16" and figures["Failed"] == "0"
        assert figures["Output tokens"] == "320"
        for name in ("Latency", "TTFT"):
            for pct in ("p50", "p90", "p99"):
                assert re.fullmatch(r"[\d,]+ ms", figures[f"{name} {pct}"]), figures
        assert "Done: 16 of 16 succeeded" in panel.status.text()
        assert fake.max_in_flight <= 4
        markdown = panel.copy_markdown()
        assert markdown == QGuiApplication.clipboard().text()
        assert "| Figure | Value |" in markdown and f"| Latency p90 | {figures['Latency p90']} |" in markdown
        out = (tmp_path / "requests.results.jsonl").read_text().splitlines()
        assert sorted(json.loads(line)["id"] for line in out) == sorted(f"r{i}" for i in range(16))

    qloop.run_until_complete(scenario())


def test_cancel_keeps_the_finished_lines_in_the_output(qloop, make_panel, fake, tmp_path):
    fake.token_delay_s = 0.02
    source = _write_input(tmp_path / "many.jsonl", 30, 15)
    output = tmp_path / "out.jsonl"

    async def scenario():
        panel = await make_panel()
        panel.url_edit.setText(fake.base_url)
        panel.key_edit.setText(KEY)
        panel.input_edit.setText(str(source))
        panel.output_edit.setText(str(output))
        panel.concurrency.setValue(2)
        task = panel.run_batch()
        assert task is not None
        await until(lambda: output.exists() and len(output.read_text().splitlines()) >= 3)
        panel.cancel_button.click()
        await task
        await _idle()
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        summary = panel.summary
        assert summary is not None and summary.cancelled
        assert 3 <= len(lines) < 30
        assert len(lines) == summary.done + summary.failed
        assert all(line["error"] is None and line["output"] for line in lines)
        assert "Cancelled." in panel.status.text() and str(output) in panel.status.text()
        assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()

        fake.token_delay_s = 0.0  # Run again: only what is left runs
        await panel.run_batch()
        figures = _table(panel)
        assert figures["Requests"] == f"{30 - len(lines)} (+{len(lines)} already done)"
        assert len(output.read_text().splitlines()) == 30

    qloop.run_until_complete(scenario())


def test_server_problems_and_missing_fields_are_explained(qloop, make_panel, fake, tmp_path):
    source = _write_input(tmp_path / "few.jsonl", 3, 5)

    async def scenario():
        panel = await make_panel()
        assert not panel.run_button.isEnabled()
        assert panel.run_button.toolTip() == "Choose an input file and an output file first."
        assert panel.run_batch() is None  # called from code anyway: the same sentence, shown
        assert panel.status.text() == "Choose an input file and an output file first."
        panel.url_edit.setText(fake.base_url)
        panel.key_edit.setText("wrong")
        panel.input_edit.setText(str(source))
        panel.output_edit.setText(str(tmp_path / "out.jsonl"))
        await panel.run_batch()
        assert "refused the API key" in panel.status.text() and "check the API key" in panel.status.text()
        assert f"Nothing was written to {tmp_path / 'out.jsonl'}." in panel.status.text()
        assert "Finished results are in" not in panel.status.text()
        panel.url_edit.setText(FakeOpenAIServer.unused_url())
        await panel.run_batch()
        assert "Cannot reach the server" in panel.status.text() and "check the address" in panel.status.text()
        assert "Nothing was written" in panel.status.text()
        panel.set_endpoint(fake.base_url, KEY, "tiny-llama")
        panel.clear_endpoint()
        assert panel.url_radio.isChecked() and not panel.server_radio.isEnabled()

    qloop.run_until_complete(scenario())


def test_a_batch_runs_on_this_apps_loaded_model_through_its_api_server(qloop, make_panel, tiny_gguf, tmp_path):
    """The app as the target: the model the engine host has loaded, reached through the running API server."""
    from app.core.params import LoadParams
    from app.services.api.config import ServerConfig
    from app.services.engines.entries import EngineKind

    source = _write_input(tmp_path / "app.jsonl", 3, 4)
    output = tmp_path / "app.results.jsonl"

    async def scenario():
        panel = await make_panel()
        api = panel.workstation.api  # the workstation's server: the panel follows it, whoever starts it
        try:
            url = await api.start(ServerConfig(port=0))
            panel.app_radio.setChecked(True)
            assert panel.app_detail.full_text() == f"the first model it lists at {url}"
            await panel.workstation.host.load(str(tiny_gguf), LoadParams(n_ctx=256))
            assert panel.app_detail.full_text() == f"tiny-test-model at {url}"  # follows the loaded model
            panel.input_edit.setText(str(source))
            panel.output_edit.setText(str(output))
            assert panel.run_button.isEnabled()
            await panel.run_batch()
            assert "Done: 3 of 3 succeeded" in panel.status.text(), panel.status.text()
            assert _table(panel)["Model"] == "tiny-test-model"
            assert len(output.read_text().splitlines()) == 3
            assert api.snapshot().requests >= 3  # they went through the API server
        finally:
            await api.stop()
            await panel.workstation.host.unload(EngineKind.LLAMACPP)

    qloop.run_until_complete(scenario())


def test_a_run_goes_on_while_the_page_is_hidden_and_shows_when_it_is_back(qloop, make_window, fake, tmp_path):
    """The batch is the workstation's job: another page shown meanwhile, the run goes on; back on the Batch page
    its progress and then its summary show; a Batch page built later finds the run too."""
    from app.services.batch.job import BATCH
    from app.ui.pages.batch.panel import BatchPanel

    fake.token_delay_s = 0.02
    source = _write_input(tmp_path / "hidden.jsonl", 12, 10)
    output = tmp_path / "hidden.results.jsonl"

    async def scenario():
        window = await make_window()
        panel = window.show_page("Batch")
        jobs = window.workstation.jobs
        panel.url_edit.setText(fake.base_url)
        panel.key_edit.setText(KEY)
        panel.input_edit.setText(str(source))
        panel.output_edit.setText(str(output))
        panel.concurrency.setValue(2)
        panel.run_button.click()
        await until(lambda: jobs.running(BATCH) is not None)
        window.show_page("Chat")
        assert not panel.isVisible()
        await until(lambda: output.exists() and len(output.read_text().splitlines()) >= 2)
        later = BatchPanel(window.workstation)  # a page built while it runs shows it
        later.start()
        assert later.cancel_button.isEnabled() and not later.run_button.isEnabled()
        assert "Running 12 requests against" in later.status.text()
        later.deleteLater()
        window.show_page("Batch")
        assert panel.isVisible() and jobs.running(BATCH) is not None  # still running
        await until(lambda: re.match(r"\d+ of 12 finished", panel.progress_label.text()) is not None)
        assert panel.cancel_button.isEnabled()
        window.show_page("Chat")
        await until(lambda: jobs.running(BATCH) is None)
        window.show_page("Batch")
        assert _table(panel)["Succeeded"] == "12" and "Done: 12 of 12 succeeded" in panel.status.text()
        assert len(output.read_text().splitlines()) == 12

    qloop.run_until_complete(scenario())


def test_a_run_cancelled_through_the_job_service_stops_and_keeps_its_results(qloop, make_panel, fake, tmp_path):
    from app.services.batch.job import BATCH
    from app.services.jobs.events import JobState

    fake.token_delay_s = 0.02
    source = _write_input(tmp_path / "stop.jsonl", 30, 15)
    output = tmp_path / "stop.results.jsonl"

    async def scenario():
        panel = await make_panel()
        panel.url_edit.setText(fake.base_url)
        panel.key_edit.setText(KEY)
        panel.input_edit.setText(str(source))
        panel.output_edit.setText(str(output))
        panel.concurrency.setValue(2)
        task = panel.run_batch()
        await until(lambda: output.exists() and len(output.read_text().splitlines()) >= 2)
        jobs = panel.workstation.jobs
        running = jobs.running(BATCH)
        assert running is not None and jobs.cancel(running.id)  # not the page's button: the service
        await task
        finished = jobs.job(running.id)
        assert finished is not None and finished.state is JobState.CANCELLED
        assert finished.result.cancelled and finished.result.done + finished.result.failed < 30
        assert "Cancelled." in panel.status.text() and panel.run_button.isEnabled()
        assert len(output.read_text().splitlines()) == finished.result.done + finished.result.failed

    qloop.run_until_complete(scenario())


def test_closing_the_workstation_cancels_a_running_batch(qloop, make_panel, fake, tmp_path):
    from app.services.batch.job import BATCH

    fake.token_delay_s = 0.05
    source = _write_input(tmp_path / "close.jsonl", 30, 20)
    output = tmp_path / "close.results.jsonl"

    async def scenario():
        panel = await make_panel()
        panel.url_edit.setText(fake.base_url)
        panel.key_edit.setText(KEY)
        panel.input_edit.setText(str(source))
        panel.output_edit.setText(str(output))
        panel.concurrency.setValue(2)
        panel.run_batch()
        jobs = panel.workstation.jobs
        await until(lambda: jobs.running(BATCH) is not None)
        job_id = jobs.running(BATCH).id
        await panel.workstation.close()
        finished = jobs.job(job_id)
        assert finished is not None and finished.cancelled and jobs.running(BATCH) is None
        assert "Cancelled." in panel.status.text()

    qloop.run_until_complete(scenario())
