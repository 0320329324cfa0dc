"""``workstation.downloads``: the queue as a workstation service, over real downloads from the local Hub server —
its events reach the loop (progress a few times a second, finished, failed), it resumes an unfinished queue at
start with no page, and it follows the token setting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.services.downloads.events import DownloadEvent, DownloadFailed, DownloadFinished, DownloadsChanged
from app.services.downloads.hub import HubService
from app.services.downloads.jobs import DONE, DOWNLOADING, FAILED, QUEUED
from app.services.paths import app_paths
from app.services.workstation import Workstation
from tests.support.hf_server import VALID_TOKEN, HubServer, Repo, random_bytes, use_hub
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)
BIG = "big-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(Repo("org/Big-GGUF", {BIG: random_bytes(2_000_000, 1)}, tags=["gguf"]))
        server.add(Repo("org/Gated", {"m-Q8_0.gguf": b"g" * 100}, gated=True, tags=["gguf"]))
        yield server


def plan(repo_id: str, name: str):
    service = HubService()
    return service.plan_download(service.repo_detail(repo_id, with_card=False), files=[name])


def _run(scenario: Callable[[Workstation, list[DownloadEvent]], Awaitable[None]]) -> None:
    """``scenario(workstation, events)`` on a fresh loop; ``events`` collects what the download service says."""

    async def main() -> None:
        workstation = Workstation.create(app_paths().ensure())
        events: list[DownloadEvent] = []
        workstation.downloads.subscribe(events.append)
        try:
            await scenario(workstation, events)
        finally:
            await workstation.close()

    asyncio.run(main())


def test_a_download_reports_progress_then_finishes_on_the_loop(hub):
    hub.throttle_bytes_per_s = 2_000_000
    threads: set[bool] = set()

    async def scenario(workstation: Workstation, events: list[DownloadEvent]) -> None:
        loop = asyncio.get_running_loop()
        workstation.downloads.subscribe(lambda _event: threads.add(asyncio.get_running_loop() is loop))
        await workstation.downloads.start()
        job_id = await workstation.downloads.add(plan("org/Big-GGUF", BIG))
        await until(lambda: any(isinstance(e, DownloadFinished) for e in events))
        finished = next(e for e in events if isinstance(e, DownloadFinished))
        assert finished.job_id == job_id and finished.repo_id == "org/Big-GGUF" and finished.local_path.endswith(BIG)
        assert Path(finished.local_path).stat().st_size == 2_000_000
        progress = [
            e.snapshot.jobs[0].done_bytes
            for e in events
            if isinstance(e, DownloadsChanged) and e.snapshot.jobs and e.snapshot.jobs[0].state == DOWNLOADING
        ]
        assert progress == sorted(progress) and any(0 < done < 2_000_000 for done in progress)  # seen on its way
        await until(lambda: workstation.downloads.snapshot().jobs[0].state == DONE)
        assert threads == {True}  # every listener ran on the loop, never on a worker thread

    _run(scenario)


def test_a_failed_download_says_why(hub):
    async def scenario(workstation: Workstation, events: list[DownloadEvent]) -> None:
        job_id = await workstation.downloads.add(plan("org/Gated", "m-Q8_0.gguf"))  # adding starts the queue
        await until(lambda: any(isinstance(e, DownloadFailed) for e in events))
        failed = next(e for e in events if isinstance(e, DownloadFailed))
        assert failed.job_id == job_id and "accept its license" in failed.message
        assert workstation.downloads.snapshot().jobs[0].state == FAILED
        assert not any(isinstance(e, DownloadFinished) for e in events)

    _run(scenario)


def test_an_unfinished_queue_resumes_when_the_service_starts_again(hub):
    hub.throttle_bytes_per_s = 1_000_000

    async def quit_mid_download(workstation: Workstation, _events: list[DownloadEvent]) -> None:
        await workstation.downloads.add(plan("org/Big-GGUF", BIG))
        await until(lambda: workstation.downloads.snapshot().jobs[0].done_bytes > 100_000)

    _run(quit_mid_download)  # the close leaves the job queued, its partial file on disk

    async def start_again(workstation: Workstation, events: list[DownloadEvent]) -> None:
        assert workstation.downloads.snapshot().jobs == ()  # not read before start
        hub.throttle_bytes_per_s = None
        await workstation.downloads.start()
        assert workstation.downloads.snapshot().jobs[0].state in (QUEUED, DOWNLOADING, DONE)
        await until(lambda: any(isinstance(e, DownloadFinished) for e in events))
        starts = [e.start for e in hub.log if e.path == BIG and e.method == "GET"]
        assert max(starts) > 0  # it continued from the partial file

    _run(start_again)


def test_jobs_started_after_a_token_change_use_the_new_token(hub):
    async def scenario(workstation: Workstation, events: list[DownloadEvent]) -> None:
        await workstation.downloads.add(plan("org/Gated", "m-Q8_0.gguf"))
        await until(lambda: any(isinstance(e, DownloadFailed) for e in events))
        workstation.update_settings(hf_token=VALID_TOKEN)
        await workstation.downloads.resume(workstation.downloads.snapshot().jobs[0].id)
        await until(lambda: any(isinstance(e, DownloadFinished) for e in events))

    _run(scenario)
