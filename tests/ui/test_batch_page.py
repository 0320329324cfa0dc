"""The Batch page (the batch runner): Run only when it can run (the tooltip and a hint beside it say what is
missing), a real default address, an empty state with an example, a labelled preview, the vLLM server from the
engine host, this app's own API server as a target, and a layout that fits a small laptop in every state and both
palettes."""

from __future__ import annotations

import contextlib
import json

import pytest

from app.core.batch.input import load_batch_input
from app.services.batch.runner import BatchProgress, BatchSummary
from app.services.engines.events import VllmEndpoint
from app.ui.tasks import running_tasks
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.waiting import until

LONG_MODEL = "an-organisation-with-a-long-name/a-model-name-that-goes-on-and-on-Q4_K_M-instruct-2026"


@pytest.fixture
def make_page(qloop, qtbot):
    """``make_page()``: the runner in a frame shaped like the main window (menus, navigation, status bar) at
    1024×700."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.batch.panel import BatchPanel

    frames, pages = contextlib.ExitStack(), []

    def make() -> BatchPanel:
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        page = BatchPanel(context)
        frames.enter_context(window_frame(page))
        pages.append(page)
        return page

    yield make

    async def finish():
        await until(lambda: not running_tasks())
        for page in pages:
            await page.shutdown()
            await page.workstation.close()

    qloop.run_until_complete(finish())
    frames.close()
    for page in pages:
        page.deleteLater()


def _write(path, count=3, bad=False):
    lines = [json.dumps({"id": f"r{i}", "prompt": f"hello {i}"}) for i in range(count)]
    if bad:
        lines.insert(1, "{not json")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_run_is_offered_only_when_everything_is_set(qloop, make_page, tmp_path):
    page = make_page()
    run, hint = page.run_button, page.run_hint
    assert page.url_edit.text() == "http://127.0.0.1:8000/v1"  # a value, not a placeholder: vLLM's default
    assert not run.isEnabled()
    assert run.toolTip() == hint.text() == "Choose an input file and an output file first."
    assert hint.isVisible()  # the reason is on the page, not only in a tooltip
    page.input_edit.setText(str(_write(tmp_path / "in.jsonl")))
    assert not run.isEnabled() and run.toolTip() == hint.text() == "Choose an output file first."
    page.output_edit.setText(str(tmp_path / "out.jsonl"))
    assert run.isEnabled() and "Concurrency" in run.toolTip() and not hint.isVisible()
    page.url_edit.clear()
    assert not run.isEnabled() and hint.isVisible() and hint.text() == "Choose a server address first."
    page.workstation.host.offer_vllm(VllmEndpoint("http://127.0.0.1:8111/v1", "tiny", None, "remote"))
    assert page.server_radio.isChecked() and run.isEnabled()  # the engine host's server counts
    page.workstation.host.withdraw_vllm("remote")
    assert page.url_radio.isChecked() and not run.isEnabled()


def test_the_page_follows_the_engine_hosts_vllm_server(make_page):
    page = make_page()
    assert not page.server_radio.isEnabled() and "vLLM page" in page.server_detail.full_text()
    endpoint = VllmEndpoint("http://127.0.0.1:8111/v1", LONG_MODEL, "key", "managed")
    page.workstation.host.offer_vllm(endpoint)
    assert page.server_radio.isEnabled() and page.server_radio.isChecked()
    assert page.server_detail.full_text() == f"{LONG_MODEL} at http://127.0.0.1:8111/v1"
    assert page._endpoint() == ("http://127.0.0.1:8111/v1", "key", LONG_MODEL)
    page.workstation.host.withdraw_vllm("managed")
    assert not page.server_radio.isEnabled() and page.url_radio.isChecked()


def test_empty_state_opens_the_example(qloop, make_page):
    page = make_page()

    async def scenario():
        assert page.results.currentIndex() == 0 and page.empty_state.isVisible()
        example = page.empty_state.example.toPlainText()
        assert '"messages"' in example and "prompt" in example and "CSV" in example
        page.empty_state.open_example_button.click()
        await until(lambda: page.loaded is not None)
        path = page.workstation.paths.data_dir / "batch" / "batch-example.jsonl"
        assert page.input_edit.text() == str(path) and path.exists()
        assert page.output_edit.text() == str(path.with_name("batch-example.results.jsonl"))
        loaded = load_batch_input(path)
        assert len(loaded.requests) == 3 and not loaded.problems
        assert page.results.currentIndex() == 1
        assert page.preview_label.isVisible() and page.preview.count() == 3
        assert page.preview.item(0).text().startswith("capital · chat · What is the capital")
        assert not page.problems.isVisible() and not page.problems_label.isVisible()
        assert "Press Run to send the 3 requests" in page.results_hint.text()
        assert not page.table.isVisible() and not page.progress.isVisible()

    qloop.run_until_complete(scenario())


def test_bad_lines_are_listed_under_their_own_caption(qloop, make_page, tmp_path):
    page = make_page()

    async def scenario():
        page.input_edit.setText(str(_write(tmp_path / "in.jsonl", count=9, bad=True)))
        await page.read_input()
        assert page.problems_label.isVisible() and page.problems_label.text() == "Lines that will not run"
        assert page.problems.count() == 1 and page.problems.item(0).text().startswith("line 2: bad JSON")
        assert page.preview.count() == 6 and page.preview.item(5).text() == "… and 4 more"

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_state_fits_a_small_laptop(qloop, make_page, tmp_path, theme):
    async def scenario():
        with themed(theme):
            page = make_page()
            assert_fits(page)  # the empty state
            page.set_endpoint("http://127.0.0.1:8000/v1", "", LONG_MODEL)
            long_input = tmp_path / ("requests-" + "x" * 150 + ".jsonl")
            page.input_edit.setText(str(_write(long_input, count=12, bad=True)))
            page._input_edited()
            await until(lambda: page.loaded is not None)
            assert page.problems.isVisible() and page.preview.isVisible()
            assert_fits(page)  # loaded, with bad lines
            page._running(True)
            page._progressed(
                BatchProgress(total=12, done=3, failed=1, in_flight=8, skipped=2, output_tokens=120, elapsed_s=3.0)
            )
            page.status.setText("Running 12 requests against http://127.0.0.1:8000/v1/chat/completions…")
            page.status.show()
            assert_fits(page)  # running
            page._running(False)
            summary = BatchSummary(
                model=LONG_MODEL, count=12, done=11, failed=1, skipped=0, wall_s=3.2, output_tokens=1200,
                output_tokens_per_s=375.0, latency_ms={"p50": 100.0}, ttft_ms={"p50": 20.0}, cancelled=False,
                first_error="The server refused request r3: " + "a long reason " * 20,
            )  # fmt: skip
            page._show_summary(summary, str(tmp_path / "out.jsonl"))
            assert page.table.isVisible() and page.copy_button.isVisible()
            assert_fits(page)  # the summary
            page.window().resize(1366, 768)
            assert_fits(page)

    qloop.run_until_complete(scenario())


def test_this_apps_api_server_is_a_target_and_says_when_it_is_not_running(make_page, tmp_path):
    from app.services.engines.entries import EngineKind

    page = make_page()
    page.input_edit.setText(str(_write(tmp_path / "in.jsonl")))
    page.output_edit.setText(str(tmp_path / "out.jsonl"))
    page.app_radio.setChecked(True)
    assert not page.run_button.isEnabled()
    assert page.run_hint.text() == "Choose the API server started first."
    assert "not running" in page.app_detail.full_text() and page.open_server.isVisible()
    opened = []
    page.open_page_requested.connect(opened.append)
    page.open_server.click()
    assert opened == ["server"]
    page.set_app_server("http://127.0.0.1:8417", "sk-app")
    assert page.run_button.isEnabled() and not page.run_hint.isVisible() and not page.open_server.isVisible()
    assert page.app_detail.full_text() == "the first model it lists at http://127.0.0.1:8417"
    assert page.workstation.host.loaded(EngineKind.LLAMACPP) is None
    assert page._endpoint() == ("http://127.0.0.1:8417", "sk-app", None)
    page.set_app_server(None, None)
    assert not page.run_button.isEnabled() and page.run_hint.isVisible()


def test_a_failed_run_says_what_was_and_was_not_written():
    from app.ui.pages.batch.panel import written_note

    assert written_note(None, "/o.jsonl") == "Nothing was written to /o.jsonl."
    earlier = BatchProgress(total=3, done=0, failed=0, in_flight=0, skipped=2, output_tokens=0, elapsed_s=1.0)
    assert written_note(earlier, "/o.jsonl") == (
        "Nothing was written to /o.jsonl (2 results from an earlier run are still there)."
    )
    some = BatchProgress(total=9, done=3, failed=1, in_flight=0, skipped=0, output_tokens=9, elapsed_s=1.0)
    assert written_note(some, "/o.jsonl") == "4 results of this run were written to /o.jsonl."
