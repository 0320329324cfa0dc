"""A batch run as a workstation job (kind ``batch``): the window's Batch page starts it, and it keeps running
while the page is hidden. Cancel is the runner's graceful stop: what finished stays in the output file and the
job's result is the summary so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.batch.input import BatchRequest
from app.services.batch.runner import BatchRunner, BatchSummary
from app.services.jobs.events import Job
from app.services.jobs.service import JobService, Progress

BATCH = "batch"


@dataclass(frozen=True)
class BatchJob:
    """What a batch job was started with (its ``Job.spec``)."""

    endpoint: str  # the runner's normalized base URL
    output: str
    requests: int


def start_batch(jobs: JobService, runner: BatchRunner, requests: Sequence[BatchRequest], output: str) -> Job:
    """Run ``requests`` through ``runner`` into ``output``; progress reports are :class:`BatchProgress`, the
    result a :class:`BatchSummary`, a failure a ``BatchError``."""

    async def work(progress: Progress) -> BatchSummary:
        return await runner.run(requests, output, progress)

    title = f"Running {len(requests)} requests against {runner.endpoint}"
    spec = BatchJob(runner.endpoint, output, len(requests))
    return jobs.start(BATCH, work, title=title, spec=spec, stop=runner.cancel, progress_interval_s=0)
