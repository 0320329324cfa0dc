"""``run_bench`` against the real llama.cpp worker and the Ollama test server; the memory sampler; saved runs."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from app.core.bench.stats import BenchRow
from app.core.bench.workload import BenchWorkload
from app.core.errors import ErrorKind
from app.services.bench.memory import PeakMemorySampler, pid_listening_on, tree_rss_bytes
from app.services.bench.run import BenchProgress, BenchRunError, BenchTarget, run_bench
from app.services.bench.store import BenchStore, BenchStoreError
from app.services.monitor.nvml import NvmlReader
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.fake_pynvml import FakeGpu, FakePynvml
from tests.support.processes import children_running

SMALL = BenchWorkload(concurrencies=(1, 3), requests=5, max_tokens=12, warmup=1, prompt_words=(6, 20),
                      prompt_weights=(1.0, 1.0))  # fmt: skip


def _no_gpu() -> NvmlReader:
    return NvmlReader(module=FakePynvml(init_error=12))  # NVML library not found, as on this machine


def _worker_children() -> list[psutil.Process]:
    return children_running("app.backends.llamacpp.worker")


def test_llamacpp_rows_are_consistent(long_context_gguf):
    steps: list[BenchProgress] = []
    target = BenchTarget("llamacpp", str(long_context_gguf), n_ctx=1024)
    result = asyncio.run(run_bench(target, SMALL, progress=steps.append, nvml=_no_gpu(), describe=False))
    rows = [BenchRow.from_dict(r) for r in result["rows"]]
    assert [r.concurrency for r in rows] == [1, 3]
    for row in rows:
        assert row.backend == "llamacpp" and row.skipped is None
        assert row.errors == 0 and row.requests == 5
        # never_eos model: every reply runs to max_tokens, and the worker's exact count says so
        assert row.output_tokens == 5 * 12
        assert row.output_tokens_per_s == pytest.approx(row.output_tokens / row.wall_s)
        assert 0 < row.ttft_p50_ms <= row.ttft_p90_ms <= row.latency_p90_ms
        assert row.latency_p50_ms <= row.latency_p90_ms
        assert row.memory_source == "rss"
        assert row.peak_memory_bytes > os.path.getsize(long_context_gguf)
        assert 0 < row.peak_kv_usage < 1
        assert row.max_concurrency_sustained == 1  # one stream; the others queued
        assert row.preemptions is None  # llama.cpp has no such counter
    assert rows[0].note == "" and "one stream" in rows[1].note
    assert result["target"]["model_name"] == "tiny-8k"
    measuring = [s for s in steps if s.phase == "measuring"]
    assert [s.done for s in measuring if s.concurrency == 1] == [0, 1, 2, 3, 4, 5]
    assert steps[-1].phase == "done" and steps[-1].fraction == 1.0
    assert not _worker_children()  # the worker is closed at the end
    json.dumps(result)  # saved as JSON: everything in it serializes


def test_cancelling_a_run_closes_the_worker(long_context_gguf):
    workload = BenchWorkload(concurrencies=(1,), requests=200, max_tokens=64, warmup=0, prompt_words=(6,),
                             prompt_weights=(1.0,))  # fmt: skip

    async def scenario() -> None:
        started = asyncio.Event()

        def progress(step: BenchProgress) -> None:
            if step.phase == "measuring":
                started.set()

        task = asyncio.create_task(
            run_bench(
                BenchTarget("llamacpp", str(long_context_gguf), n_ctx=512),
                workload,
                progress=progress,
                nvml=_no_gpu(),
                describe=False,
            )
        )
        await asyncio.wait_for(started.wait(), 60)
        assert _worker_children()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    deadline = time.monotonic() + 10
    while _worker_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _worker_children()


def test_bad_workload_is_refused_before_anything_starts():
    with pytest.raises(BenchRunError, match="Max tokens"):
        asyncio.run(run_bench(BenchTarget("llamacpp", "x.gguf"), BenchWorkload(max_tokens=0), describe=False))


def test_ollama_not_running_gives_skipped_rows():
    target = BenchTarget("ollama", "llama3.2", endpoint=FakeOllama.unused_host())
    result = asyncio.run(run_bench(target, SMALL, nvml=_no_gpu(), describe=False))
    rows = [BenchRow.from_dict(r) for r in result["rows"]]
    assert [r.concurrency for r in rows] == [1, 3]
    assert all(r.skipped and "Ollama is not running" in r.skipped for r in rows)
    assert all(r.requests == 0 and r.max_concurrency_sustained is None for r in rows)


def test_vllm_not_running_gives_skipped_rows():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = BenchTarget("vllm", "", endpoint=f"http://127.0.0.1:{port}")
    result = asyncio.run(run_bench(target, SMALL, nvml=_no_gpu(), describe=False))
    assert all("cannot reach vLLM" in r["skipped"] for r in result["rows"])


def test_ollama_rows_count_its_eval_tokens():
    with FakeOllama() as fake:
        fake.add_model("tiny:latest")
        target = BenchTarget("ollama", "tiny:latest", endpoint=fake.host)
        result = asyncio.run(run_bench(target, SMALL, nvml=_no_gpu(), describe=False))
        chats = [r for r in fake.requests_to("/api/chat") if r.json.get("messages")]
    rows = [BenchRow.from_dict(r) for r in result["rows"]]
    for row in rows:
        assert row.errors == 0 and row.skipped is None
        assert row.output_tokens == 5 * 12  # prompts are longer than max_tokens: num_predict cuts each reply
        assert row.ttft_p50_ms <= row.ttft_p90_ms and row.latency_p50_ms <= row.latency_p90_ms
    # Ollama queues beyond OLLAMA_NUM_PARALLEL and does not say how many it runs: unknown, and the note says so
    assert all(row.max_concurrency_sustained is None for row in rows)
    assert "max sustained unknown" in rows[1].note
    # warm-up + measured requests, each with the workload's max_tokens and seed
    assert len(chats) == 2 * (1 + 5)
    measured = [c.json["options"] for c in chats if c.json["options"]["num_predict"] == 12]
    assert sorted(o["seed"] for o in measured) == sorted(2 * [1234 + i for i in range(5)])


def test_ollama_clients_are_set_up_before_the_clock_starts():
    marks: list[tuple[str, int, int]] = []  # (phase, concurrency, requests the server had seen by then)
    with FakeOllama() as fake:
        fake.add_model("tiny:latest")
        target = BenchTarget("ollama", "tiny:latest", endpoint=fake.host)

        def progress(step: BenchProgress) -> None:
            if step.phase != "measuring" or step.done == 0:
                marks.append((step.phase, step.concurrency, len(fake.requests)))

        workload = BenchWorkload(concurrencies=(1, 4), requests=6, max_tokens=6, warmup=1, prompt_words=(8,),
                                 prompt_weights=(1.0,))  # fmt: skip
        result = asyncio.run(run_bench(target, workload, progress=progress, nvml=_no_gpu(), describe=False))
        seen = list(fake.requests)
    assert all(r["errors"] == 0 and r["skipped"] is None for r in result["rows"])
    phases = [(phase, c) for phase, c, _at in marks]
    assert phases == [("loading", 1), ("warm-up", 1), ("measuring", 1), ("warm-up", 4), ("measuring", 4),
                      ("done", 4)]  # fmt: skip
    for start, end in ((marks[2][2], marks[3][2]), (marks[4][2], marks[5][2])):
        window = seen[start:end]
        # while measuring: only measured chats, no client set-up (show, ps, a load chat without messages)
        assert len(window) == 6
        assert all(r.path == "/api/chat" and r.json.get("messages") for r in window), [r.path for r in window]
    assert len([r for r in seen if r.path == "/api/show"]) == 4  # one client per concurrent stream, made once


def test_vllm_levels_and_runs_never_share_a_prompt_opening_and_sustained_is_what_ran(monkeypatch):
    monkeypatch.setattr("app.services.bench.run.METRICS_INTERVAL_S", 0.02)
    workload = BenchWorkload(concurrencies=(1, 4), requests=8, max_tokens=10, warmup=1, prompt_words=(6,),
                             prompt_weights=(1.0,))  # fmt: skip
    with FakeOpenAIServer(models=("tiny",)) as fake:
        fake.token_delay_s = 0.01
        target = BenchTarget("vllm", "tiny", endpoint=fake.base_url)
        first = asyncio.run(run_bench(target, workload, nvml=_no_gpu(), describe=False))
        second = asyncio.run(run_bench(target, workload, nvml=_no_gpu(), describe=False))
        chats = [r.json["messages"][-1]["content"] for r in fake.requests_to("/v1/chat/completions")]
    nonces = first["workload"]["nonce"], second["workload"]["nonce"]
    assert all(nonces) and nonces[0] != nonces[1]
    measured = [c for c in chats if c.startswith("[run ")]
    assert len(measured) == 2 * 2 * 8  # two runs, two levels, eight requests
    openings: dict[str, set[str]] = {}
    for text in measured:
        opening = text.split("\n", 1)[0]
        openings.setdefault(opening, set()).add(text)
    assert sorted(openings) == sorted(f"[run {n} c{c} r1]" for n in nonces for c in (1, 4))
    assert all(len(texts) == 8 for texts in openings.values())  # eight distinct requests behind each tag
    for result in (first, second):
        rows = [BenchRow.from_dict(r) for r in result["rows"]]
        assert all(r.errors == 0 and r.output_tokens == 8 * 10 for r in rows)
        assert rows[1].peak_running_requests is not None and 1 <= rows[1].peak_running_requests <= 4
        known = [min(r.concurrency, r.peak_running_requests) for r in rows if r.peak_running_requests]
        assert all(r.max_concurrency_sustained == max(known) for r in rows)
        assert "peak requests running" in rows[1].note


# --- the memory sampler ------------------------------------------------------------------------------------
def _wait_for_a_sample(sampler: PeakMemorySampler) -> None:
    deadline = time.monotonic() + 30
    while sampler.peak_bytes is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_rss_sampler_covers_the_process_tree():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; b = bytearray(300 * 2**20); sys.stdout.write('x'); sys.stdout.flush(); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.read(1) == b"x"
        own = tree_rss_bytes(os.getpid()) or 0
        assert own >= 300 * 2**20  # this process and its child
        sampler = PeakMemorySampler(os.getpid, None, interval_s=0.05)
        sampler.start()
        _wait_for_a_sample(sampler)
        peak = sampler.stop()
        assert sampler.source == "rss" and peak is not None and peak >= 300 * 2**20
    finally:
        child.kill()
        child.wait()


def test_gpu_sampler_sums_nvml_memory_of_the_tree():
    fake = FakePynvml([FakeGpu(compute=[(os.getpid(), 5 * 2**30), (999_999, 7 * 2**30)]),
                       FakeGpu(compute=[(os.getpid(), 2**30)])])  # fmt: skip
    reader = NvmlReader(module=fake)
    try:
        sampler = PeakMemorySampler(os.getpid, reader, interval_s=0.05)
        sampler.start()
        _wait_for_a_sample(sampler)
        assert sampler.stop() == 6 * 2**30  # both GPUs, not the other process
        assert sampler.source == "gpu"
    finally:
        reader.close()


def test_pid_listening_on_finds_a_local_server_only():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert pid_listening_on(f"http://127.0.0.1:{port}") == os.getpid()
        assert pid_listening_on(f"http://localhost:{port}/v1") == os.getpid()
    assert pid_listening_on("http://example.org:8000") is None


# --- saved runs --------------------------------------------------------------------------------------------
def _run(backend: str, rate: float) -> dict:
    row = BenchRow(backend, 1, requests=4, output_tokens=40, output_tokens_per_s=rate, latency_p90_ms=100.0)
    return {"target": {"backend": backend, "model": "/models/tiny.gguf"}, "workload": {}, "machine": {},
            "rows": [row.to_dict()]}  # fmt: skip


def test_store_saves_lists_and_compares(tmp_path):
    store = BenchStore(tmp_path / "bench")
    assert store.runs() == []
    first = store.save(_run("llamacpp", 100.0))
    second = store.save(_run("llamacpp", 125.0))
    assert first != second and "tiny" in first and not first.endswith(".gguf")
    listed = store.runs()
    assert {r.id for r in listed} == {first, second}
    assert listed[0].best_tokens_per_s in (100.0, 125.0) and listed[0].model == "tiny.gguf"
    assert store.load(first)["rows"][0]["output_tokens_per_s"] == 100.0
    (ratio,) = store.compare(first, second)
    assert ratio["output_tokens_per_s_ratio"] == pytest.approx(1.25)
    assert ratio["latency_p90_ms_ratio"] == pytest.approx(1.0)


def test_store_bad_ids_and_files_say_what_to_do(tmp_path):
    store = BenchStore(tmp_path)
    with pytest.raises(BenchStoreError, match="no saved bench run 'nope'") as missing:
        store.load("nope")
    assert missing.value.kind is ErrorKind.NOT_FOUND and missing.value.setting == "run_id"
    with pytest.raises(BenchStoreError, match="not a saved run") as refused:
        store.load("../etc/passwd")
    assert refused.value.kind is ErrorKind.INVALID_INPUT
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BenchStoreError, match="cannot be read"):
        store.load("broken")
    (tmp_path / "nested.json").write_text('{"rows": ' + "[" * 100_000)
    with pytest.raises(BenchStoreError, match=r"cannot be read \(it is nested too deeply.*delete or fix the file"):
        store.load("nested")
    good = store.save(_run("vllm", 10.0))
    assert [r.id for r in store.runs()] == [good]  # the broken file is left out of the list


def test_store_list_survives_odd_saved_files(tmp_path, caplog):
    store = BenchStore(tmp_path)
    good = store.save(_run("vllm", 10.0))
    no_id = {k: v for k, v in _run("ollama", 5.0).items()}  # hand-written: no "id", no "saved_at"
    (tmp_path / "20000101-000000-no-id.json").write_text(json.dumps(no_id))
    (tmp_path / "20000101-000001-odd-target.json").write_text(json.dumps({**_run("vllm", 1.0), "target": "vllm"}))
    (tmp_path / "20000101-000002-bad-row.json").write_text(json.dumps({"rows": [{"backend": "vllm"}]}))
    with caplog.at_level("WARNING", logger="app.devtools.chat_bench"):
        listed = {r.id: r for r in store.runs()}
    assert set(listed) == {good, "20000101-000000-no-id", "20000101-000001-odd-target"}
    assert listed["20000101-000000-no-id"].backend == "ollama"  # its id is the file's name, which load takes
    assert store.load("20000101-000000-no-id")["rows"]
    assert listed["20000101-000001-odd-target"].backend == "?"
    assert "20000101-000002-bad-row.json" in caplog.text  # the unreadable one is named in the log
