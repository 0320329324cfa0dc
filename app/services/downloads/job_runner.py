"""A download job's runner: ``run_job`` downloads, verifies and places one job's files (blocking; the queue runs
it on worker threads, the CLI on its own), with the live figures (``JobControl``, ``JobView``, ``SpeedMeter``).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import InvalidInputError
from app.core.units import format_bytes
from app.services.downloads.fetch import (
    DownloadError,
    DownloadStopped,
    FetchPolicy,
    FetchTarget,
    Transfer,
    fetch_file,
    sha256_of_prefix,
)
from app.services.downloads.hub import hub_endpoint
from app.services.downloads.jobs import (
    DONE,
    DOWNLOADING,
    FAILED,
    VERIFYING,
    DownloadJob,
    JobFile,
    JobState,
    job_root,
    place,
    placement,
)

log = logging.getLogger(__name__)
SPEED_WINDOW_S = 5.0


@dataclass
class JobControl:
    """What a running job shares with its owner: the stop request and live byte counters."""

    token: str | None = None
    endpoint: str | None = None
    policy: FetchPolicy = field(default_factory=FetchPolicy)
    session: Any | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    transfer: Transfer = field(default_factory=Transfer)
    finished_bytes: int = 0  # bytes of the job's files already complete
    on_change: Callable[[], None] = lambda: None

    @property
    def done_bytes(self) -> int:
        return self.finished_bytes + self.transfer.done_bytes


def _set_state(job: DownloadJob, ctl: JobControl, state: JobState) -> None:
    if not ctl.stop.is_set():  # a pause or cancel already chose the state
        job.state = state
        ctl.on_change()


def run_job(job: DownloadJob, ctl: JobControl) -> None:
    """Download, verify and place every unfinished file of ``job``; sets ``job.state`` to done or failed.

    Blocking: run it on a worker thread. Returns quietly when ``ctl.stop`` is set (the partial files stay).
    """
    job.error = job.error_kind = ""
    _set_state(job, ctl, DOWNLOADING)
    try:
        job.check_paths()  # again: a job may come from a queue file edited by hand
        check_free_space(job)
        for job_file in job.files:
            ctl.finished_bytes = sum(f.size_bytes or 0 for f in job.files if f.done)
            if not job_file.done:
                _run_file(job, job_file, ctl)
        root = job_root(job)
        job.local_path = str(placement(job, job.files[0]).visible_path if len(job.files) == 1 else root)
        _set_state(job, ctl, DONE)
    except DownloadStopped:
        return
    except DownloadError as exc:
        job.error, job.error_kind = str(exc), exc.reason
        _set_state(job, ctl, FAILED)
    except InvalidInputError as exc:  # a path from the job that would leave its folders (remote_paths)
        job.error, job.error_kind = str(exc), "bad_input"
        _set_state(job, ctl, FAILED)
    except Exception as exc:  # every failure becomes a job state with a reason, never a dead thread
        job.error, job.error_kind = describe_failure(exc)
        _set_state(job, ctl, FAILED)


def describe_failure(exc: Exception) -> tuple[str, str]:
    """A message that says what to do, and its kind, for an error ``fetch_file`` did not classify."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled):
        return "Hugging Face offline mode is on (HF_HUB_OFFLINE): unset it to download.", "network"
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or exc}: {exc.filename}. Check the download folder and its permissions.", "disk"
    log.exception("download failed unexpectedly")
    return f"Unexpected error: {exc}. Retry; the app's log has the details.", "failed"


def _run_file(job: DownloadJob, job_file: JobFile, ctl: JobControl) -> None:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    where = placement(job, job_file)
    ctl.transfer = Transfer()
    if not _already_placed(job, job_file, where.final_path, ctl):
        if job.state == VERIFYING:
            _set_state(job, ctl, DOWNLOADING)
        url = hf_hub_url(job.repo_id, job_file.path, revision=job.commit, endpoint=hub_endpoint(ctl.endpoint))
        headers = build_hf_headers(token=ctl.token or None)
        target = FetchTarget(url, where.partial_path, job_file.size_bytes, headers, job_file.path)
        try:
            digest = fetch_file(target, ctl.transfer, ctl.stop, ctl.policy, ctl.session)
        finally:
            job_file.done_bytes = ctl.transfer.durable_bytes  # fsynced; shown while the job waits
        if job_file.sha256:
            _set_state(job, ctl, VERIFYING)
            if digest != job_file.sha256.lower():
                where.partial_path.unlink(missing_ok=True)
                raise DownloadError(
                    f"{job_file.path}: the sha256 of the downloaded bytes ({digest[:12]}…) does not match the Hub's "
                    f"({job_file.sha256[:12]}…). The file was not placed and the bad copy was removed: download it "
                    "again.",
                    reason="hash",
                )
        if ctl.stop.is_set():
            raise DownloadStopped
    place(job, where)
    job_file.done, job_file.done_bytes = True, job_file.size_bytes or ctl.transfer.done_bytes
    _set_state(job, ctl, DOWNLOADING)


def _already_placed(job: DownloadJob, job_file: JobFile, final_path: Path, ctl: JobControl) -> bool:
    """Whether a verified copy is already there (a cache blob is named by its sha256; a folder copy is hashed,
    with the job shown as verifying meanwhile: no byte arrives, and that is not a stall)."""
    try:
        if job_file.size_bytes is not None and final_path.stat().st_size != job_file.size_bytes:
            return False
    except FileNotFoundError:
        return False
    if job_file.sha256 and final_path.name != job_file.sha256:
        _set_state(job, ctl, VERIFYING)
        return bool(sha256_of_prefix(final_path)[0].hexdigest() == job_file.sha256.lower())
    return True


def remaining_bytes(job: DownloadJob) -> int:
    """Bytes still to fetch: listed sizes minus what the partial files already hold."""
    total = 0
    for job_file in job.files:
        if job_file.done or job_file.size_bytes is None:
            continue
        try:
            have = placement(job, job_file).partial_path.stat().st_size
        except FileNotFoundError:
            have = 0
        total += max(job_file.size_bytes - have, 0)
    return total


def check_free_space(job: DownloadJob) -> None:
    """Raise ``DownloadError`` when the target disk cannot hold the rest of the job."""
    folder = placement(job, job.files[0]).partial_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    need = remaining_bytes(job)
    free = shutil.disk_usage(folder).free
    if need > free:
        raise DownloadError(
            f"Not enough free disk space in {folder}: {format_bytes(need)} needed, {format_bytes(free)} free. "
            "Free some space or choose another download folder.",
            reason="disk",
            setting="download_dir",
        )


@dataclass(frozen=True)
class JobView:
    """A snapshot of one job for a view."""

    id: str
    title: str
    repo_id: str
    state: JobState  # STALLED when no byte came for ``stall_s``
    error: str
    note: str
    done_bytes: int
    total_bytes: int
    speed_bytes_per_s: float
    eta_s: float | None
    local_path: str

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 0.0


class SpeedMeter:
    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()

    def speed(self, now: float, done_bytes: int) -> float:
        self.samples.append((now, done_bytes))
        while len(self.samples) > 2 and now - self.samples[0][0] > SPEED_WINDOW_S:
            self.samples.popleft()
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return max(b1 - b0, 0) / (t1 - t0) if t1 > t0 else 0.0
