"""Models → Discover, offscreen: search, repo detail with per-file fits verdicts, and Download, against the local
Hub server through the real huggingface_hub client."""

from __future__ import annotations

import pytest
import shiboken6

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
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        downloads = DownloadsPanel(context)
        discover = DiscoverPanel(context, downloads)
        for widget in (downloads, discover):
            qtbot.addWidget(widget)
        discover.resize(1200, 700)
        discover.show()
        await downloads.start()
        made.append(downloads)
        return discover, downloads

    yield make

    async def finish():
        await until(lambda: not running_tasks(), timeout=15)
        for downloads in made:
            if shiboken6.isValid(downloads):
                await downloads.shutdown()

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
        assert _column(discover.results_table) == ["org/Tiny-HF"] and discover.status.text() == "1 models."
        discover.query.setText("nothing-like-this")
        await discover.search()
        assert discover.results_table.rowCount() == 0 and "No models found" in discover.status.text()

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
        assert verdicts["F16"].startswith("Fits: needs ")
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
        settings = discover.context.settings
        settings.load = dataclasses.replace(settings.load, n_gpu_layers=-1)  # every layer on a GPU that is not there
        await discover.open_repo("org/Odd-GGUF")
        assert _column(discover.files_table, 1) == ["Q2_K", "F16"]  # the odd file is estimated first
        await until(lambda: "estimating…" not in _column(discover.files_table, 3))
        verdicts = dict(zip(_column(discover.files_table, 1), _column(discover.files_table, 3), strict=True))
        assert verdicts["Q2_K"] == "no estimate: estimator bug (see View → Log)"
        assert verdicts["F16"].startswith("Fits: needs ") and "of 12.0 GiB system RAM" in verdicts["F16"]
        assert verdicts["F16"].endswith("(no GPU here: everything runs from RAM).")
        assert "estimating a-odd-Q2_K.gguf of org/Odd-GGUF failed" in caplog.text

    qloop.run_until_complete(scenario())


def test_queueing_that_fails_says_why_and_never_queued(qloop, make_panels, hub, monkeypatch):
    from app.services.downloads.queue import DownloadManager

    def refuse(manager, job):
        raise OSError(28, "No space left on device")

    async def scenario():
        discover, downloads = await make_panels()
        await discover.open_repo("org/Tiny-GGUF")
        discover.files_table.selectRow(_column(discover.files_table, 1).index("F16"))
        monkeypatch.setattr(DownloadManager, "add", refuse)  # the queue file's disk fails as the job is added
        await discover.download_selected()
        status = discover.status.text()
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
