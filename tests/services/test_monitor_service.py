"""The monitor service: a real sampler thread on a fake NVML, its samples and events on the loop, bounded history,
the settings followed, and a close that stops it for good."""

from __future__ import annotations

import asyncio
import threading

from app.services.monitor.events import SampleTaken, SamplingChanged
from app.services.monitor.nvml import NvmlReader
from app.services.monitor.sampler import MonitorSampler
from app.services.monitor.service import MonitorService
from app.services.paths import app_paths
from app.services.workstation import Workstation
from tests.support.fake_pynvml import FakeGpu, FakePynvml
from tests.support.waiting import until


def fake_sampler(targets):
    return MonitorSampler(nvml=NvmlReader(FakePynvml([FakeGpu()])), targets=targets)


def test_samples_reach_listeners_on_the_loop_and_the_history_is_bounded() -> None:
    async def main():
        workstation = Workstation.create(app_paths().ensure())
        workstation.update_settings(monitor_interval_s=0.1)
        monitor = MonitorService(lambda: workstation.settings, sampler_factory=fake_sampler, history_capacity=3)
        threads: list[int] = []
        monitor.subscribe(lambda e: threads.append(threading.get_ident()) if isinstance(e, SampleTaken) else None)
        try:
            await asyncio.gather(monitor.start(), monitor.start())  # idempotent: one sampler
            sampler = monitor.sampler
            await monitor.start()
            assert monitor.sampler is sampler and monitor.running
            await until(lambda: len(threads) >= 5, 10)
            assert set(threads) == {threading.get_ident()}  # sampled on its thread, told on the loop's
            state = monitor.snapshot()
            assert len(state.samples) == 3 and state.latest is state.samples[-1] and state.interval_s == 0.1
            assert state.samples[0].taken_at_s < state.samples[-1].taken_at_s
        finally:
            await monitor.close()
            await workstation.close()
        assert sampler is not None and not sampler.running and monitor.sampler is None
        await monitor.close()  # twice: nothing to do
        await monitor.start()  # closed for good
        assert monitor.sampler is None

    asyncio.run(main())


def test_the_workstations_monitor_follows_the_sampling_interval() -> None:
    async def main():
        workstation = Workstation.create(app_paths().ensure())
        workstation.monitor = MonitorService.for_workstation(workstation, sampler_factory=fake_sampler)
        monitor = workstation.monitor
        intervals: list[float | None] = []
        monitor.subscribe(lambda e: intervals.append(e.interval_s) if isinstance(e, SamplingChanged) else None)
        try:
            workstation.update_settings(monitor_interval_s=0.2)  # before the start: read by it
            await monitor.start()
            workstation.update_settings(monitor_interval_s=0.01)  # kept to a sane minimum
            workstation.update_settings(monitor_interval_s=5.0)
            assert intervals == [0.2, 0.1, 5.0] and monitor.sampler is not None and monitor.sampler.interval_s == 5.0
            sampler = monitor.sampler
        finally:
            await workstation.close()  # closes the monitor with the other services
        assert not sampler.running and monitor.snapshot().interval_s is None and intervals[-1] is None

    asyncio.run(main())
