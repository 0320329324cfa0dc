"""A bench run as a workstation job (kind ``bench``): the Bench page starts it and it keeps running while the
page is hidden. The run is :func:`app.services.bench.run.run_bench`, then (unless every row was skipped) saved
to the store; cancelling it saves nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.bench.workload import BenchWorkload
from app.services.bench.store import BenchStore, BenchStoreError, rows_of
from app.services.jobs.events import Job
from app.services.jobs.service import JobService, Progress

if TYPE_CHECKING:  # the run's modules (httpx among them) load with the first run
    from app.services.bench.engines import BenchTarget

BENCH = "bench"


@dataclass(frozen=True)
class BenchOutcome:
    """A finished run (its ``Job.result``): the result dict, and the saved run's id or why it was not saved."""

    result: dict[str, Any]
    run_id: str | None = None
    save_error: str | None = None

    @property
    def all_skipped(self) -> bool:
        rows = rows_of(self.result)
        return bool(rows) and all(row.skipped for row in rows)


def start_bench(jobs: JobService, target: BenchTarget, workload: BenchWorkload, store: BenchStore | None) -> Job:
    """Run the bench (progress reports are ``BenchProgress``; a bad setting fails with ``BenchRunError``) and save
    its result to ``store`` (None: not saved)."""

    async def work(progress: Progress) -> BenchOutcome:
        from app.services.bench.run import run_bench

        outcome = BenchOutcome(await run_bench(target, workload, progress=progress))
        if store is None or outcome.all_skipped:
            return outcome
        try:
            run_id = await asyncio.get_running_loop().run_in_executor(None, store.save, outcome.result)
        except BenchStoreError as exc:
            return BenchOutcome(outcome.result, save_error=str(exc))
        return BenchOutcome(outcome.result, run_id=run_id)

    title = f"Benchmarking {target.model or target.endpoint} on {target.backend}"
    return jobs.start(BENCH, work, title=title, spec=target)
