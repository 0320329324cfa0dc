"""The monitor's sampler: GPUs (NVML), RAM and CPU (psutil), and the engines' memory and KV cache.

``sample()`` takes one immutable :class:`MonitorSnapshot` (blocking: NVML, ``/proc``, an HTTP GET of vLLM's
``/metrics``); ``start()`` runs it on its own thread at a set interval (default 2 Hz) and hands each snapshot
to a callback, which must not block (the monitor service posts it to its loop). History is bounded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from app.core.monitor.alerts import Alert, AlertThresholds, AlertTracker
from app.core.monitor.snapshot import EngineReading, KvReading, MonitorSnapshot, RamReading
from app.core.monitor.timeseries import MonitorHistory
from app.core.vllm.metrics import MetricsParseError, VllmMetrics, VllmRates, figures_from_page, rates
from app.services.monitor.engine_processes import EngineTarget, ProcessTrees, attribute_gpu_processes, rss_bytes
from app.services.monitor.nvml import NvmlReader
from app.services.vllm.metrics import BlockingMetricsReader

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.5

SnapshotListener = Callable[[MonitorSnapshot, tuple[Alert, ...]], None]
MetricsFetch = Callable[[str], str]


class MonitorSampler:
    """Takes snapshots on demand or on a background thread. Not for the Qt thread: ``sample()`` blocks."""

    def __init__(
        self,
        *,
        nvml: NvmlReader | None = None,
        targets: Callable[[], Sequence[EngineTarget]] = tuple,
        interval_s: float = DEFAULT_INTERVAL_S,
        history_capacity: int = 1200,
        clock: Callable[[], float] = time.time,
        metrics_fetch: MetricsFetch | None = None,
        thresholds: AlertThresholds | None = None,
    ) -> None:
        self.nvml = nvml if nvml is not None else NvmlReader()
        self.interval_s = interval_s
        self.history = MonitorHistory(history_capacity)
        self.alert_tracker = AlertTracker(thresholds)
        self.latest: MonitorSnapshot | None = None
        self.alerts: tuple[Alert, ...] = ()
        self._targets = targets
        self._clock = clock
        self._reader = BlockingMetricsReader()
        self._fetch = metrics_fetch or self._reader.page
        self._trees = ProcessTrees()
        self._metrics_before: dict[str, tuple[float, VllmMetrics]] = {}
        self._generated_before: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- one sample ---------------------------------------------------------------

    def sample(self) -> MonitorSnapshot:
        """Take, remember and return one snapshot; never raises for a missing GPU or engine."""
        with self._lock:
            now = self._clock()
            readout = self.nvml.read()
            engines, processes = self._engines(readout.gpus, now)
            snapshot = MonitorSnapshot(
                taken_at_s=now,
                gpus=readout.gpus,
                gpu_unavailable_reason=readout.unavailable_reason,
                ram=_ram(),
                cpu_percent=_cpu_percent(),
                engines=engines,
                processes=processes,
            )
            self.alerts = self.alert_tracker.update(snapshot)
            self.latest = snapshot
            self.history.add(snapshot)
            return snapshot

    def _engines(self, gpus: Sequence[Any], now: float) -> tuple[tuple[EngineReading, ...], tuple[Any, ...]]:
        try:
            targets = list(self._targets())
        except Exception as exc:  # a target provider must not stop the monitor
            log.warning("monitor: could not list the engines: %s", exc)
            targets = []
        pids = {t.kind: self._trees.pids(t.root_pid) if t.root_pid else () for t in targets}
        self._trees.forget_except(t.root_pid for t in targets if t.root_pid)
        rows, gpu_bytes = attribute_gpu_processes(gpus, pids)
        readings = []
        for target in targets:
            kv, problem = self._kv(target, now)
            readings.append(
                EngineReading(
                    kind=target.kind,
                    label=target.label,
                    loaded=target.loaded,
                    pids=pids[target.kind],
                    rss_bytes=rss_bytes(pids[target.kind]),
                    gpu_bytes=gpu_bytes.get(target.kind),
                    kv=kv,
                    problem=problem,
                )
            )
        return tuple(readings), rows

    def _kv(self, target: EngineTarget, now: float) -> tuple[KvReading | None, str | None]:
        if target.metrics_url:
            return self._vllm_kv(target.metrics_url, now)
        kv = target.kv
        if kv is None:
            return None, None
        per_sequence = tuple(sorted(kv.per_sequence.items())) or ((0, kv.used_cells),)
        return (
            KvReading(
                usage_fraction=kv.fraction,
                used_cells=kv.used_cells,
                total_cells=kv.total_cells,
                cells_per_sequence=per_sequence,
                generation_tokens_per_s=self._generation_per_s(target.kind, target.generated_tokens, now),
            ),
            None,
        )

    def _generation_per_s(self, key: str, generated: int | None, now: float) -> float | None:
        """llama.cpp's tokens/s: how fast its count of sampled tokens grew since the last sample (0 when idle).
        Not the context's growth, which also counts the prompt as it is processed."""
        before = self._generated_before.get(key)
        if generated is None:
            self._generated_before.pop(key, None)
            return None
        self._generated_before[key] = (now, generated)  # one entry per engine kind
        if before is None or now <= before[0] or generated < before[1]:  # first reading, or a new backend
            return None
        return (generated - before[1]) / (now - before[0])

    def _vllm_kv(self, url: str, now: float) -> tuple[KvReading | None, str | None]:
        try:
            metrics = figures_from_page(self._fetch(url), url)
        except MetricsParseError as exc:
            return None, str(exc)
        except Exception as exc:  # MetricsUnavailableError (in words), or an injected fetch's failure
            return None, f"vLLM's /metrics at {url} could not be read: {exc}"
        before = self._metrics_before.get(url)
        self._metrics_before = {url: (now, metrics)} | {k: v for k, v in self._metrics_before.items() if k != url}
        interval = rates(before[1], metrics, now - before[0]) if before is not None and now > before[0] else None
        return _vllm_reading(metrics, interval), None

    # -- background thread ----------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, on_snapshot: SnapshotListener) -> None:
        """Sample every ``interval_s`` on a daemon thread, calling ``on_snapshot`` from that thread."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(on_snapshot,), name="monitor-sampler", daemon=True)
        self._thread.start()

    def _run(self, on_snapshot: SnapshotListener) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                snapshot = self.sample()
                on_snapshot(snapshot, self.alerts)
            except Exception:  # keep sampling; the log says what broke
                log.exception("monitor sample failed")
            next_at = max(next_at + self.interval_s, time.monotonic())
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def request_stop(self) -> None:
        """Ask the thread to stop after the sample in progress; returns at once (any thread)."""
        self._stop.set()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop the thread (waits for a sample in progress); safe to call twice."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def close(self) -> None:
        """Stop, shut NVML down and close the HTTP client."""
        self.stop()
        self.nvml.close()
        self._reader.close()


def _ram() -> RamReading:
    memory = psutil.virtual_memory()
    return RamReading(int(memory.total), int(memory.total - memory.available), int(memory.available))


def _cpu_percent() -> float | None:
    try:
        return float(psutil.cpu_percent(interval=None))
    except Exception:
        return None


def _scaled(blocks: int | None, block_size: int | None) -> int | None:
    return None if blocks is None or block_size is None else blocks * block_size


def _vllm_reading(metrics: VllmMetrics, interval: VllmRates | None) -> KvReading:
    """The reading from one page and, where there was an earlier one, the interval since (rates need two)."""
    hit_rate, acceptance = metrics.prefix_cache_hit_rate, metrics.spec_acceptance_rate  # since the start, until…
    if interval is not None:  # …two readings give the figures over the last interval
        hit_rate = interval.prefix_cache_hit_rate
        acceptance = interval.spec_acceptance_rate if interval.spec_acceptance_rate is not None else acceptance
    return KvReading(
        usage_fraction=metrics.kv_cache_usage_fraction,
        used_cells=_scaled(metrics.kv_used_blocks, metrics.block_size_tokens),
        total_cells=metrics.kv_capacity_tokens,
        num_blocks=metrics.num_gpu_blocks,
        used_blocks=metrics.kv_used_blocks,
        block_size_tokens=metrics.block_size_tokens,
        requests_running=metrics.requests_running,
        requests_waiting=metrics.requests_waiting,
        preemptions_total=None if metrics.preemptions_total is None else int(metrics.preemptions_total),
        prefix_cache_hit_rate=hit_rate,
        generation_tokens_per_s=interval.generation_tokens_per_s if interval else None,
        spec_acceptance_rate=acceptance,
        spec_mean_accepted_length=metrics.spec_mean_accepted_length,
        host_tier_capacity_bytes=metrics.kv_offloading_capacity_bytes,
        host_tier_store_bytes_total=metrics.kv_offload_store_bytes_total,
        host_tier_load_bytes_total=metrics.kv_offload_load_bytes_total,
        host_tier_store_bytes_per_s=interval.kv_offload_store_bytes_per_s if interval else None,
        host_tier_load_bytes_per_s=interval.kv_offload_load_bytes_per_s if interval else None,
        host_swap_bytes_lower_bound=metrics.host_swap_bytes_lower_bound,
        cached_prompt_tokens_by_source=tuple(sorted(metrics.prompt_tokens_cached_by_source.items())),
    )
