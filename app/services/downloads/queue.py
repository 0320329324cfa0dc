"""The persistent download queue: jobs survive a restart and continue from their partial files."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import InvalidInputError
from app.services.downloads.fetch import FetchPolicy, discard_partial
from app.services.downloads.job_runner import JobControl, JobView, SpeedMeter, run_job
from app.services.downloads.jobs import (
    ACTIVE_STATES,
    DONE,
    DOWNLOADING,
    FAILED,
    PAUSED,
    QUEUED,
    STALLED,
    DownloadJob,
    JobState,
    JobStore,
    placement,
)

log = logging.getLogger(__name__)


@dataclass
class _Run:
    ctl: JobControl
    thread: threading.Thread
    cancelled: bool = False
    meter: SpeedMeter = field(default_factory=SpeedMeter)


class DownloadQueue:
    """Runs queued jobs (``max_active`` at a time) on worker threads and keeps the queue in ``store_path``.

    Thread-safe; ``views`` returns at once. The callbacks run on whichever thread made the change (a worker's for
    ``completed`` and ``failed``): ``changed`` after every change of the list or a job's state, ``completed`` with a
    job that has just finished, ``failed`` with one that has just failed. ``_lock`` guards the
    jobs and is held only to change or copy them: the queue file is written, and partial files deleted, after it
    is released, so a view never waits for the disk.
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
        self.changed: list[Callable[[], None]] = []
        self.completed: list[Callable[[DownloadJob], None]] = []
        self.failed: list[Callable[[DownloadJob], None]] = []
        self._store = JobStore(store_path)
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()  # one write at a time, newest state last
        self._snapshots = self._written = 0  # numbers of the copies taken / of the newest one written
        self.save_problem: str | None = None  # why the queue file could not be written last time (shown)
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
            else:
                job = None
        if job is not None:
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
            if run is not None:  # its worker deletes the partial files once the transfer has stopped
                run.cancelled = True
                run.ctl.stop.set()
            partials = _partial_paths(job) if run is None else []
        self._save()
        _delete_partials(partials)

    def remove(self, job_id: str) -> None:
        """Drop a finished, failed or paused job from the list (its files stay on disk)."""
        with self._lock:
            job = self._job(job_id)
            if job is None or job_id in self._runs:
                return
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
        """Write the queue as it is now; call it without holding ``_lock`` (the copy takes it briefly)."""
        with self._lock:
            self._snapshots += 1
            number, data = self._snapshots, [job.to_dict() for job in self._jobs]
        with self._save_lock:
            if number < self._written:
                return  # a newer copy is on disk already: an older one must not replace it
            self._written = number
            try:
                self._store.write(data)
            except OSError as exc:
                log.warning("cannot save the download queue to %s: %s", self._store.path, exc)
                self.save_problem = (
                    f"The download queue could not be saved to {self._store.path} ({exc.strerror or exc}): "
                    "downloads go on, but after a restart this list may be older. Free some space or fix the "
                    "folder's permissions."
                )
            else:
                self.save_problem = None
        _tell(self.changed)

    def _stop(self, job_id: str, state: JobState) -> None:
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
        ctl = JobControl(self.token, self.endpoint, self.policy, self.session, on_change=self._save)
        thread = threading.Thread(target=self._work, args=(job, ctl), name=f"download-{job.id}", daemon=True)
        self._runs[job.id] = _Run(ctl, thread)
        job.state = DOWNLOADING
        thread.start()

    def _work(self, job: DownloadJob, ctl: JobControl) -> None:
        try:
            run_job(job, ctl)
        except Exception as exc:  # a bug must not kill the queue silently
            log.exception("download %s failed unexpectedly", job.id)
            job.state, job.error = FAILED, f"Unexpected error: {exc}. Retry; the app's log has the details."
        with self._lock:
            run = self._runs[job.id]
            partials = _partial_paths(job) if run.cancelled else []
        _delete_partials(partials)
        with self._lock:  # a cancelled job's run ends once its partial files are gone
            del self._runs[job.id]
        self._save()
        if not run.cancelled and job.state in (DONE, FAILED):
            _tell(self.completed if job.state == DONE else self.failed, job)
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


def _tell(callbacks: list[Callable[..., None]], *args: object) -> None:
    for callback in list(callbacks):
        try:
            callback(*args)
        except Exception:  # a listener's bug must not stop the queue
            log.exception("a download queue listener failed")


def _same_job(a: DownloadJob, b: DownloadJob) -> bool:
    return (a.repo_id, a.commit, a.target_dir, [f.path for f in a.files]) == (
        b.repo_id,
        b.commit,
        b.target_dir,
        [f.path for f in b.files],
    )


def _partial_paths(job: DownloadJob) -> list[Path]:
    """The job's partial files; none for a job whose paths are unsafe (it never wrote any)."""
    try:
        return [placement(job, job_file).partial_path for job_file in job.files if not job_file.done]
    except InvalidInputError:
        return []


def _delete_partials(paths: list[Path]) -> None:
    """Delete a cancelled job's partial files, but none that a download (a new job, a command) writes now."""
    for path in paths:
        try:
            if not discard_partial(path):
                log.info("kept %s: another download is writing it", path)
        except OSError as exc:
            log.warning("cannot delete the partial file %s: %s", path, exc)
