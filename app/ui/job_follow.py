"""One page's view of one kind of long job (``workstation.jobs``): show the job when one of that kind starts, then
its progress and its end while it is the one shown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.services.jobs.events import Job, JobEvent, JobFinished, JobProgress, JobStarted


@dataclass(frozen=True)
class JobFollower:
    """A ``jobs.subscribe`` listener. ``shown`` gives the id of the job the page shows now (None: none);
    ``progressed`` gets the job's progress (never None)."""

    kind: str
    shown: Callable[[], str | None]
    started: Callable[[Job], None]
    progressed: Callable[[Any], None]
    finished: Callable[[Job], None]

    def __call__(self, event: JobEvent) -> None:
        job = event.job
        if job.kind != self.kind:
            return
        if isinstance(event, JobStarted):
            self.started(job)
        elif job.id != self.shown():
            return
        elif isinstance(event, JobProgress) and job.progress is not None:
            self.progressed(job.progress)
        elif isinstance(event, JobFinished):
            self.finished(job)
