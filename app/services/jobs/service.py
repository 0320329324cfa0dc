"""The workstation's long jobs — batch runs, bench runs, the vLLM install — owned here, not by their pages, so
they keep running while a page is hidden and a page opened later finds them (``snapshot`` + ``subscribe``).

A job is a coroutine function (``work(progress)``) or a blocking function run in an executor
(``work(progress, cancelled)``); ``progress(report)`` may be called as often as the work likes: listeners hear of
it at most every ``progress_interval_s`` (the latest report always reaches them). ``cancel`` asks the job's
graceful ``stop`` first when it has one (a batch keeps its finished results), else cancels its task."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from app.core.errors import AppError
from app.services.events import EventHub
from app.services.jobs.events import Job, JobEvent, JobFinished, JobProgress, JobStarted, JobState

log = logging.getLogger("app.services.jobs")

Progress = Callable[[Any], None]
KEEP_FINISHED = 20
PROGRESS_INTERVAL_S = 0.25
CLOSE_GRACE_S = 15.0


class _Running:
    """The service's own record of a running job: its snapshot, task, stop hook and progress throttle."""

    def __init__(self, job: Job, stop: Callable[[], None] | None, interval_s: float) -> None:
        self.job = job
        self.stop = stop
        self.interval_s = interval_s
        self.task: asyncio.Task[None] | None = None
        self.last_emit = float("-inf")
        self.flush: asyncio.TimerHandle | None = None


class JobService:
    def __init__(self, keep_finished: int = KEEP_FINISHED) -> None:
        self._events: EventHub[JobEvent] = EventHub()
        self._running: dict[str, _Running] = {}
        self._finished: deque[Job] = deque(maxlen=keep_finished)
        self._ids = itertools.count(1)
        self._closed = False

    def subscribe(self, listener: Callable[[JobEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every job event from now on; returns the function that unsubscribes."""
        return self._events.subscribe(listener)

    # --- reading ----------------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[Job, ...]:
        """The running jobs (oldest first), then the recent finished ones (newest last)."""
        return tuple(record.job for record in self._running.values()) + tuple(self._finished)

    def job(self, job_id: str) -> Job | None:
        return next((job for job in self.snapshot() if job.id == job_id), None)

    def running(self, kind: str) -> Job | None:
        """The running job of this kind (the oldest, should there be several)."""
        return next((r.job for r in self._running.values() if r.job.kind == kind), None)

    def last(self, kind: str) -> Job | None:
        """The running job of this kind, else the one that finished last."""
        return self.running(kind) or next((j for j in reversed(self._finished) if j.kind == kind), None)

    async def wait(self, job_id: str) -> Job | None:
        """The job once it has finished (its ``JobFinished`` already told); waiting never cancels it."""
        record = self._running.get(job_id)
        if record is not None and record.task is not None:
            await asyncio.wait({record.task})
        return self.job(job_id)

    # --- running ----------------------------------------------------------------------------------------------
    def start(
        self,
        kind: str,
        work: Callable[[Progress], Awaitable[Any]],
        *,
        title: str = "",
        spec: object = None,
        stop: Callable[[], None] | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> Job:
        """Run ``work(progress)`` on the running loop as a job; returns its first snapshot (``JobStarted`` told)."""
        if self._closed:
            raise RuntimeError("the job service is closed")
        job = Job(f"{kind}-{next(self._ids)}", kind, title, spec)
        record = _Running(job, stop, progress_interval_s)
        self._running[job.id] = record
        record.task = asyncio.get_running_loop().create_task(self._drive(record, work), name=f"job {job.id}")
        self._events.emit(JobStarted(job))
        return job

    def start_blocking(
        self,
        kind: str,
        work: Callable[[Progress, threading.Event], Any],
        *,
        title: str = "",
        spec: object = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> Job:
        """Run ``work(progress, cancelled)`` in the loop's executor; it should return soon after ``cancelled`` is
        set. Its progress reports, made on its thread, reach listeners on the loop."""
        cancelled = threading.Event()
        loop = asyncio.get_running_loop()

        async def in_executor(progress: Progress) -> Any:
            def hop(report: Any) -> None:
                loop.call_soon_threadsafe(progress, report)

            return await asyncio.shield(loop.run_in_executor(None, work, hop, cancelled))

        return self.start(
            kind, in_executor, title=title, spec=spec, stop=cancelled.set, progress_interval_s=progress_interval_s
        )

    def cancel(self, job_id: str) -> bool:
        """Ask the job to stop: its graceful stop the first time (when it has one), else its task is cancelled.
        False when no such job runs."""
        record = self._running.get(job_id)
        if record is None or record.task is None:
            return False
        graceful = record.stop is not None and not record.job.cancel_requested
        record.job = dataclasses.replace(record.job, cancel_requested=True)
        if graceful and record.stop is not None:
            record.stop()
        else:
            record.task.cancel()
        return True

    async def close(self) -> None:
        """Cancel the running jobs, oldest first, each waited for (a graceful stop, then its task). Idempotent."""
        self._closed = True
        for job_id, record in list(self._running.items()):
            if record.task is None:
                continue
            self.cancel(job_id)
            await asyncio.wait({record.task}, timeout=CLOSE_GRACE_S)
            if not record.task.done():
                record.task.cancel()
                await asyncio.wait({record.task}, timeout=CLOSE_GRACE_S)

    # --- inside -----------------------------------------------------------------------------------------------
    async def _drive(self, record: _Running, work: Callable[[Progress], Awaitable[Any]]) -> None:
        state, result, error = JobState.DONE, None, None
        try:
            result = await work(lambda report: self._progressed(record, report))
        except asyncio.CancelledError:
            state = JobState.CANCELLED
        except Exception as exc:
            state, error = JobState.FAILED, exc
            log.warning("%s failed: %s", record.job.id, exc, exc_info=not isinstance(exc, AppError))
        if state is JobState.DONE and record.job.cancel_requested:
            state = JobState.CANCELLED  # a graceful stop: what it returned is kept
        if record.flush is not None:
            record.flush.cancel()
        job = dataclasses.replace(record.job, state=state, result=result, error=error)
        del self._running[job.id]
        self._finished.append(job)
        self._events.emit(JobFinished(job))

    def _progressed(self, record: _Running, report: Any) -> None:
        if not record.job.running or record.job.id not in self._running:
            return
        record.job = dataclasses.replace(record.job, progress=report)
        wait_s = record.last_emit + record.interval_s - time.monotonic()
        if wait_s <= 0:
            self._emit_progress(record)
        elif record.flush is None:
            record.flush = asyncio.get_running_loop().call_later(wait_s, self._emit_progress, record)

    def _emit_progress(self, record: _Running) -> None:
        record.flush = None
        if record.job.id in self._running:
            record.last_emit = time.monotonic()
            self._events.emit(JobProgress(record.job))
