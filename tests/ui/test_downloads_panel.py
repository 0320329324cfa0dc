"""Models → Downloads, offscreen: the queue view over real downloads from the local Hub server."""

from __future__ import annotations

import json

import pytest

from app.services.downloads.hub import HubService
from app.services.downloads.jobs import DONE, FAILED, PAUSED
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub
from tests.support.waiting import until

BIG = "big-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo("org/Big-GGUF", {BIG: random_bytes(3_000_000, 1)}, tags=["gguf"]))
        server.add(Repo("org/Gated", {"m-Q8_0.gguf": b"g" * 100}, gated=True, tags=["gguf"]))
        yield server


@pytest.fixture
def make_panel(make_standalone_panel):
    from app.ui.pages.models.downloads import DownloadsPanel

    async def make():
        panel = await make_standalone_panel(DownloadsPanel, (1000, 500))
        await panel.start()
        return panel

    return make


def plan(repo_id: str, name: str):
    service = HubService()
    return service.plan_download(service.repo_detail(repo_id, with_card=False), files=[name])


async def add(panel, job) -> None:
    await panel.workstation.downloads.add(job)  # as Discover queues: through the workstation's service


def _shown_actions(panel) -> list[str]:
    return [b.text() for b in panel.buttons if b.isVisible() and b.isEnabled()]


def _row_texts(panel, row: int) -> list[str]:
    return [panel.table.item(row, c).text() for c in range(panel.table.columnCount())]


def test_a_download_shows_progress_then_done_and_announces_its_path(qloop, make_panel, hub):
    from app.services.downloads.events import DownloadFinished

    async def scenario():
        panel = await make_panel()
        assert panel.empty.isVisible() and panel.table.rowCount() == 0
        completed = []
        panel.workstation.downloads.subscribe(
            lambda event: completed.append(event.local_path) if isinstance(event, DownloadFinished) else None
        )
        hub.throttle_bytes_per_s = 3_000_000
        await add(panel, plan("org/Big-GGUF", BIG))
        await until(lambda: panel.views and panel.views[0].done_bytes > 300_000)
        texts = _row_texts(panel, 0)
        assert texts[0] == f"org/Big-GGUF: {BIG}" and texts[1] == "Downloading" and texts[5].endswith(" / 2.9 MiB")
        assert panel.table.cellWidget(0, 2).value() > 0
        hub.throttle_bytes_per_s = None
        await until(lambda: panel.views[0].state == DONE)
        await until(lambda: completed)
        assert completed == [panel.views[0].local_path] and completed[0].endswith(BIG)
        assert _row_texts(panel, 0)[1] == "Done" and panel.table.cellWidget(0, 2).value() == 1000

    qloop.run_until_complete(scenario())


def test_pause_resume_remove_with_the_buttons_and_the_queue_file(qloop, make_panel, hub, isolated_home):
    async def scenario():
        panel = await make_panel()
        hub.throttle_bytes_per_s = 1_000_000
        await add(panel, plan("org/Big-GGUF", BIG))
        await until(lambda: panel.views and panel.views[0].done_bytes > 100_000)
        panel.table.selectRow(0)
        assert _shown_actions(panel) == ["Pause", "Cancel"]  # only what applies to a running job
        panel.pause_button.click()
        await until(lambda: panel.views[0].state == PAUSED)
        assert _shown_actions(panel) == ["Resume", "Cancel", "Remove from list"]
        saved = json.loads((isolated_home / "data" / "downloads.json").read_text(encoding="utf-8"))
        assert saved["jobs"][0]["state"] == "paused"
        hub.throttle_bytes_per_s = None
        panel.resume_button.click()
        await until(lambda: panel.views[0].state == DONE)
        panel.table.selectRow(0)
        assert _shown_actions(panel) == ["Remove from list", "Show in folder"]
        assert panel.detail.text() == f"Saved as {BIG}" and panel.detail.toolTip().endswith(BIG)
        panel.remove_button.click()
        await until(lambda: not panel.views)
        assert panel.empty.isVisible()

    qloop.run_until_complete(scenario())


def test_a_gated_failure_shows_why_and_offers_retry(qloop, make_panel, hub):
    async def scenario():
        panel = await make_panel()
        await add(panel, plan("org/Gated", "m-Q8_0.gguf"))
        await until(lambda: panel.views and panel.views[0].state == FAILED)
        panel.table.selectRow(0)
        assert _row_texts(panel, 0)[1] == "Failed"
        assert "accept its license" in panel.detail.text() and "token" in panel.detail.text()
        assert _shown_actions(panel) == ["Retry", "Cancel", "Remove from list"]

    qloop.run_until_complete(scenario())


def test_an_unfinished_queue_continues_when_the_panel_starts_again(qloop, make_panel, hub):
    async def scenario():
        first = await make_panel()
        hub.throttle_bytes_per_s = 1_000_000
        await add(first, plan("org/Big-GGUF", BIG))
        await until(lambda: first.views and first.views[0].done_bytes > 100_000)
        await first.shutdown()
        await first.workstation.downloads.close()  # the app quits mid-download
        hub.throttle_bytes_per_s = None
        second = await make_panel()
        await until(lambda: second.views and second.views[0].state == DONE)
        starts = [e.start for e in hub.log if e.path == BIG and e.method == "GET"]
        assert max(starts) > 0  # the restart resumed from the partial file

    qloop.run_until_complete(scenario())


def test_the_window_has_discover_and_downloads_tabs(qloop, make_window):
    from PySide6.QtWidgets import QTabWidget

    async def scenario():
        window = await make_window()
        window.open_path("models/discover")
        tabs = next(t for t in window.findChildren(QTabWidget) if t.indexOf(window.discover_panel) >= 0)
        names = [tabs.tabText(i) for i in range(tabs.count())]
        assert names.index("Downloads") == names.index("Discover") + 1
        assert tabs.indexOf(window.downloads_panel) == names.index("Downloads")

    qloop.run_until_complete(scenario())


def test_a_queue_file_that_cannot_be_read_or_set_aside_still_gives_a_working_panel(
    qloop, make_panel, hub, isolated_home
):
    data = isolated_home / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "downloads.json").write_text("{not json", encoding="utf-8")
    (data / "downloads.bad").mkdir()
    (data / "downloads.bad" / "keep").write_text("x")  # a non-empty folder where the broken file would go

    async def scenario():
        panel = await make_panel()
        assert panel.snapshot.started and panel.views == [] and panel.empty.isVisible()
        await add(panel, plan("org/Big-GGUF", BIG))  # queueing from Discover still works
        await until(lambda: panel.views and panel.views[0].state == DONE)

    qloop.run_until_complete(scenario())


def test_a_queue_file_that_cannot_be_written_is_shown_not_only_logged(qloop, make_panel, hub, isolated_home):
    async def scenario():
        panel = await make_panel()
        queue_file = isolated_home / "data" / "downloads.json"
        queue_file.unlink(missing_ok=True)
        queue_file.mkdir()  # os.replace onto a folder fails, as a full or read-only disk would
        await add(panel, plan("org/Big-GGUF", BIG))
        await until(lambda: panel.save_problem_label.isVisible())
        assert "could not be saved" in panel.save_problem_label.text()
        await until(lambda: panel.views and panel.views[0].state == DONE)
        queue_file.rmdir()
        panel.table.selectRow(0)
        panel.remove_button.click()  # the next save works again: the notice goes away
        await until(lambda: not panel.save_problem_label.isVisible())
        assert queue_file.is_file()

    qloop.run_until_complete(scenario())


def test_an_empty_queue_offers_discover_and_no_idle_buttons(qloop, make_panel, hub):
    async def scenario():
        panel = await make_panel()
        assert panel.empty.isVisible() and panel.empty.title.text() == "No downloads yet"
        assert not panel.actions_bar.isVisible() and _shown_actions(panel) == []
        asked: list[str] = []
        panel.open_page_requested.connect(asked.append)
        panel.empty.button("Discover models").click()
        assert asked == ["models/discover"]
        hub.throttle_bytes_per_s = 1_000_000
        await add(panel, plan("org/Big-GGUF", BIG))
        await until(lambda: panel.views and panel.table.isVisible())
        assert not panel.actions_bar.isVisible()  # a job, but none chosen: still no buttons
        panel.table.selectRow(0)
        assert panel.actions_bar.isVisible() and "Cancel" in _shown_actions(panel)
        panel.table.clearSelection()
        assert not panel.actions_bar.isVisible()
        hub.throttle_bytes_per_s = None
        await until(lambda: panel.views[0].state == DONE)

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_downloads_fit_a_small_laptop_in_every_state(qloop, make_panel, hub, theme):
    from PySide6.QtWidgets import QTabWidget

    from tests.support.layout import assert_fits
    from tests.support.page_frame import themed, window_frame

    long_name = "a-very-long-file-name-" * 6 + "Q4_K_M.gguf"
    hub.add(Repo("org/" + "Long-Repository-" * 4 + "GGUF", {long_name: random_bytes(200_000, 3)}, tags=["gguf"]))

    async def scenario():
        with themed(theme):
            panel = await make_panel()
            tabs = QTabWidget()
            tabs.addTab(panel, "Downloads")
            panel.show()
            with window_frame(tabs) as frame:
                assert panel.empty.isVisible()
                assert_fits(frame)  # empty
                await add(panel, plan("org/Gated", "m-Q8_0.gguf"))
                await add(panel, plan("org/" + "Long-Repository-" * 4 + "GGUF", long_name))
                await add(panel, plan("org/Big-GGUF", BIG))
                await until(lambda: len(panel.views) == 3 and any(v.state == FAILED for v in panel.views))
                panel.table.selectRow(next(i for i, v in enumerate(panel.views) if v.state == FAILED))  # its reason
                assert panel.actions_bar.isVisible()
                assert_fits(frame)
                frame.resize(1366, 768)
                assert_fits(frame)
                await until(lambda: all(v.state in (DONE, FAILED) for v in panel.views))
            panel.setParent(None)

    qloop.run_until_complete(scenario())
