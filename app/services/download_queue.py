"""The persistent download queue: jobs survive a restart and continue from their partial files."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.services.download_fetch import FetchPolicy
from app.services.download_jobs import (
    ACTIVE_STATES,
    DONE,
    DOWNLOADING,
    FAILED,
    PAUSED,
    QUEUED,
    STALLED,
    DownloadJob,
    JobStore,
    placement,
)
from app.services.downloads import JobControl, JobView, SpeedMeter, run_job

log = logging.getLogger(__name__)


@dataclass
class _Run:
    ctl: JobControl
    thread: threading.Thread
    cancelled: bool = False
    meter: SpeedMeter = field(default_factory=SpeedMeter)


class DownloadManager:
    """Runs queued jobs (``max_active`` at a time) on worker threads and keeps the queue in ``store_path``.

    Thread-safe; every method returns at once. ``completed`` callbacks run on a worker thread.
    """

    def __init__(
        self,
        store_path: Path,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        policy: FetchPolicy | None = None,
        max_active: int = 1,
        session: Any | None = None,
    ) -> None:
        self.token, self.endpoint, self.session = token, endpoint, session
        self.policy = policy or FetchPolicy()
        self.max_active = max_active
        self.completed: list[Callable[[DownloadJob], None]] = []
        self._store = JobStore(store_path)
        self._lock = threading.RLock()
        self._jobs = self._store.load()
        self._runs: dict[str, _Run] = {}
        self._closed = False
        for job in self._jobs:
            if job.state in ACTIVE_STATES:
                job.state = QUEUED  # it was running when the app stopped: continue it

    def start(self) -> None:
        """Start the jobs that are queued (including those interrupted by the last exit)."""
        self._schedule()

    def add(self, job: DownloadJob) -> str:
        """Queue ``job``; an identical unfinished job (same repo, commit, files, folder) is resumed instead."""
        with self._lock:
            for existing in self._jobs:
                if _same_job(existing, job) and existing.state != DONE:
                    if existing.state in (PAUSED, FAILED):
                        existing.state = QUEUED
                    job = existing
                    break
            else:
                self._jobs.append(job)
            self._save()
        self._schedule()
        return job.id

    def pause(self, job_id: str) -> None:
        self._stop(job_id, PAUSED)

    def resume(self, job_id: str) -> None:
        """Resume a paused job or retry a failed one, from its partial files."""
        with self._lock:
            job = self._job(job_id)
            if job is not None and job.state in (PAUSED, FAILED):
                job.state, job.error, job.error_kind = QUEUED, "", ""
                self._save()
        self._schedule()

    retry = resume

    def cancel(self, job_id: str) -> None:
        """Stop the job, delete its partial files and drop it from the queue (placed files stay)."""
        with self._lock:
            job = self._job(job_id)
            if job is None:
                return
            run = self._runs.get(job_id)
            self._jobs.remove(job)
            if run is not None:
                run.cancelled = True
                run.ctl.stop.set()
            else:
                _delete_partials(job)
            self._save()

    def remove(self, job_id: str) -> None:
        """Drop a finished, failed or paused job from the list (its files stay on disk)."""
        with self._lock:
            job = self._job(job_id)
            if job is not None and job_id not in self._runs:
                self._jobs.remove(job)
                self._save()

    def job(self, job_id: str) -> DownloadJob | None:
        with self._lock:
            return self._job(job_id)

    def views(self) -> list[JobView]:
        """The latest snapshot of every job, for a view to draw (cheap: no disk access)."""
        now = time.monotonic()
        with self._lock:
            return [self._view(job, now) for job in self._jobs]

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop the workers; running jobs stay queued in the file and continue at the next start."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
            for run in runs:
                run.ctl.stop.set()
        deadline = time.monotonic() + timeout_s
        for run in runs:
            run.thread.join(max(deadline - time.monotonic(), 0.0))
        with self._lock:
            for job in self._jobs:
                if job.state in ACTIVE_STATES:
                    job.state = QUEUED
            self._save()

    # -- internals -------------------------------------------------------------------------------------------

    def _job(self, job_id: str) -> DownloadJob | None:
        return next((job for job in self._jobs if job.id == job_id), None)

    def _save(self) -> None:
        try:
            self._store.save(self._jobs)
        except OSError as exc:
            log.warning("cannot save the download queue to %s: %s", self._store.path, exc)

    def _stop(self, job_id: str, state: str) -> None:
        with self._lock:
            job = self._job(job_id)
            if job is None or job.state in (DONE, FAILED):
                return
            job.state = state
            if (run := self._runs.get(job_id)) is not None:
                run.ctl.stop.set()
            self._save()

    def _schedule(self) -> None:
        with self._lock:
            if self._closed:
                return
            for job in self._jobs:
                if len(self._runs) >= self.max_active:
                    break
                if job.state == QUEUED and job.id not in self._runs:
                    self._launch(job)

    def _launch(self, job: DownloadJob) -> None:
        ctl = JobControl(self.token, self.endpoint, self.policy, self.session, on_change=self._save_locked)
        thread = threading.Thread(target=self._work, args=(job, ctl), name=f"download-{job.id}", daemon=True)
        self._runs[job.id] = _Run(ctl, thread)
        job.state = DOWNLOADING
        thread.start()

    def _save_locked(self) -> None:
        with self._lock:
            self._save()

    def _work(self, job: DownloadJob, ctl: JobControl) -> None:
        try:
            run_job(job, ctl)
        except Exception as exc:  # a bug must not kill the queue silently
            log.exception("download %s failed unexpectedly", job.id)
            job.state, job.error = FAILED, f"Unexpected error: {exc}. Press Retry; see View → Log for details."
        with self._lock:
            run = self._runs.pop(job.id)
            if run.cancelled:
                _delete_partials(job)
            self._save()
        if job.state == DONE and not run.cancelled:
            for callback in list(self.completed):
                callback(job)
        self._schedule()

    def _view(self, job: DownloadJob, now: float) -> JobView:
        run = self._runs.get(job.id)
        done = run.ctl.done_bytes if run else sum((f.size_bytes or 0) if f.done else f.done_bytes for f in job.files)
        state, note, speed, eta = job.state, "", 0.0, None
        if run is not None:
            speed = run.meter.speed(now, done)
            note = run.ctl.transfer.note
            idle_s = now - run.ctl.transfer.last_byte_monotonic
            if state == DOWNLOADING and idle_s > self.policy.stall_s / 2:  # shown before the read times out
                state, speed = STALLED, 0.0
            if speed > 0 and job.total_bytes:
                eta = max(job.total_bytes - done, 0) / speed
        return JobView(
            job.id, job.title, job.repo_id, state, job.error, note, done, job.total_bytes, speed, eta, job.local_path
        )


def _same_job(a: DownloadJob, b: DownloadJob) -> bool:
    return (a.repo_id, a.commit, a.target_dir, [f.path for f in a.files]) == (
        b.repo_id,
        b.commit,
        b.target_dir,
        [f.path for f in b.files],
    )


def _delete_partials(job: DownloadJob) -> None:
    for job_file in job.files:
        if not job_file.done:
            placement(job, job_file).partial_path.unlink(missing_ok=True)
