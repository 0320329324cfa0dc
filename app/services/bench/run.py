"""``bench run``: the fixed workload (``app.core.bench.workload``) against one engine at several concurrencies.

For each concurrency: warm-up, the N clients set up (``BenchDriver.prepare``), then the measured set (prompts
tagged with the run's nonce and the level, see ``app.core.bench.workload``) by N closed-loop clients while a
helper thread samples the engine's peak memory (``app.services.bench.memory``) and, for vLLM, a task reads
``/metrics`` every ``METRICS_INTERVAL_S`` for peak KV usage, running requests and preemptions. Tokens are the
engine's own counts (llama.cpp's sampled tokens, vLLM's ``usage``, Ollama's ``eval_count``). The result is a dict:
``{"target", "workload", "machine", "rows": [BenchRow.to_dict()…]}`` (see ``app.core.bench.stats.BenchRow``).

An engine that cannot be reached or load the model gives skipped rows with the reason, not an exception;
``BenchRunError`` is only raised for bad settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.bench.stats import BenchRow, RequestSample, summarize, with_sustained
from app.core.bench.workload import WARMUP_MAX_TOKENS, BenchWorkload
from app.core.vllm.metrics import VllmMetrics
from app.services.bench.engines import BenchDriver, BenchRunError, BenchTarget, make_driver
from app.services.bench.memory import PeakMemorySampler

if TYPE_CHECKING:
    from app.services.monitor.nvml import NvmlReader

__all__ = ["BenchProgress", "BenchRunError", "BenchTarget", "run_bench"]

log = logging.getLogger("app.services.bench")
METRICS_INTERVAL_S = 0.25


@dataclass(frozen=True)
class BenchProgress:
    """Where a run is: configuration ``index`` of ``configurations`` (0-based), its phase and finished requests."""

    index: int
    configurations: int
    concurrency: int
    phase: str  # "loading", "warm-up", "measuring", "done"
    done: int = 0
    total: int = 0

    @property
    def fraction(self) -> float:
        within = self.done / self.total if self.total else 0.0
        return min(1.0, (self.index + within) / self.configurations) if self.configurations else 1.0

    def text(self) -> str:
        where = f"concurrency {self.concurrency} ({self.index + 1}/{self.configurations})"
        return f"{where}: {self.phase}" + (f" {self.done}/{self.total}" if self.phase == "measuring" else "")


ProgressCallback = Callable[[BenchProgress], None]


def _new_nvml() -> NvmlReader | None:
    try:
        from app.services.monitor.nvml import NvmlReader
    except ImportError:
        return None
    return NvmlReader()


def _sees_gpu(nvml: NvmlReader | None) -> bool:
    return nvml is not None and bool(nvml.read().gpus)


async def run_bench(
    target: BenchTarget,
    workload: BenchWorkload,
    *,
    progress: ProgressCallback | None = None,
    nvml: NvmlReader | None = None,
    describe: bool = True,
) -> dict[str, Any]:
    """Run ``workload`` against ``target``; return the result dict. Cancel the task to stop; the engine is closed.

    Raises BenchRunError for settings that cannot run (their problems in words). ``nvml``: the GPU reader (None:
    one is made and closed here). ``describe=False`` leaves the machine description out.
    """
    problems = workload.problems()
    if problems:
        raise BenchRunError(" ".join(problems))
    workload = workload.with_nonce()  # the run's own prompt tag: no level or run reuses another's prefix cache
    own_nvml = nvml is None
    reader = nvml if nvml is not None else await asyncio.to_thread(_new_nvml)
    try:
        rows, model_name = await _run_levels(target, workload, progress or (lambda _p: None), reader)
        machine = await asyncio.to_thread(_machine, target, reader) if describe else {}
    finally:
        if own_nvml and reader is not None:
            await asyncio.to_thread(reader.close)
    return {
        "target": {**target.to_dict(), "model_name": model_name},
        "workload": workload.to_dict(),
        "machine": machine,
        "rows": [row.to_dict() for row in with_sustained(rows)],
    }


async def _run_levels(
    target: BenchTarget, workload: BenchWorkload, say: ProgressCallback, nvml: NvmlReader | None
) -> tuple[list[BenchRow], str]:
    levels = workload.concurrencies
    say(BenchProgress(0, len(levels), levels[0], "loading"))
    driver = make_driver(target)
    rows: list[BenchRow] = []
    try:
        try:
            model_name = await driver.open()
        except BenchRunError as exc:
            return [BenchRow(target.backend, c, note=driver.note, skipped=str(exc)) for c in levels], target.model
        gpu_reader = nvml if await asyncio.to_thread(_sees_gpu, nvml) else None
        sampler = PeakMemorySampler(driver.pid, gpu_reader)
        for index, concurrency in enumerate(levels):
            rows.append(await _configuration(driver, workload, index, concurrency, sampler, say))
    finally:
        await driver.close()
    say(BenchProgress(len(levels) - 1, len(levels), levels[-1], "done", 1, 1))
    return rows, model_name


def _machine(target: BenchTarget, nvml: NvmlReader | None) -> dict[str, Any]:
    from app.services.bench.machine_info import describe_machine

    ollama_host = None
    if target.backend == "ollama":
        from app.backends.ollama import resolve_host

        with contextlib.suppress(ValueError):
            ollama_host = resolve_host(target.endpoint)
    return describe_machine(vllm_python=target.vllm_python, ollama_host=ollama_host, nvml=nvml)


async def _configuration(
    driver: BenchDriver,
    workload: BenchWorkload,
    index: int,
    concurrency: int,
    sampler: PeakMemorySampler,
    say: ProgressCallback,
) -> BenchRow:
    levels = len(workload.concurrencies)
    say(BenchProgress(index, levels, concurrency, "warm-up"))
    for n, prompt in enumerate(workload.warmup_prompts()):
        await driver.one(prompt, workload.request_seed(-1 - n), WARMUP_MAX_TOKENS, workload.temperature)
    try:
        await driver.prepare(min(concurrency, workload.requests * workload.repetitions))
    except BenchRunError as exc:
        return BenchRow(driver.name, concurrency, note=driver.note, skipped=str(exc))
    driver.take_peak_kv()
    watch = _MetricsWatch(driver)
    await watch.begin()
    sampler.start()
    try:
        samples, wall_s = await _measure(driver, workload, concurrency, lambda done, total: say(
            BenchProgress(index, levels, concurrency, "measuring", done, total)))  # fmt: skip
    finally:
        peak_bytes = await asyncio.to_thread(sampler.stop)
        await watch.end()
    extra: dict[str, Any] = {
        "peak_memory_bytes": peak_bytes,
        "memory_source": sampler.source,
        "peak_kv_usage": watch.peak_kv if watch.peak_kv is not None else driver.take_peak_kv(),
        "preemptions": watch.counter_delta("preemptions_total"),
        "server_generated_tokens": watch.counter_delta("generation_tokens_total"),
        "parallel_streams": driver.parallel_streams,
        "peak_running_requests": watch.peak_running,
        "spec_acceptance": watch.spec_acceptance(),
        "note": driver.note if concurrency > 1 or getattr(driver, "note_always", False) else "",
    }
    return summarize(driver.name, concurrency, samples, wall_s, **extra)


async def _measure(
    driver: BenchDriver, workload: BenchWorkload, concurrency: int, on_done: Callable[[int, int], None]
) -> tuple[list[RequestSample], float]:
    """The measured set by ``concurrency`` closed-loop clients; returns the samples and the wall time."""
    rounds = [workload.prompts(concurrency, k) for k in range(1, workload.repetitions + 1)]
    jobs = iter([(i, p) for prompts in rounds for i, p in enumerate(prompts)])
    total = sum(len(prompts) for prompts in rounds)
    samples: list[RequestSample] = []
    on_done(0, total)

    async def client() -> None:
        for request_index, prompt in jobs:  # one shared iterator: each client takes the next job
            seed = workload.request_seed(request_index)
            samples.append(await driver.one(prompt, seed, workload.max_tokens, workload.temperature))
            on_done(len(samples), total)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(min(concurrency, total))))
    return samples, time.perf_counter() - started


class _MetricsWatch:
    """Reads the engine's ``/metrics`` (vLLM) before, during and after the measured set."""

    def __init__(self, driver: BenchDriver) -> None:
        self.driver = driver
        self.first: VllmMetrics | None = None
        self.last: VllmMetrics | None = None
        self.peak_kv: float | None = None
        self.peak_running: int | None = None
        self._task: asyncio.Task[None] | None = None

    async def begin(self) -> None:
        self.first = await self.driver.metrics()
        if self.first is not None:
            self._task = asyncio.create_task(self._poll())

    async def end(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
            self._take(await self.driver.metrics())

    def counter_delta(self, name: str) -> int | None:
        before = getattr(self.first, name, None) if self.first else None
        after = getattr(self.last, name, None) if self.last else None
        if before is None or after is None or after < before:
            return None
        return round(after - before)

    def spec_acceptance(self) -> float | None:
        """Accepted over drafted tokens in the measured set (vLLM's speculative decoding); None when none drafted."""
        drafted, accepted = (
            self.counter_delta("spec_draft_tokens_total"),
            self.counter_delta("spec_accepted_tokens_total"),
        )
        return accepted / drafted if drafted and accepted is not None else None

    def _take(self, reading: VllmMetrics | None) -> None:
        if reading is None:
            return
        self.last = reading
        if reading.kv_cache_usage_fraction is not None:
            self.peak_kv = max(self.peak_kv or 0.0, reading.kv_cache_usage_fraction)
        if reading.requests_running is not None:
            self.peak_running = max(self.peak_running or 0, reading.requests_running)

    async def _poll(self) -> None:
        while True:
            self._take(await self.driver.metrics())
            await asyncio.sleep(METRICS_INTERVAL_S)
