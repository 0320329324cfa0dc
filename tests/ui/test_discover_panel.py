"""Models → Discover, offscreen: search, repo detail with per-file fits verdicts, and Download, against the local
Hub server through the real huggingface_hub client."""

from __future__ import annotations

import pytest
import shiboken6

from app.core.units import format_bytes
from app.services.downloads.jobs import DONE
from app.ui.tasks import running_tasks
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub
from tests.support.waiting import until


@pytest.fixture
def hub(monkeypatch, tmp_path, tiny_gguf):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(
            Repo(
                "org/Tiny-GGUF",
                {
                    "tiny-F16.gguf": tiny_gguf.read_bytes(),
                    "broken-Q4_K_M.gguf": random_bytes(5000, 1),
                    "README.md": b"---\nlicense: mit\n---\n# Tiny model\nSome *card* text.\n",
                },
                tags=["gguf"],
                downloads=20,
                license="mit",
            )
        )
        server.add(Repo("org/Tiny-HF", {"config.json": b"{}", "model.safetensors": b"s" * 3000}, tags=["safetensors"]))
        server.add(Repo("org/Gated-GGUF", {"g-Q8_0.gguf": b"g" * 10}, gated=True, tags=["gguf"], downloads=1))
        yield server


@pytest.fixture
def make_panels(qloop, qtbot):
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.models.discover import DiscoverPanel
    from app.ui.pages.models.downloads import DownloadsPanel

    made = []

    async def make():
        workstation = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        downloads = DownloadsPanel(workstation)  # a view of the queue Discover adds to (workstation.downloads)
        discover = DiscoverPanel(workstation)
        for widget in (downloads, discover):
            qtbot.addWidget(widget)
        discover.resize(1200, 700)
        discover.show()
        await downloads.start()
        made.append((workstation, downloads, discover))
        return discover, downloads

    yield make

    async def finish():
        await until(lambda: not running_tasks(), timeout=60)
        for workstation, *pages in made:
            for page in pages:
                if shiboken6.isValid(page):
                    await page.shutdown()
            await workstation.close()

    qloop.run_until_complete(finish())


def _column(table, column: int = 0) -> list[str]:
    return [table.item(row, column).text() for row in range(table.rowCount())]


def test_search_filter_and_sort(qloop, make_panels, hub):
    async def scenario():
        discover, _ = await make_panels()
        discover.query.setText("org")
        await discover.search()
        assert _column(discover.results_table) == ["org/Tiny-GGUF", "org/Gated-GGUF", "org/Tiny-HF"]
        assert _column(discover.results_table, 4) == ["", "gated", ""]
        discover.format_combo.setCurrentIndex(2)  # safetensors
        await discover.search()
        assert _column(discover.results_table) == ["org/Tiny-HF"] and discover.status.text() == "1 model."
        discover.query.setText("nothing-like-this")
        await discover.search()
        assert discover.results_table.rowCount() == 0 and discover.lists.currentWidget() is discover.no_results
        assert discover.no_results.isVisible() and discover.no_results.title.text() == "No models found"
        discover.no_results.button("Show the picks").click()
        assert discover.lists.currentWidget() is discover.picks_table and not discover.back_button.isVisible()

    qloop.run_until_complete(scenario())


def test_repo_detail_shows_quants_card_and_a_fits_verdict_per_file(qloop, make_panels, hub):
    async def scenario():
        discover, _ = await make_panels()
        discover.query.setText("tiny-gguf")
        await discover.search()
        discover.results_table.selectRow(0)  # opens the repository
        await until(lambda: discover.detail is not None)
        assert "License mit" in discover.meta.text() and "open" in discover.meta.text()
        assert "Tiny model" in discover.card.toPlainText() and "license:" not in discover.card.toPlainText()
        assert _column(discover.files_table, 1) == ["Q4_K_M", "F16"]
        await until(lambda: "estimating…" not in _column(discover.files_table, 3))
        verdicts = dict(zip(_column(discover.files_table, 1), _column(discover.files_table, 3), strict=True))
        assert verdicts["F16"].startswith("Fits · ")  # short; the sentence and the advice are its tooltip
        f16 = next(c.key for c in discover.candidates() if c.quant == "F16")
        assert discover.verdict_tips[f16].startswith("Fits: needs ")
        assert verdicts["Q4_K_M"].startswith("no estimate: ")  # random bytes are not a GGUF
        assert not discover.download_button.isEnabled() and not discover.folder_button.isEnabled()

    qloop.run_until_complete(scenario())


def test_download_buttons_queue_a_file_and_an_hf_folder(qloop, make_panels, hub):
    async def scenario():
        discover, downloads = await make_panels()
        await discover.open_repo("org/Tiny-GGUF")
        discover.files_table.selectRow(_column(discover.files_table, 1).index("F16"))
        assert discover.download_button.isEnabled()
        await discover.download_selected()
        await until(lambda: downloads.views and downloads.views[0].state == DONE)
        assert downloads.views[0].local_path.endswith("tiny-F16.gguf")
        await discover.open_repo("org/Tiny-HF")
        assert discover.folder_button.isEnabled() and discover.files_table.rowCount() == 0
        await discover.download_folder()
        await until(lambda: len(downloads.views) == 2 and downloads.views[1].state == DONE)
        assert downloads.views[1].title == "org/Tiny-HF (2 files)"

    qloop.run_until_complete(scenario())


def test_gated_repo_says_what_to_do(qloop, make_panels, hub):
    async def scenario():
        discover, _downloads = await make_panels()
        await discover.open_repo("org/Gated-GGUF")
        assert "gated: accept the license on the Hub page and set a token" in discover.meta.text()
        await discover.open_repo("org/Missing")
        assert "org/Missing was not found" in discover.meta.text()

    qloop.run_until_complete(scenario())


def _odd_gguf(path):
    """A well-formed GGUF whose block count is text: its shape metadata is malformed."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("odd")
    writer.add_string("llama.block_count", "two")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def test_an_unexpected_estimate_error_is_shown_and_the_other_rows_go_on(
    qloop, make_panels, hub, tmp_path, monkeypatch, tiny_gguf, caplog
):
    import dataclasses

    from app.core.memory.fit import MachineMemory
    from app.services.downloads.hub import HubService
    from app.services.monitor import machine_memory

    files = {"a-odd-Q2_K.gguf": _odd_gguf(tmp_path / "odd.gguf"), "tiny-F16.gguf": tiny_gguf.read_bytes()}
    hub.add(Repo("org/Odd-GGUF", files, tags=["gguf"]))
    no_gpu = MachineMemory((), (), (), 16 << 30, 12 << 30, "No NVIDIA driver found.")  # NVML: no GPU here
    monkeypatch.setattr(machine_memory, "read_machine_memory", lambda: no_gpu)
    real_estimate = HubService.estimate

    def estimate_with_a_bug(self, detail, candidate, *args, **kwargs):
        if "odd" in candidate.key:  # fault injection: an estimator bug this app does not know about yet
            raise RuntimeError("estimator bug")
        return real_estimate(self, detail, candidate, *args, **kwargs)

    monkeypatch.setattr(HubService, "estimate", estimate_with_a_bug)

    async def scenario():
        discover, _ = await make_panels()
        settings = discover.workstation.settings
        settings.load = dataclasses.replace(settings.load, n_gpu_layers=-1)  # every layer on a GPU that is not there
        await discover.open_repo("org/Odd-GGUF")
        assert _column(discover.files_table, 1) == ["Q2_K", "F16"]  # the odd file is estimated first
        await until(lambda: "estimating…" not in _column(discover.files_table, 3))
        verdicts = dict(zip(_column(discover.files_table, 1), _column(discover.files_table, 3), strict=True))
        assert verdicts["Q2_K"] == "no estimate: estimator bug (see View → Log)"
        tip = discover.verdict_tips[next(c.key for c in discover.candidates() if c.quant == "F16")]
        assert verdicts["F16"].startswith("Fits · ") and verdicts["F16"].endswith("MiB")
        assert tip.startswith("Fits: needs ") and "of 12.0 GiB system RAM" in tip
        assert tip.endswith("(no GPU here: everything runs from RAM).")
        assert "estimating a-odd-Q2_K.gguf of org/Odd-GGUF failed" in caplog.text

    qloop.run_until_complete(scenario())


def test_queueing_that_fails_says_why_and_never_queued(qloop, make_panels, hub, monkeypatch):
    from app.services.downloads.queue import DownloadQueue

    def refuse(manager, job):
        raise OSError(28, "No space left on device")

    async def scenario():
        discover, downloads = await make_panels()
        await discover.open_repo("org/Tiny-GGUF")
        discover.files_table.selectRow(_column(discover.files_table, 1).index("F16"))
        monkeypatch.setattr(DownloadQueue, "add", refuse)  # the queue file's disk fails as the job is added
        await discover.download_selected()
        status = discover.notice.text()
        assert status.startswith("Could not queue org/Tiny-GGUF: tiny-F16.gguf: ") and "No space left" in status
        assert "Queued" not in status and downloads.views == []

    qloop.run_until_complete(scenario())


def test_malformed_shape_metadata_says_so_in_the_row(qloop, make_panels, hub, tmp_path, tiny_gguf):
    files = {"a-odd-Q2_K.gguf": _odd_gguf(tmp_path / "odd.gguf"), "tiny-F16.gguf": tiny_gguf.read_bytes()}
    hub.add(Repo("org/Odd-GGUF", files, tags=["gguf"]))

    async def scenario():
        discover, _ = await make_panels()
        await discover.open_repo("org/Odd-GGUF")
        await until(lambda: "estimating…" not in _column(discover.files_table, 3))
        verdicts = dict(zip(_column(discover.files_table, 1), _column(discover.files_table, 3), strict=True))
        assert verdicts["Q2_K"].startswith("no estimate: ") and "malformed shape metadata" in verdicts["Q2_K"]
        assert verdicts["F16"].startswith(("Fits", "Tight", "Won't fit"))

    qloop.run_until_complete(scenario())


# --- picks for this machine, an unreachable Hub, the layout -------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """The Hub at a closed local port: every request is refused at once."""
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return url


@pytest.fixture
def small_machine(monkeypatch):
    """A machine without a GPU and 6 GiB of free RAM (NVML and /proc answer so)."""
    from app.core.memory.fit import MachineMemory
    from app.services.monitor import machine_memory

    machine = MachineMemory((), (), (), 8 << 30, 6 << 30, "No NVIDIA driver found.")
    monkeypatch.setattr(machine_memory, "read_machine_memory", lambda: machine)
    return machine


def test_picks_open_offline_ranked_for_this_machine(qloop, make_panels, offline, small_machine):
    from app.core.memory.fit import fit_verdict
    from app.services.downloads.picks import estimate_settings, load_picks

    async def scenario():
        discover, _ = await make_panels()
        await until(lambda: discover.hub_reachable is False)  # the refresh gave up on the unreachable Hub
        shipped = load_picks().picks
        names = _column(discover.picks_table)
        assert sorted(names) == sorted(p.name for p in shipped) and len(names) >= 8
        settings = estimate_settings(discover.workstation.settings.load, small_machine)
        states = [fit_verdict(p.header(), settings, small_machine).state for p in shipped]
        assert "fits" in states and "wont_fit" in states  # 6 GiB: the small ones fit, the 12B does not
        ranks = [{"fits": 0, "tight": 1, "wont_fit": 2}[v.verdict.state] for v in discover.pick_verdicts]
        assert ranks == sorted(ranks)  # the ones that fit come first
        fits = _column(discover.picks_table, 2)
        assert fits[0].startswith("Fits · ") and fits[-1].startswith("Won't fit · ")  # the sentence is the tooltip
        assert discover.picks_table.item(0, 2).toolTip() == discover.pick_verdicts[0].verdict.summary
        status = discover.status.text()
        assert "fit this machine (no GPU: judged against RAM)" in status and "The Hub cannot be reached" in status
        from app.ui.pages.models.discover import month_words

        assert f"Picks as of {month_words(load_picks().as_of)}." in status  # how current the list is, said
        assert month_words("2026-12") == "December 2026" and month_words("soon") == "soon"
        assert not discover.notice.isVisible()  # a calm line, not an error banner

    qloop.run_until_complete(scenario())


def test_an_offline_search_fails_and_says_so(qloop, make_panels, offline):
    async def scenario():
        discover, _ = await make_panels()
        discover.query.setText("qwen gguf")
        await discover.search()
        text = discover.notice.text()
        assert text.startswith(f"Cannot reach the Hub at {offline} (ConnectError)") and "check the connection" in text
        assert discover.notice.notices()[0].action_text == "Try again" and discover.search_button.isEnabled()
        assert discover.lists.currentWidget() is discover.picks_table  # the picks stay

    qloop.run_until_complete(scenario())


def test_a_pick_offline_shows_its_figures_and_download_says_the_hub_is_away(qloop, make_panels, offline, small_machine):
    async def scenario():
        discover, downloads = await make_panels()
        await until(lambda: discover.hub_reachable is False, timeout=60)
        discover.picks_table.selectRow(0)
        pick = discover.current_pick
        assert pick is not None and discover.title.text() == pick.name
        assert pick.repo_id in discover.meta.text() and pick.quant in discover.meta.text()
        assert discover.pick_fit.text().startswith("Fits: uses ") and discover.pick_fit.property("role") == "fits"
        assert discover.download_button.isEnabled()
        assert discover.download_button.text().startswith(f"Download {pick.quant}")
        assert not discover.files_table.isVisible()  # no Hub, no file list: nothing asked of it
        await discover.download_selected()
        assert discover.notice.text().startswith("Cannot reach the Hub") and downloads.views == []

    qloop.run_until_complete(scenario())


def test_picks_are_refreshed_from_a_reachable_hub(qloop, make_panels, monkeypatch, tmp_path, tiny_gguf, small_machine):
    from app.services.downloads.picks import load_picks

    pick = next(p for p in load_picks().picks if p.name.startswith("Llama 3.2 1B"))
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo(pick.repo_id, {pick.file: tiny_gguf.read_bytes()}, tags=["gguf"]))

        async def scenario():
            discover, downloads = await make_panels()
            await until(lambda: discover.hub_reachable is True, timeout=60)
            assert _column(discover.picks_table) == [pick.name]  # the others are not on this Hub
            assert _column(discover.picks_table, 1) == [format_bytes(tiny_gguf.stat().st_size)]
            assert "Sizes checked on the Hub" in discover.status.text()
            discover.picks_table.selectRow(0)
            await until(lambda: discover.detail is not None)  # the repository's files, the pick's one chosen
            assert discover.selected_candidate() is not None
            assert discover.selected_candidate().files[0].path == pick.file
            await discover.download_selected()
            await until(lambda: downloads.views and downloads.views[0].state == DONE)
            assert downloads.views[0].local_path.endswith(pick.file)

        qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_discover_fits_a_small_laptop_in_every_state(qloop, make_panels, hub, theme):
    from PySide6.QtWidgets import QTabWidget

    from tests.support.layout import assert_fits
    from tests.support.page_frame import themed, window_frame

    hub.add(Repo("org/" + "A-Very-Long-Repository-Name-" * 3 + "GGUF", {"x-Q4_K_M.gguf": b"x" * 100}, tags=["gguf"]))

    async def scenario():
        with themed(theme):
            discover, _ = await make_panels()
            tabs = QTabWidget()
            tabs.addTab(discover, "Discover")
            discover.show()
            with window_frame(tabs) as frame:
                await discover.start()
                assert discover.picks_table.isVisible()
                assert_fits(frame)  # the picks
                discover.picks_table.selectRow(0)
                assert_fits(frame)  # a pick's figures
                discover.query.setText("org")
                await discover.search()
                discover.results_table.selectRow(0)
                await until(lambda: discover.detail is not None)
                discover.notice.show_notice("A long notice about the Hub " * 8, level="error")
                assert_fits(frame)  # results, a repository with a long name, its files and card, a notice
                discover.query.setText("nothing-like-this")
                await discover.search()
                assert discover.no_results.isVisible()
                assert_fits(frame)  # no results
                frame.resize(1366, 768)
                assert_fits(frame)
            discover.setParent(None)

    qloop.run_until_complete(scenario())
