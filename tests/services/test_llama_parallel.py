"""``bench run --parallel``: the app's parallel llama.cpp engine (``parallel_chats``) on the tiny real GGUF, its bench
rows, a cancelled run, a bad model."""

from __future__ import annotations

import asyncio
import os

import psutil
import pytest

from app.core.bench.stats import BenchRow
from app.core.bench.workload import BenchWorkload
from app.services.bench.run import BenchTarget, run_bench
from app.services.monitor.nvml import NvmlReader
from tests.support.fake_pynvml import FakePynvml
from tests.support.processes import children_running
from tests.support.waiting import until

WORKLOAD = BenchWorkload(concurrencies=(1, 4), requests=6, max_tokens=6, warmup=1, prompt_words=(6, 20),
                         prompt_weights=(1.0, 1.0))  # fmt: skip


def _no_gpu() -> NvmlReader:
    return NvmlReader(module=FakePynvml(init_error=12))  # NVML library not found, as on this machine


def test_bench_rows_at_concurrency_1_and_4(long_context_gguf):
    target = BenchTarget("llamacpp", str(long_context_gguf), n_ctx=256, parallel=True)
    result = asyncio.run(run_bench(target, WORKLOAD, nvml=_no_gpu(), describe=False))
    assert result["target"]["parallel"] is True
    rows = [BenchRow.from_dict(r) for r in result["rows"]]
    assert [r.concurrency for r in rows] == [1, 4]
    for row in rows:
        assert row.backend == "llamacpp-parallel" and row.skipped is None
        assert row.errors == 0 and row.requests == 6
        assert row.output_tokens == 6 * 6  # greedy on a model that never ends by itself: max_tokens each
        assert 0 < row.ttft_p50_ms <= row.ttft_p90_ms and row.latency_p50_ms <= row.latency_p90_ms
        assert row.ttft_p90_ms <= row.latency_p90_ms
        assert row.memory_source == "rss" and row.peak_memory_bytes > os.path.getsize(long_context_gguf)
        assert "continuous batching" in row.note
    assert [r.parallel_streams for r in rows] == [1, 4]
    assert [r.max_concurrency_sustained for r in rows] == [4, 4]


def _parallel_workers() -> list[int]:
    return [p.pid for p in children_running("llamacpp.parallel_server")]


def test_cancel_kills_the_child(long_context_gguf):
    seen: list[int] = []
    workload = BenchWorkload(concurrencies=(2,), requests=4, max_tokens=4000, warmup=0, prompt_words=(6,),
                             prompt_weights=(1.0,))  # fmt: skip

    async def go() -> None:
        target = BenchTarget("llamacpp", str(long_context_gguf), n_ctx=4096, parallel=True)

        def progress(step) -> None:
            if step.phase == "measuring" and not seen:
                seen.extend(_parallel_workers())

        task = asyncio.create_task(run_bench(target, workload, progress=progress, nvml=_no_gpu(), describe=False))
        await until(lambda: seen or task.done(), timeout=240)  # measuring, in its child process (slow when loaded)
        assert not task.done(), task.result()  # a bench that ended early shows why
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert seen and not any(psutil.pid_exists(pid) for pid in seen)


def test_bad_model_gives_skipped_rows(not_a_gguf, tmp_path):
    for model in (str(not_a_gguf), str(tmp_path / "missing.gguf")):
        target = BenchTarget("llamacpp", model, n_ctx=128, parallel=True)
        result = asyncio.run(run_bench(target, WORKLOAD, nvml=_no_gpu(), describe=False))
        rows = [BenchRow.from_dict(r) for r in result["rows"]]
        assert len(rows) == 2 and all(r.skipped for r in rows)
        why = rows[0].skipped or ""
        assert why.startswith("llama.cpp could not run 1 parallel sequences: ") and os.path.basename(model) in why
