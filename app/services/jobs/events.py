"""What the job service tells its listeners: a job started, moved on (throttled), finished. Each event carries
the job's frozen snapshot (:class:`Job`), so a listener never reads the service's mutable state."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    RUNNING = "running"
    DONE = "done"  # the work returned: ``result``
    FAILED = "failed"  # the work raised: ``error``
    CANCELLED = "cancelled"  # cancelled: ``result`` may still hold what a graceful stop returned


@dataclass(frozen=True)
class Job:
    """One job as it is now. ``spec`` is what it was started with (opaque to the service: the starter's own
    frozen description, e.g. the batch's output file); ``progress`` the latest report of the work."""

    id: str
    kind: str  # "batch", "bench", "vllm-install"
    title: str
    spec: object = None
    state: JobState = JobState.RUNNING
    progress: object = None
    result: object = None
    error: BaseException | None = None
    cancel_requested: bool = False

    @property
    def running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def cancelled(self) -> bool:
        return self.state is JobState.CANCELLED


@dataclass(frozen=True)
class JobStarted:
    job: Job


@dataclass(frozen=True)
class JobProgress:
    """The work reported progress (at most every ``progress_interval_s`` per job; the latest is never lost)."""

    job: Job


@dataclass(frozen=True)
class JobFinished:
    """Done, failed or cancelled: ``job.state`` says which, ``job.result`` / ``job.error`` what came of it."""

    job: Job


JobEvent = JobStarted | JobProgress | JobFinished
