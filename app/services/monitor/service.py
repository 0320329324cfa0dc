"""The monitor as a workstation service: the sampler thread, the last 1,200 samples, the alerts in force and the
opt-in Prometheus endpoint, from ``start()`` (the window's start-up, a page shown first) until ``close()``.

The sampler takes each sample on its own thread; the sample crosses to the service's loop
(``call_soon_threadsafe``) before anything is told, so listeners run on the loop's thread (the Qt thread in the
window). The interval and the endpoint follow the settings (``monitor_interval_s``, ``prometheus_*``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from app.core.monitor.alerts import Alert
from app.core.monitor.snapshot import MonitorSnapshot
from app.core.settings import Settings
from app.services.events import EventHub
from app.services.monitor.events import (
    AlertsChanged,
    ExporterChanged,
    ExporterState,
    MonitorEvent,
    SampleTaken,
    SamplingChanged,
)
from app.services.settings_changes import SettingsChanged

if TYPE_CHECKING:
    from app.services.engines.host import EngineHost
    from app.services.monitor.engine_processes import EngineTarget
    from app.services.monitor.prometheus import PrometheusExporter
    from app.services.monitor.sampler import MonitorSampler

log = logging.getLogger("app.services")

HISTORY_CAPACITY = 1200  # 10 minutes at 2 Hz
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 60.0
TargetsProvider = Callable[[], Sequence["EngineTarget"]]
SamplerFactory = Callable[[TargetsProvider], "MonitorSampler"]


def default_sampler(targets: TargetsProvider) -> MonitorSampler:
    """A real sampler (real NVML); built in an executor, so its imports and NVML's start stay off the loop."""
    from app.services.monitor.sampler import MonitorSampler

    return MonitorSampler(targets=targets)


class Watched(Protocol):
    """What the monitor needs of the workstation (named so, not imported: the workstation imports this module)."""

    settings: Settings
    host: EngineHost

    def subscribe(self, listener: Callable[[SettingsChanged], None]) -> Callable[[], None]: ...


@dataclass(frozen=True)
class MonitorState:
    """What a view needs when it opens: the samples kept (oldest first), the alerts, sampling and the endpoint."""

    samples: tuple[MonitorSnapshot, ...]
    alerts: tuple[Alert, ...]
    interval_s: float | None  # None until sampling begins
    exporter: ExporterState

    @property
    def latest(self) -> MonitorSnapshot | None:
        return self.samples[-1] if self.samples else None


class MonitorService:
    def __init__(
        self,
        settings: Callable[[], Settings],
        targets: TargetsProvider = tuple,
        *,
        sampler_factory: SamplerFactory = default_sampler,
        history_capacity: int = HISTORY_CAPACITY,
    ) -> None:
        self._settings = settings
        self._targets_provider = targets
        self._factory = sampler_factory
        self._events: EventHub[MonitorEvent] = EventHub()
        self._samples: deque[MonitorSnapshot] = deque(maxlen=history_capacity)
        self._targets: tuple[EngineTarget, ...] = ()  # read by the sampler's thread; replaced, never mutated
        self.alerts: tuple[Alert, ...] = ()
        self.sampler: MonitorSampler | None = None
        self._exporter: PrometheusExporter | None = None
        self._exporter_state = ExporterState()
        self._exporter_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._unfollow: Callable[[], None] = lambda: None
        self._closed = False

    @classmethod
    def for_workstation(
        cls,
        workstation: Watched,
        *,
        targets: TargetsProvider | None = None,
        sampler_factory: SamplerFactory = default_sampler,
    ) -> MonitorService:
        """Following the workstation's settings and watching its host's engines (unless ``targets`` are given)."""
        from app.services.monitor.engine_processes import host_targets

        watched = targets or (lambda: host_targets(workstation.host))
        service = cls(lambda: workstation.settings, watched, sampler_factory=sampler_factory)
        service._unfollow = workstation.subscribe(service.settings_changed)
        return service

    # --- reading ------------------------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[MonitorEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every event from now on (on the loop); returns the function that unsubscribes."""
        return self._events.subscribe(listener)

    def snapshot(self) -> MonitorState:
        interval = self.sampler.interval_s if self.sampler is not None else None
        return MonitorState(tuple(self._samples), self.alerts, interval, self._exporter_state)

    @property
    def running(self) -> bool:
        return self.sampler is not None and self.sampler.running

    # --- lifecycle ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Begin sampling (and serving the endpoint when it is on); idempotent, a no-op once closed."""
        if self._closed:
            return
        if self._start_task is None:
            self._start_task = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(self._start_task)

    async def _start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._refresh_targets()
        sampler = await loop.run_in_executor(None, self._factory, lambda: self._targets)
        if self._closed:
            await loop.run_in_executor(None, sampler.close)
            return
        sampler.interval_s = self._interval()
        self.sampler = sampler
        sampler.start(self._from_sampler_thread)
        self._events.emit(SamplingChanged(sampler.interval_s))
        await self.apply_exporter()

    async def close(self) -> None:
        """Stop sampling and the endpoint; later samples are dropped. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unfollow()
        if self._start_task is not None:
            await asyncio.wait({self._start_task}, timeout=10)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
        loop = asyncio.get_running_loop()
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            await loop.run_in_executor(None, sampler.close)
            self._events.emit(SamplingChanged(None))
        async with self._exporter_lock:
            await self._stop_exporter(loop)

    # --- samples: from the sampler's thread to the loop ---------------------------------------------------------
    def _from_sampler_thread(self, sample: MonitorSnapshot, alerts: tuple[Alert, ...]) -> None:
        loop = self._loop
        try:
            if loop is None or self._closed:
                raise RuntimeError("the monitor is closed")
            loop.call_soon_threadsafe(self._taken, sample, alerts)
        except RuntimeError:  # the loop is closed (the app went without close()): stop sampling for it
            if self.sampler is not None:
                self.sampler.request_stop()

    def _taken(self, sample: MonitorSnapshot, alerts: tuple[Alert, ...]) -> None:
        if self._closed:
            return
        self._samples.append(sample)
        if self._exporter is not None:
            self._exporter.update(sample, alerts)
        self._refresh_targets()
        if alerts != self.alerts:
            self.alerts = alerts
            self._events.emit(AlertsChanged(alerts))
        self._events.emit(SampleTaken(sample))

    def _refresh_targets(self) -> None:
        try:
            self._targets = tuple(self._targets_provider())
        except Exception as exc:  # the engines' state must not stop the monitor
            log.warning("monitor: could not list the engines: %s", exc)

    # --- settings -----------------------------------------------------------------------------------------------
    def settings_changed(self, event: SettingsChanged) -> None:
        if self._closed or self.sampler is None:  # not started: start() reads the settings
            return
        if event.touches("monitor_interval_s"):
            self.sampler.interval_s = self._interval()
            self._events.emit(SamplingChanged(self.sampler.interval_s))
        if event.touches("prometheus_enabled", "prometheus_port"):
            self._spawn(self.apply_exporter())

    def _interval(self) -> float:
        return min(max(float(self._settings().monitor_interval_s), MIN_INTERVAL_S), MAX_INTERVAL_S)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the Prometheus endpoint ----------------------------------------------------------------------------------
    async def apply_exporter(self) -> None:
        """Serve the endpoint as the settings say (on, off, another port); tried again when called again after a
        failure (a port in use). Tells ``ExporterChanged``."""
        from app.services.monitor.prometheus import PrometheusExporter, PrometheusExportError

        async with self._exporter_lock:
            if self._closed:
                return
            loop = asyncio.get_running_loop()
            settings = self._settings()
            wanted = settings.prometheus_port if settings.prometheus_enabled else None
            running = self._exporter.port if self._exporter is not None else None
            if wanted == running and not self._exporter_state.problem:
                return
            await self._stop_exporter(loop)
            state = ExporterState()
            if wanted is not None:
                exporter = PrometheusExporter(wanted)
                try:
                    await loop.run_in_executor(None, exporter.start)
                except PrometheusExportError as exc:
                    state = ExporterState(problem=str(exc))
                else:
                    if self._samples:
                        exporter.update(self._samples[-1], self.alerts)
                    self._exporter, state = exporter, ExporterState(url=exporter.url)
            self._exporter_state = state
            self._events.emit(ExporterChanged(state))  # also after a retry that failed the same way

    async def _stop_exporter(self, loop: asyncio.AbstractEventLoop) -> None:
        exporter, self._exporter = self._exporter, None
        if exporter is not None:
            await loop.run_in_executor(None, exporter.stop)
