"""Downloads and the library as workstation services, seen through the window: downloads resume at start-up with
no page built, and a finished download reaches the chat's model picker at once and the Library page when it is
first opened — no page relays it."""

from __future__ import annotations

import pytest

from app.services.downloads.hub import HubService
from app.services.downloads.jobs import DONE
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub
from tests.support.waiting import until

BIG = "big-Q4_K_M.gguf"
MODELS_PAGES = ("library", "discover", "downloads", "ollama")


@pytest.fixture
def hub(monkeypatch, tmp_path, tiny_gguf):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo("org/Big-GGUF", {BIG: random_bytes(2_000_000, 1)}, tags=["gguf"]))
        server.add(Repo("org/Tiny-GGUF", {"tiny-F16.gguf": tiny_gguf.read_bytes()}, tags=["gguf"]))
        yield server


def plan(repo_id: str, name: str):
    service = HubService()
    return service.plan_download(service.repo_detail(repo_id, with_card=False), files=[name])


def test_downloads_resume_at_start_up_with_no_downloads_page(qloop, make_window, hub):
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    async def scenario():
        before = Workstation.create(app_paths().ensure())  # a first run of the app, quit mid-download
        hub.throttle_bytes_per_s = 1_000_000
        await before.downloads.add(plan("org/Big-GGUF", BIG))
        await until(lambda: before.downloads.snapshot().jobs[0].done_bytes > 100_000)
        await before.close()
        hub.throttle_bytes_per_s = None
        window = await make_window()
        downloads = window.workstation.downloads
        await until(lambda: downloads.snapshot().jobs and downloads.snapshot().jobs[0].state == DONE)
        assert not any(name in window._widgets for name in MODELS_PAGES)
        assert max(e.start for e in hub.log if e.path == BIG and e.method == "GET") > 0  # continued, not restarted

    qloop.run_until_complete(scenario())


def test_a_finished_download_shows_in_the_chat_picker_at_once_and_in_the_library_when_opened(qloop, make_window, hub):
    async def scenario():
        window = await make_window()
        workstation = window.workstation
        picker = window.chat_panel.model_bar.models
        await until(lambda: workstation.library.snapshot() is not None)  # the picker listed the library once
        await workstation.downloads.add(plan("org/Tiny-GGUF", "tiny-F16.gguf"))
        await until(lambda: workstation.downloads.snapshot().jobs[0].state == DONE)
        local_path = workstation.downloads.snapshot().jobs[0].local_path
        await until(lambda: picker.findData(local_path) >= 0)
        assert not any(name in window._widgets for name in MODELS_PAGES)
        window.open_path("models/library")
        library = window.models_panel
        await until(lambda: library.last_scan is not None and library.select_path(local_path))
        assert library.selected_entry().repo_id == "org/Tiny-GGUF"

    qloop.run_until_complete(scenario())


def test_a_model_folder_added_on_the_library_page_reaches_the_chat_picker(qloop, make_window, hub, tmp_path, tiny_gguf):
    import shutil

    folder = tmp_path / "more models"
    folder.mkdir()
    shutil.copyfile(tiny_gguf, folder / "mine.gguf")

    async def scenario():
        window = await make_window()
        window.open_path("models/library")
        library = window.models_panel
        await until(lambda: library.last_scan is not None)
        await library.add_model_folder(str(folder))
        assert window.workstation.settings.model_folders == [str(folder)]
        picker = window.chat_panel.model_bar.models
        await until(lambda: picker.findData(str(folder / "mine.gguf")) >= 0)
        assert library.select_path(str(folder / "mine.gguf"))

    qloop.run_until_complete(scenario())
