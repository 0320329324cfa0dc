"""The monitor sampler: fake NVML (no GPU here), real psutil, a real llama.cpp worker and a real vLLM server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import httpx
import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.protocol import KvUsage
from app.core.params import LoadParams, SamplingParams
from app.services.monitor.engine_processes import EngineTarget, llamacpp_target, vllm_target
from app.services.monitor.nvml import NvmlReader
from app.services.monitor.sampler import MonitorSampler
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakePynvml

METRICS = (Path(__file__).parents[1] / "data" / "vllm_metrics_real.txt").read_text()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def test_engine_processes_and_gpu_memory_are_attributed() -> None:
    me = os.getpid()
    fake = FakePynvml([FakeGpu(compute=[(me, 3 * 1024**3), (999_999, 1024**3)])], process_names={999_999: "other"})
    target = EngineTarget("llamacpp", "llama.cpp: tiny", True, me, KvUsage(100, 512, {0: 100}))
    sampler = MonitorSampler(nvml=NvmlReader(fake), targets=lambda: [target])
    snap = sampler.sample()
    (engine,) = snap.engines
    assert engine.pids[0] == me
    assert engine.gpu_bytes == 3 * 1024**3
    assert engine.rss_bytes is not None and engine.rss_bytes > 10 * 1024**2
    assert engine.kv is not None and engine.kv.cells_per_sequence == ((0, 100),)
    assert engine.kv.usage_fraction == pytest.approx(100 / 512)
    assert [(r.pid, r.engine) for r in snap.processes] == [(me, "llamacpp"), (999_999, None)]
    assert snap.ram.total_bytes > snap.ram.used_bytes > 0
    assert snap.gpu_unavailable_reason is None


def test_no_driver_still_reports_ram_cpu_and_the_reason() -> None:
    fake = FakePynvml([FakeGpu()], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    snap = MonitorSampler(nvml=NvmlReader(fake)).sample()
    assert snap.gpus == () and snap.gpu_unavailable_reason is not None
    assert snap.gpu_unavailable_reason.startswith("No NVIDIA driver found")
    assert snap.ram.total_bytes > 0 and snap.cpu_percent is not None


def test_vllm_kv_from_metrics_and_tokens_per_second() -> None:
    labels = '{engine="0",model_name="tiny-llama"}'
    busier = (
        METRICS.replace(f"generation_tokens_total{labels} 5152.0", f"generation_tokens_total{labels} 5652.0")
        .replace(f"prefix_cache_queries_total{labels} 182.0", f"prefix_cache_queries_total{labels} 282.0")
        .replace(f"prefix_cache_hits_total{labels} 0.0", f"prefix_cache_hits_total{labels} 75.0")
    )
    assert f"prefix_cache_hits_total{labels} 75.0" in busier and f"queries_total{labels} 282.0" in busier
    pages = iter([METRICS, busier, busier])
    clock = FakeClock()
    sampler = MonitorSampler(
        nvml=NvmlReader(FakePynvml([])),
        targets=lambda: [vllm_target("http://x")],
        clock=clock,
        metrics_fetch=lambda url: next(pages),
    )
    first = sampler.sample().engines[0].kv
    assert first is not None
    assert (first.num_blocks, first.block_size_tokens, first.requests_running) == (8192, 128, 32)
    assert first.usage_fraction == pytest.approx(0.007813453790745939)
    assert first.used_blocks == round(0.007813453790745939 * 8192)
    assert first.total_cells == 8192 * 128
    assert first.generation_tokens_per_s is None  # needs two readings
    assert first.prefix_cache_hit_rate == 0.0  # one reading: since the server started (0 of 182 tokens)
    second = sampler.sample().engines[0].kv
    assert second is not None and second.generation_tokens_per_s == pytest.approx(500 / 0.5)
    assert second.prefix_cache_hit_rate == pytest.approx(75 / 100)  # this interval, not 75 / 282 since start
    third = sampler.sample().engines[0].kv
    assert third is not None and third.generation_tokens_per_s == 0.0
    assert third.prefix_cache_hit_rate is None  # nothing queried in the interval


def test_unreachable_metrics_is_a_problem_not_an_exception() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{free.getsockname()[1]}"  # nothing listens there once closed
    sampler = MonitorSampler(nvml=NvmlReader(FakePynvml([])), targets=lambda: [vllm_target(url)])
    try:
        (engine,) = sampler.sample().engines
    finally:
        sampler.close()
    assert engine.kv is None and engine.problem is not None and f"Nothing answers at {url}" in engine.problem
    bad = MonitorSampler(
        nvml=NvmlReader(FakePynvml([])),
        targets=lambda: [vllm_target("http://x")],
        metrics_fetch=lambda url: "<html>not metrics</html>{",
    )
    assert "is not Prometheus text from vLLM" in (bad.sample().engines[0].problem or "")


def test_a_broken_target_provider_does_not_stop_sampling() -> None:
    def broken() -> list[EngineTarget]:
        raise RuntimeError("boom")

    assert MonitorSampler(nvml=NvmlReader(FakePynvml([])), targets=broken).sample().engines == ()


def test_thread_delivers_snapshots_and_stops_cleanly() -> None:
    got = []
    done = threading.Event()

    def on_snapshot(snap, alerts):
        got.append(snap)
        if len(got) >= 3:
            done.set()

    sampler = MonitorSampler(nvml=NvmlReader(FakePynvml([FakeGpu()])), interval_s=0.02)
    sampler.start(on_snapshot)
    assert done.wait(30)
    thread = sampler._thread
    sampler.close()
    assert not sampler.running and thread is not None and not thread.is_alive()  # no snapshot can come after close
    count = len(got)
    sampler.close()  # a second close is harmless
    assert len(got) == count
    assert [s.taken_at_s for s in got] == sorted(s.taken_at_s for s in got)


def test_long_run_keeps_memory_bounded() -> None:
    me = os.getpid()
    target = EngineTarget("llamacpp", "llama.cpp: tiny", True, me, KvUsage(100, 512))
    sampler = MonitorSampler(
        nvml=NvmlReader(FakePynvml([FakeGpu(compute=[(me, 1)])])),
        targets=lambda: [target],
        clock=FakeClock(),
        history_capacity=300,
    )
    tracemalloc.start()
    for _ in range(1_000):  # fills the history (300) and every cache
        sampler.sample()
    base, _ = tracemalloc.get_traced_memory()
    for _ in range(9_000):
        sampler.sample()
    grown, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(sampler.history) == 300
    assert sampler.history.series["kv_usage_fraction"].points()[0][0] == pytest.approx(1_000.0 + 0.5 * 9_701)
    assert grown - base < 64 * 1024, f"grew {grown - base} bytes over 9,000 samples"


def test_real_llamacpp_worker_kv_cells_after_a_turn(tiny_gguf) -> None:
    backend = LlamaCppBackend()

    async def turn() -> None:
        await backend.load(str(tiny_gguf), LoadParams(n_ctx=512))
        params = SamplingParams(max_tokens=8, temperature=0.0, seed=1)
        async for _ in backend.stream_chat([{"role": "user", "content": "Hello there"}], params):
            pass

    try:
        asyncio.run(asyncio.wait_for(turn(), 60))
        sampler = MonitorSampler(
            nvml=NvmlReader(FakePynvml([])), targets=lambda: [t for t in [llamacpp_target(backend)] if t]
        )
        (engine,) = sampler.sample().engines
        assert engine.loaded and engine.pids[0] == backend.worker_pid
        assert engine.rss_bytes is not None and engine.rss_bytes > 0
        assert engine.kv is not None and engine.kv.total_cells == 512
        assert engine.kv.used_cells is not None and engine.kv.used_cells > 0
        assert engine.kv.cells_per_sequence[0][1] == engine.kv.used_cells
    finally:
        asyncio.run(backend.close())


def test_real_llamacpp_tokens_per_second_while_a_reply_streams(long_context_gguf) -> None:
    """The monitor's llama.cpp tok/s counts sampled tokens only: the prompt's prefill (the context jumps by
    ~300 cells before the first token) must not show as a spike, and the rate is 0 once the reply is done."""
    backend = LlamaCppBackend()
    sampler = MonitorSampler(
        nvml=NvmlReader(FakePynvml([])), targets=lambda: [t for t in [llamacpp_target(backend)] if t]
    )
    samples: list[tuple[float, float | None, int | None]] = []  # (time, tok/s, context cells) per sample

    def take() -> None:
        snapshot = sampler.sample()
        (engine,) = snapshot.engines
        assert engine.kv is not None
        samples.append((snapshot.taken_at_s, engine.kv.generation_tokens_per_s, engine.kv.used_cells))

    async def turn() -> None:
        await backend.load(str(long_context_gguf), LoadParams(n_ctx=2048))
        take()  # idle, before the prompt
        # 1,500 tokens, stopped after the 100th: the reply is still being written at each sample, whatever the speed
        params = SamplingParams(max_tokens=1500, temperature=0.0, seed=1)
        prompt = [{"role": "user", "content": "hello there " * 120}]
        async with contextlib.aclosing(backend.stream_chat(prompt, params)) as deltas:
            async for index, _delta in _enumerate(deltas):
                if index in (0, 40, 100):
                    take()
                if index == 100:
                    break
        take()
        await asyncio.sleep(0.05)
        take()  # idle again

    try:
        asyncio.run(asyncio.wait_for(turn(), 120))
        stats = backend.stats()
    finally:
        asyncio.run(backend.close())
    assert stats is not None and stats.decode_tokens_per_s and stats.prompt_tokens > 200
    rates = [rate for _t, rate, _cells in samples]
    assert rates[0] is None  # one sample: no rate yet
    assert all(r is not None for r in rates[1:]), rates
    bound = 5 * stats.decode_tokens_per_s
    assert max(r for r in rates[1:] if r is not None) < bound, f"tok/s {rates} vs decode {stats.decode_tokens_per_s}"
    # Over the prefill interval the rate accounts for the few tokens sampled, not the ~377-token prompt (the
    # context's growth, which a rate from the KV cells would show).
    prefill_s = samples[1][0] - samples[0][0]
    assert (rates[1] or 0) * prefill_s < stats.prompt_tokens / 2, f"tok/s {rates} over {prefill_s:.4f} s"
    assert (samples[1][2] or 0) >= stats.prompt_tokens  # the KV cells figure still counts the prompt
    assert (rates[3] or 0) > 1.0  # while the reply streams
    assert rates[-1] == 0.0  # idle


async def _enumerate(stream):
    index = 0
    async for item in stream:
        yield index, item
        index += 1


@pytest.mark.slow
def test_real_vllm_under_load_shows_kv_usage_and_running(vllm_server) -> None:
    url, model = vllm_server.base_url, vllm_server.served_model_name
    stop = threading.Event()
    statuses: list[int] = []

    def complete() -> None:
        body = {"model": model, "prompt": "hello " * 20, "max_tokens": 400, "ignore_eos": True}  # max_model_len 512
        with httpx.Client(timeout=120, trust_env=False, headers=vllm_server.headers) as client:
            while not stop.is_set():
                try:
                    statuses.append(client.post(f"{url}/v1/completions", json=body).status_code)
                except httpx.HTTPError:  # the session's server stopped under a request still running
                    return

    workers = [threading.Thread(target=complete, daemon=True) for _ in range(8)]
    for w in workers:
        w.start()
    sampler = MonitorSampler(nvml=NvmlReader(), targets=lambda: [vllm_target(url, pid=vllm_server.server.pid)])
    try:
        seen = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            snap = sampler.sample()
            kv = snap.engines[0].kv
            if kv and kv.requests_running and kv.usage_fraction:
                seen = snap
                break
            time.sleep(0.3)
    finally:
        stop.set()
        sampler.close()
    assert seen is not None, f"no snapshot showed running requests with KV usage (HTTP statuses {statuses[:5]})"
    engine = seen.engines[0]
    assert engine.kv is not None and engine.kv.usage_fraction and engine.kv.usage_fraction > 0
    assert engine.kv.requests_running and engine.kv.requests_running > 0
    assert engine.kv.num_blocks and engine.kv.used_blocks is not None
    assert len(engine.pids) >= 2 and engine.rss_bytes and engine.rss_bytes > 100 * 1024**2  # server + engine core
    print(
        f"\nvLLM under load: usage {engine.kv.usage_fraction:.3f}, running {engine.kv.requests_running}, "
        f"waiting {engine.kv.requests_waiting}, blocks {engine.kv.used_blocks}/{engine.kv.num_blocks}, "
        f"RSS {engine.rss_bytes / 1024**3:.2f} GiB over {len(engine.pids)} processes"
    )


def test_process_tree_counts_children_and_forgets_the_dead() -> None:
    import subprocess
    import sys

    from app.services.monitor.engine_processes import ProcessTrees, rss_bytes

    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        now = [0.0]
        trees = ProcessTrees(refresh_s=5.0, clock=lambda: now[0])
        assert trees.pids(parent.pid) == (parent.pid, child)
        assert (rss_bytes(trees.pids(parent.pid)) or 0) > (rss_bytes([parent.pid]) or 0) > 0
        os.kill(child, 9)
        parent.kill()
        parent.wait(10)
        assert trees.pids(parent.pid) == (parent.pid, child)  # cached until the refresh
        now[0] = 6.0
        assert trees.pids(parent.pid) == ()
        deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously: wait until the child is dead
        while rss_bytes([child]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not rss_bytes([parent.pid, child])  # gone (None), or an unreaped zombie (0)
    finally:
        parent.kill()
        parent.wait(10)
