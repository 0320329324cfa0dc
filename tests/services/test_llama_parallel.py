"""llama.cpp parallel sequences (``app.backends.llamacpp.parallel``) on the tiny real GGUF, and its bench rows."""

from __future__ import annotations

import asyncio
import os

import psutil
import pytest

from app.backends.llamacpp.parallel import ParallelLlama, ParallelLlamaError
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
        assert row.output_tokens == 6 * 6  # EOS ignored: exactly max_tokens each, counted by the child
        assert 0 < row.ttft_p50_ms <= row.ttft_p90_ms and row.latency_p50_ms <= row.latency_p90_ms
        assert row.ttft_p90_ms <= row.latency_p90_ms
        assert row.memory_source == "rss" and row.peak_memory_bytes > os.path.getsize(long_context_gguf)
        assert "no chat template" in row.note
    assert [r.parallel_streams for r in rows] == [1, 4]
    assert [r.max_concurrency_sustained for r in rows] == [4, 4]


def test_more_requests_than_slots_all_finish(long_context_gguf):
    async def go() -> tuple[list, dict, int | None]:
        engine = ParallelLlama()
        await engine.start(str(long_context_gguf), 2, 128)
        try:
            results = await asyncio.gather(*(engine.generate(f"request {i} says hello", 5) for i in range(5)))
            return results, engine.info, engine.pid
        finally:
            await engine.close()

    results, info, pid = asyncio.run(go())
    assert info["slots"] == 2 and info["n_ctx"] >= 2 * 128  # llama.cpp pads n_ctx to a multiple of 256
    assert [r.tokens for r in results] == [5] * 5 and all(r.prompt_tokens > 0 for r in results)
    # the fifth request waited for a freed sequence: its latency covers at least one earlier reply
    assert max(r.latency_ms for r in results) > min(r.latency_ms for r in results)
    assert pid is not None and not psutil.pid_exists(pid)


def test_request_longer_than_the_sequence_context_is_an_error_not_a_crash(long_context_gguf):
    async def go() -> tuple[str, int]:
        engine = ParallelLlama()
        await engine.start(str(long_context_gguf), 1, 32)
        try:
            with pytest.raises(ParallelLlamaError) as caught:
                await engine.generate("word " * 10, 40)
            after = await engine.generate("still alive", 3)  # the child survives a rejected request
            return str(caught.value), after.tokens
        finally:
            await engine.close()

    message, tokens = asyncio.run(go())
    assert "per-sequence context 32" in message and "raise the context size" in message
    assert tokens == 3


def _parallel_workers() -> list[int]:
    return [p.pid for p in children_running("llamacpp.parallel_worker")]


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
        assert "could not load the model" in (rows[0].skipped or "")


def test_a_nested_request_line_is_a_bad_request_not_a_crash():
    from app.backends.llamacpp.parallel_worker import _admit

    for line in ("[" * 100_000, '{"a":' * 100_000, "[1, 2]"):
        answer = _admit(None, line, 0.0)  # type: ignore[arg-type]  # refused before the engine is used
        assert answer["id"] is None and answer["error"].startswith("bad request: the request ")


def test_lines_from_the_worker_that_are_not_json_objects_are_skipped():
    from types import SimpleNamespace

    async def go() -> dict | None:
        reader = asyncio.StreamReader(limit=1 << 20)
        reader.feed_data(b"[" * 100_000 + b"\nllama.cpp chatter\n[1]\n" + b'{"ready": {"n_ctx": 32}}\n')
        reader.feed_eof()
        return await ParallelLlama()._read(SimpleNamespace(stdout=reader))  # type: ignore[arg-type]

    assert asyncio.run(go()) == {"ready": {"n_ctx": 32}}
