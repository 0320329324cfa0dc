"""The workstation's downloads: the persistent queue, started with the app (not by a page), its jobs run on worker
threads. Listeners hear, on the loop: ``DownloadsChanged`` (the list, a state or the progress: a few times a second
while a job runs), ``DownloadFinished`` and ``DownloadFailed``. Every file write runs in the executor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from app.core.errors import UnavailableError
from app.services.downloads.events import (
    DownloadEvent,
    DownloadFailed,
    DownloadFinished,
    DownloadsChanged,
    DownloadsSnapshot,
)
from app.services.downloads.fetch import FetchPolicy
from app.services.downloads.jobs import ACTIVE_STATES, DownloadJob
from app.services.downloads.queue import DownloadQueue
from app.services.events import EventHub
from app.services.settings_changes import SettingsChanged, SettingsOwner

log = logging.getLogger("app.services.downloads")
PROGRESS_INTERVAL_S = 0.25  # DownloadsChanged while a job runs: four a second


class DownloadService:
    def __init__(self, workstation: SettingsOwner, policy: FetchPolicy | None = None) -> None:
        self._workstation = workstation
        self._policy = policy
        self.queue: DownloadQueue | None = None  # once started
        self._events: EventHub[DownloadEvent] = EventHub()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._change_pending = False
        self._closed = False
        self._unfollow = workstation.subscribe(self._settings_changed)

    def subscribe(self, listener: Callable[[DownloadEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every ``DownloadEvent`` from now on; returns the function that unsubscribes."""
        return self._events.subscribe(listener)

    def snapshot(self) -> DownloadsSnapshot:
        """Every job as it is now (cheap: no disk access); empty until started."""
        queue = self.queue
        if queue is None:
            return DownloadsSnapshot()
        return DownloadsSnapshot(tuple(queue.views()), queue.save_problem, True)

    async def start(self) -> None:
        """Read the saved queue (off the loop) and continue its unfinished jobs. Idempotent."""
        if self._starting is None:
            self._loop = asyncio.get_running_loop()
            self._starting = asyncio.ensure_future(self._open())
        await asyncio.shield(self._starting)

    async def add(self, job: DownloadJob) -> str:
        """Queue ``job`` (an identical unfinished one is resumed instead); returns its id. Starts the queue first."""
        return str(await self._run("add", job))

    async def pause(self, job_id: str) -> None:
        await self._run("pause", job_id)

    async def resume(self, job_id: str) -> None:
        """Resume a paused job or retry a failed one, from its partial files."""
        await self._run("resume", job_id)

    async def cancel(self, job_id: str) -> None:
        """Stop the job, delete its partial files and drop it (placed files stay)."""
        await self._run("cancel", job_id)

    async def remove(self, job_id: str) -> None:
        """Drop a finished, failed or paused job from the list (its files stay)."""
        await self._run("remove", job_id)

    async def close(self) -> None:
        """Stop the workers; running jobs stay queued in the file and continue at the next start. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unfollow()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._starting is not None:
            await asyncio.wait([self._starting])
        if self.queue is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.queue.shutdown)

    # --- internals ------------------------------------------------------------------------------------------
    async def _open(self) -> None:
        path = self._workstation.paths.downloads_queue
        token = self._workstation.settings.hf_token or None  # None: huggingface_hub's own stored token
        queue = await asyncio.get_running_loop().run_in_executor(
            None, lambda: DownloadQueue(path, token=token, policy=self._policy)
        )
        queue.changed.append(lambda: self._from_thread(self._note_change))
        queue.completed.append(lambda job: self._from_thread(self._events.emit, _finished(job)))
        queue.failed.append(lambda job: self._from_thread(self._events.emit, DownloadFailed(job.id, job.error)))
        self.queue = queue
        if not self._closed:
            await asyncio.get_running_loop().run_in_executor(None, queue.start)
        self._note_change()

    async def _run(self, action: str, *args: Any) -> Any:
        await self.start()
        if self.queue is None or self._closed:
            raise UnavailableError("The download queue has stopped (the app is closing).")
        result = await asyncio.get_running_loop().run_in_executor(None, getattr(self.queue, action), *args)
        self._note_change()
        return result

    def _from_thread(self, callback: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is None or self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens any more
            loop.call_soon_threadsafe(callback, *args)

    def _note_change(self) -> None:
        """On the loop: tell the listeners once for every burst of changes in one turn."""
        if not self._change_pending and not self._closed:
            self._change_pending = True
            asyncio.get_running_loop().call_soon(self._tell_change)

    def _tell_change(self) -> None:
        self._change_pending = False
        if self._closed:
            return
        snapshot = self.snapshot()
        self._events.emit(DownloadsChanged(snapshot))
        if _running(snapshot) and (self._ticker is None or self._ticker.done()):
            self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        """The progress of running jobs (bytes, speed, ETA change without a state change)."""
        while not self._closed:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            snapshot = self.snapshot()
            self._events.emit(DownloadsChanged(snapshot))
            if not _running(snapshot):
                return

    def _settings_changed(self, event: SettingsChanged) -> None:
        """Jobs started from now on use the new token (the download folder is read when a job is planned)."""
        if event.touches("hf_token") and self.queue is not None:
            self.queue.token = self._workstation.settings.hf_token or None


def _running(snapshot: DownloadsSnapshot) -> bool:
    return any(view.state in ACTIVE_STATES for view in snapshot.jobs)


def _finished(job: DownloadJob) -> DownloadFinished:
    return DownloadFinished(job.id, job.repo_id, job.local_path)
