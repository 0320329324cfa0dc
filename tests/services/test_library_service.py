"""``workstation.library``: the last scan shared by every client, scans coalesced off the loop, and a fresh scan by
itself when a model folder is added through the settings or a download lands (whichever service came first)."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.services.downloads.events import DownloadFinished
from app.services.downloads.hub import HubService
from app.services.library import index as library_module
from app.services.library.events import LibraryChanged, LibraryEvent, LibraryScanning
from app.services.paths import app_paths
from app.services.workstation import Workstation
from tests.support.hf_server import HubServer, Repo, use_hub
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def empty_stores(tmp_path, monkeypatch):
    """No Hugging Face cache or Ollama models on this machine: the library holds only what a test puts there."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))


def _run(scenario: Callable[[Workstation, list[LibraryEvent]], Awaitable[None]], downloads_first: bool = False) -> None:
    async def main() -> None:
        workstation = Workstation.create(app_paths().ensure())
        if downloads_first:
            workstation.downloads  # noqa: B018 - the download service exists before the library
        events: list[LibraryEvent] = []
        workstation.library.subscribe(events.append)
        try:
            await scenario(workstation, events)
        finally:
            await workstation.close()

    asyncio.run(main())


def _changed_with(events: list[LibraryEvent], path: Path) -> list[LibraryChanged]:
    return [e for e in events if isinstance(e, LibraryChanged) and any(x.path == str(path) for x in e.scan.entries)]


def test_a_model_folder_added_through_the_settings_is_scanned_and_announced(tmp_path, tiny_gguf):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(tiny_gguf, folder / "tiny.gguf")

    async def scenario(workstation: Workstation, events: list[LibraryEvent]) -> None:
        first = await workstation.library.scan()
        assert not any(e.path == str(folder / "tiny.gguf") for e in first.entries)
        workstation.update_settings(model_folders=[str(folder)])
        await until(lambda: _changed_with(events, folder / "tiny.gguf"))
        assert workstation.library.snapshot() is _changed_with(events, folder / "tiny.gguf")[-1].scan
        assert isinstance(events[0], LibraryScanning)

    _run(scenario)


def test_a_library_nobody_has_looked_at_does_not_scan(tmp_path):
    async def scenario(workstation: Workstation, events: list[LibraryEvent]) -> None:
        workstation.update_settings(model_folders=[str(tmp_path)])
        await asyncio.sleep(0)
        assert events == [] and workstation.library.snapshot() is None and not workstation.library.scanning

    _run(scenario)


def test_concurrent_callers_share_one_scan_off_the_loop(tmp_path, tiny_gguf, monkeypatch):
    threads: list[str] = []
    real_scan = library_module.ModelLibrary.scan

    def recording_scan(self, progress=None):
        threads.append(threading.current_thread().name)
        return real_scan(self, progress)

    monkeypatch.setattr(library_module.ModelLibrary, "scan", recording_scan)

    async def scenario(workstation: Workstation, events: list[LibraryEvent]) -> None:
        scans = await asyncio.gather(*(workstation.library.scan() for _ in range(3)))
        assert scans[0] is scans[1] is scans[2] and len(threads) == 1
        assert threads[0] != threading.main_thread().name
        assert sum(isinstance(e, LibraryChanged) for e in events) == 1

    _run(scenario)


def test_a_scan_asked_for_after_the_folders_changed_mid_scan_lists_the_new_folder(tmp_path, tiny_gguf, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(tiny_gguf, folder / "tiny.gguf")
    gate = threading.Event()
    real_scan = library_module.ModelLibrary.scan
    monkeypatch.setattr(library_module.ModelLibrary, "scan", lambda lib, *a: gate.wait(10) and real_scan(lib, *a))

    async def scenario(workstation: Workstation, events: list[LibraryEvent]) -> None:
        first = asyncio.ensure_future(workstation.library.scan())
        await until(lambda: workstation.library.scanning and events)
        workstation.settings.model_folders = [str(folder)]  # no event: only the roots differ from the scan's
        second = asyncio.ensure_future(workstation.library.scan())
        gate.set()
        scans = await asyncio.gather(first, second)
        assert all(any(e.path == str(folder / "tiny.gguf") for e in scan.entries) for scan in scans)

    _run(scenario)


@pytest.fixture
def hub(monkeypatch, tmp_path, tiny_gguf):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo("org/Tiny-GGUF", {"tiny-F16.gguf": tiny_gguf.read_bytes()}, tags=["gguf"]))
        yield server


@pytest.mark.parametrize("library_first", [True, False])
def test_a_finished_download_rescans_the_library(hub, library_first):
    async def scenario(workstation: Workstation, events: list[LibraryEvent]) -> None:
        await workstation.library.scan()
        if library_first:
            assert "downloads" not in workstation.__dict__  # the library did not create the download service
        downloads = workstation.downloads
        finished: list[DownloadFinished] = []
        downloads.subscribe(lambda e: finished.append(e) if isinstance(e, DownloadFinished) else None)
        service = HubService()
        job = service.plan_download(service.repo_detail("org/Tiny-GGUF", with_card=False), files=["tiny-F16.gguf"])
        await downloads.add(job)
        await until(lambda: finished)
        await until(lambda: _changed_with(events, Path(finished[0].local_path)))

    _run(scenario, downloads_first=not library_first)
