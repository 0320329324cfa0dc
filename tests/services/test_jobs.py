"""The workstation's job service: a job's progress (throttled, the latest never lost), its result or error,
cancel (a graceful stop first), blocking jobs in an executor, and close cancelling what runs, in order."""

from __future__ import annotations

import asyncio
import threading

from app.core.errors import AppError
from app.services.jobs.events import JobFinished, JobProgress, JobStarted, JobState
from app.services.jobs.service import JobService
from tests.support.waiting import until


def run(coro, timeout_s: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def _record(jobs: JobService) -> list:
    events: list = []
    jobs.subscribe(events.append)
    return events


def test_a_job_reports_progress_and_its_result():
    async def scenario():
        jobs = JobService()
        events = _record(jobs)

        async def work(progress):
            for step in range(50):
                progress(step)
                await asyncio.sleep(0)
            return "done"

        job = jobs.start("bench", work, title="Counting", spec={"n": 50}, progress_interval_s=10)
        assert jobs.running("bench") == job and job.running
        finished = await jobs.wait(job.id)
        assert finished is not None and finished.state is JobState.DONE and finished.result == "done"
        assert finished.progress == 49 and finished.spec == {"n": 50}
        kinds = [type(event) for event in events]
        assert kinds[0] is JobStarted and kinds[-1] is JobFinished
        assert kinds.count(JobProgress) == 1  # throttled: the first report; the last is in the finished job
        assert jobs.snapshot() == (finished,) and jobs.last("bench") == finished and jobs.running("bench") is None

    run(scenario())


def test_the_latest_progress_reaches_listeners_after_the_interval():
    async def scenario():
        jobs = JobService()
        events = _record(jobs)
        release = asyncio.Event()

        async def work(progress):
            for step in range(3):
                progress(step)
            await release.wait()

        job = jobs.start("batch", work, progress_interval_s=0.05)
        await until(lambda: [e.job.progress for e in events if isinstance(e, JobProgress)] == [0, 2])
        release.set()
        await jobs.wait(job.id)

    run(scenario())


def test_a_failure_is_the_jobs_error():
    async def scenario():
        jobs = JobService()

        async def work(progress):
            raise AppError("The server refused the API key.")

        job = jobs.start("batch", work)
        finished = await jobs.wait(job.id)
        assert finished is not None and finished.state is JobState.FAILED
        assert str(finished.error) == "The server refused the API key." and finished.result is None

    run(scenario())


def test_cancel_asks_the_graceful_stop_first_then_cancels_the_task():
    async def scenario():
        jobs = JobService()
        stop = asyncio.Event()

        async def graceful(progress):
            await stop.wait()
            return "partial"

        job = jobs.start("batch", graceful, stop=stop.set)
        assert jobs.cancel(job.id)
        finished = await jobs.wait(job.id)
        assert finished is not None and finished.state is JobState.CANCELLED and finished.result == "partial"

        async def stubborn(progress):
            await asyncio.Event().wait()

        job = jobs.start("batch", stubborn, stop=lambda: None)
        jobs.cancel(job.id)  # the stop does nothing: the second cancel ends the task
        await asyncio.sleep(0)
        assert jobs.job(job.id).running and jobs.job(job.id).cancel_requested
        jobs.cancel(job.id)
        finished = await jobs.wait(job.id)
        assert finished is not None and finished.cancelled and finished.result is None
        assert not jobs.cancel(job.id)  # finished: nothing to cancel

    run(scenario())


def test_a_blocking_job_runs_in_an_executor_and_stops_when_cancelled():
    async def scenario():
        jobs = JobService()
        events = _record(jobs)
        loop_thread = threading.get_ident()
        heard_on: set[int] = set()
        jobs.subscribe(lambda event: heard_on.add(threading.get_ident()))

        def work(progress, cancelled: threading.Event) -> int:
            steps = 0
            while not cancelled.wait(0.01):
                steps += 1
                progress(steps)
            return steps

        job = jobs.start_blocking("vllm-install", work, progress_interval_s=0)
        await until(lambda: any(isinstance(e, JobProgress) for e in events))
        jobs.cancel(job.id)
        finished = await jobs.wait(job.id)
        assert finished is not None and finished.cancelled and finished.result >= 1
        assert heard_on == {loop_thread}  # progress hopped to the loop before listeners heard it

    run(scenario())


def test_close_cancels_the_running_jobs_in_order_and_waits():
    async def scenario():
        jobs = JobService()
        started: list[str] = []
        ended: list[str] = []

        def job(name: str):
            async def work(progress):
                started.append(name)
                try:
                    await asyncio.Event().wait()
                finally:
                    await asyncio.sleep(0.01)  # its clean-up takes a moment: close waits for it
                    ended.append(name)

            return work

        first, second = jobs.start("batch", job("batch")), jobs.start("bench", job("bench"))
        await until(lambda: len(started) == 2)
        await jobs.close()
        assert ended == ["batch", "bench"]
        assert [j.state for j in jobs.snapshot()] == [JobState.CANCELLED, JobState.CANCELLED]
        assert [j.id for j in jobs.snapshot()] == [first.id, second.id]
        try:
            jobs.start("batch", job("late"))
        except RuntimeError:
            pass
        else:
            raise AssertionError("a closed service started a job")

    run(scenario())


def test_the_workstation_close_cancels_its_running_jobs():
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    async def scenario():
        workstation = Workstation.create(app_paths().ensure())
        started = asyncio.Event()

        async def work(progress):
            started.set()
            await asyncio.Event().wait()

        job = workstation.jobs.start("bench", work)
        await started.wait()
        await workstation.close()
        finished = workstation.jobs.job(job.id)
        assert finished is not None and finished.cancelled

    run(scenario())
