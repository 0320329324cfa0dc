"""The engine host with real parts: the real llama.cpp worker on generated GGUFs, a vLLM-speaking server, a stub
for the app's own vLLM server. The busy rule, the events, the vLLM lifecycle and the monitor's view."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.errors import UnavailableError
from app.core.params import LoadParams, SamplingParams
from app.services.engines.entries import EngineKind
from app.services.engines.events import (
    EngineStateChanged,
    LoadWaiting,
    ModelLoaded,
    ModelUnloaded,
    QueueChanged,
    ReplyFigures,
    VllmEndpoint,
    VllmEndpointChanged,
)
from app.services.engines.host import EngineHost
from app.services.monitor.engine_processes import host_targets
from app.services.vllm.server import VllmServerError
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.waiting import until

USER = [{"role": "user", "content": "hello there"}]
GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _collect(reply) -> str:
    return "".join([delta.text async for delta in reply])


def test_host_is_qt_free_and_reports_load_state_and_figures(tiny_gguf):
    """In a fresh interpreter: load, stream, events — and PySide6 is never imported."""
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from app.core.params import LoadParams, SamplingParams
        from app.services.engines.entries import EngineKind
        from app.services.engines.host import EngineHost

        async def main():
            host, events = EngineHost(), []
            host.subscribe(lambda e: events.append(type(e).__name__))
            await host.load({str(tiny_gguf)!r}, LoadParams(n_ctx=512))
            reply = host.stream_chat(EngineKind.LLAMACPP, [{{"role": "user", "content": "hi"}}],
                                     SamplingParams(max_tokens=8, temperature=0.0))
            text = "".join([d.text async for d in reply])
            await host.close()
            return events, text, reply.stats.completion_tokens

        events, text, tokens = asyncio.run(main())
        print(json.dumps({{"events": events, "text": text, "tokens": tokens,
                          "qt": sorted(m for m in sys.modules if m.startswith(("PySide6", "shiboken6", "qasync")))}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env={**os.environ}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["qt"] == []
    assert "ModelLoaded" in report["events"] and "EngineStateChanged" in report["events"]
    assert "ReplyFigures" in report["events"] and report["tokens"] > 0 and report["text"]


def test_replies_to_one_llama_cpp_model_queue_in_arrival_order(long_context_gguf):
    async def scenario():
        host, events = EngineHost(LlamaCppBackend()), []
        host.subscribe(events.append)
        try:
            await host.load(str(long_context_gguf), LoadParams(n_ctx=1024))
            order: list[str] = []

            async def consume(name: str, reply) -> str:
                text = await _collect(reply)
                order.append(name)
                return text

            replies = [host.stream_chat(EngineKind.LLAMACPP, USER, GREEDY) for _ in range(3)]
            assert [r.place for r in replies] == [0, 1, 2]  # each client sees its place
            assert host.waiting(EngineKind.LLAMACPP) == 2
            tasks = [asyncio.ensure_future(consume(f"r{i}", r)) for i, r in enumerate(reversed(replies))]
            texts = await asyncio.gather(*tasks)
            assert order == ["r2", "r1", "r0"]  # consumed in reverse, served in arrival order
            assert len(set(texts)) == 1 and texts[0]  # greedy: the same reply each time, none mixed up
            waiting = [e.waiting for e in events if isinstance(e, QueueChanged)]
            assert max(waiting) == 2 and waiting[-1] == 0
            assert sum(isinstance(e, ReplyFigures) for e in events) == 3
        finally:
            await host.close()

    run(scenario())


def test_a_waiting_reply_can_be_stopped_without_disturbing_the_line(long_context_gguf):
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        try:
            await host.load(str(long_context_gguf), LoadParams(n_ctx=1024))
            first = host.stream_chat(EngineKind.LLAMACPP, USER, GREEDY)
            second = host.stream_chat(EngineKind.LLAMACPP, USER, GREEDY)
            third = host.stream_chat(EngineKind.LLAMACPP, USER, GREEDY)
            second.stop()
            assert await _collect(second) == "" and second.stats.finish_reason == "stopped"
            assert third.place == 1  # moved up when the second left
            assert await _collect(first) and await _collect(third)
        finally:
            await host.close()

    run(scenario())


def test_loading_another_model_waits_for_the_reply_in_flight_and_says_so(long_context_gguf, tiny_gguf):
    async def scenario():
        host, events = EngineHost(LlamaCppBackend()), []
        host.subscribe(events.append)
        try:
            await host.load(str(long_context_gguf), LoadParams(n_ctx=1024))
            reply = host.stream_chat(EngineKind.LLAMACPP, USER, SamplingParams(max_tokens=64, temperature=0.0))
            first = await reply.__anext__()  # generating now
            load = asyncio.ensure_future(host.load(str(tiny_gguf), LoadParams(n_ctx=512)))
            await until(lambda: any(isinstance(e, LoadWaiting) and e.replies_ahead == 1 for e in events))
            assert not load.done()  # the reply holds the turn until it is read to its end
            rest = await _collect(reply)
            info = await load
            assert first.text + rest and info.name == "tiny-test-model"
            assert host.loaded(EngineKind.LLAMACPP).entry == str(tiny_gguf)
            loaded = [e.entry for e in events if isinstance(e, ModelLoaded)]
            assert loaded == [str(long_context_gguf), str(tiny_gguf)]
        finally:
            await host.close()

    run(scenario())


def test_a_killed_worker_is_reported_as_unloaded(tiny_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        host, events = EngineHost(backend), []
        host.subscribe(events.append)
        try:
            await host.load(str(tiny_gguf), LoadParams(n_ctx=512))
            backend.kill_worker()
            await until(lambda: any(isinstance(e, ModelUnloaded) for e in events))
            assert any(isinstance(e, ModelUnloaded) and e.entry == str(tiny_gguf) for e in events)
            assert host.loaded(EngineKind.LLAMACPP) is None
            states = [e.state.kind for e in events if isinstance(e, EngineStateChanged)]
            assert str(states[-1]) == "failed"
        finally:
            await host.close()

    run(scenario())


def test_vllm_replies_run_side_by_side():
    async def scenario():
        with FakeOpenAIServer() as fake:
            fake.token_delay_s = 0.02
            host = EngineHost(LlamaCppBackend())
            try:
                with pytest.raises(UnavailableError, match="No vLLM server is running"):
                    host.engine_for("vllm:tiny-llama")
                host.offer_vllm(VllmEndpoint(fake.base_url, "tiny-llama", None, "remote"))
                await host.load("vllm:tiny-llama", LoadParams(n_ctx=512))
                assert host.concurrent(EngineKind.VLLM)
                replies = [host.stream_chat(EngineKind.VLLM, USER, GREEDY) for _ in range(4)]
                assert [r.place for r in replies] == [None] * 4  # no line: vLLM batches them
                texts = await asyncio.gather(*(_collect(r) for r in replies))
                assert all(texts) and fake.max_in_flight == 4
            finally:
                await host.close()

    run(scenario())


def test_offering_and_withdrawing_vllm_tell_every_client():
    async def scenario():
        host, events = EngineHost(LlamaCppBackend()), []
        host.subscribe(events.append)
        remote = VllmEndpoint("http://127.0.0.1:9", "m", None, "remote")
        host.offer_vllm(remote)
        host.withdraw_vllm("managed")  # another source: the remote one stays
        assert host.vllm_endpoint == remote and host.vllm_entries() == ["vllm:m"]
        host.withdraw_vllm("remote")
        changes = [e.endpoint for e in events if isinstance(e, VllmEndpointChanged)]
        assert changes == [remote, None] and host.vllm_entries() == []
        await host.close()

    run(scenario())


class StubServer:
    """Stands in for VllmServer: ``start`` waits for ``gate``, fails with ``fail``; ``crash`` calls on_crash."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail, self.gate, self.stopped = fail, asyncio.Event(), False
        self.base_url, self.served_model_name, self.pid = "http://127.0.0.1:9", "stub-model", 4242
        self.elapsed, self.log_tail = 0.0, []
        self._on_crash = None

    async def start(self, on_log=None, on_phase=None, on_crash=None) -> None:
        self._on_crash = on_crash
        await self.gate.wait()
        if self.fail:
            raise VllmServerError(self.fail)

    def crash(self) -> None:
        self._on_crash(VllmServerError("vLLM exited with code 1"))

    async def stop(self) -> None:
        self.stopped = True

    def launch_command(self) -> str:
        return "vllm serve stub"

    def docker_command(self) -> str:
        return "docker run stub"


def test_the_apps_own_vllm_server_is_offered_when_ready_and_withdrawn_when_it_ends():
    async def scenario():
        host, events = EngineHost(LlamaCppBackend()), []
        host.subscribe(events.append)
        server = StubServer()
        started = host.vllm_server.start(server, "secret")
        assert host.vllm_server.server is server and host.vllm_server.starting
        (starting,) = host_targets(host)
        assert (starting.label, starting.root_pid, starting.metrics_url) == ("vLLM (starting)", 4242, None)
        server.gate.set()
        await started
        assert host.vllm_endpoint == VllmEndpoint(server.base_url, "stub-model", "secret", "managed", 4242)
        (target,) = host_targets(host)
        assert (target.label, target.root_pid, target.metrics_url) == ("vLLM: stub-model", 4242, server.base_url)
        server.crash()
        assert host.vllm_endpoint is None and host.vllm_server.server is None
        again = StubServer()
        again.gate.set()
        await host.vllm_server.start(again, None)
        await host.vllm_server.stop()
        assert again.stopped and host.vllm_endpoint is None
        changes = [e.endpoint is not None for e in events if isinstance(e, VllmEndpointChanged)]
        assert changes == [True, False, True, False]
        await host.close()

    run(scenario())


def test_a_vllm_server_that_cannot_start_is_forgotten():
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        server = StubServer(fail="CUDA out of memory")
        server.gate.set()
        with pytest.raises(VllmServerError, match="out of memory"):
            await host.vllm_server.start(server, None)
        assert host.vllm_server.server is None and host.vllm_endpoint is None
        stopping = StubServer()
        start = host.vllm_server.start(stopping, None)
        await host.vllm_server.stop()  # before it was ready: the start is cancelled
        with pytest.raises(asyncio.CancelledError):
            await start
        assert host.vllm_endpoint is None
        await host.close()

    run(scenario())


# --- API requests through the host: options, completions, embeddings, token counts (issue 16) ------------------
def test_options_and_raw_completions_pass_through_the_host(tiny_gguf):
    from app.core.params import GenerationOptions

    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
    options = GenerationOptions(response_format={"type": "json_schema", "json_schema": {"schema": schema}})

    async def scenario():
        host = EngineHost(LlamaCppBackend())
        try:
            await host.load(str(tiny_gguf), LoadParams(n_ctx=512))
            structured = await _collect(host.stream_chat(EngineKind.LLAMACPP, USER, GREEDY, options))
            completion = host.complete(EngineKind.LLAMACPP, "Once upon a time", SamplingParams(max_tokens=5))
            text = await _collect(completion)
            return structured, text, completion.stats
        finally:
            await host.close()

    structured, text, stats = run(scenario())
    assert json.loads(structured)["answer"] in ("yes", "no")
    assert text and stats.completion_tokens <= 5 and stats.prompt_tokens > 0


def test_token_counts_and_embeddings_take_their_turn_behind_a_reply(long_context_gguf):
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        try:
            await host.load(str(long_context_gguf), LoadParams(n_ctx=4096))
            alone = await host.count_tokens(EngineKind.LLAMACPP, USER)
            # 3,000 tokens and a stop sent as soon as the count is in line: still generating, whatever the speed
            reply = host.stream_chat(EngineKind.LLAMACPP, USER, SamplingParams(max_tokens=3000, temperature=0.0))
            await reply.__anext__()  # generating now
            count = asyncio.ensure_future(host.count_tokens(EngineKind.LLAMACPP, USER))
            await until(lambda: host.waiting(EngineKind.LLAMACPP) == 1)
            waited = (not count.done(), host.waiting(EngineKind.LLAMACPP))
            reply.stop()
            await _collect(reply)
            behind = await count
            await host.load(str(long_context_gguf), LoadParams(n_ctx=256, embedding=True))
            vectors = await host.embed(EngineKind.LLAMACPP, ["hello", "world"])
            return alone, waited, behind, reply.stats, vectors, host.waiting(EngineKind.LLAMACPP)
        finally:
            await host.close()

    alone, waited, behind, stats, vectors, waiting_after = run(scenario())
    assert waited == (True, 1) and behind == alone > 0 and waiting_after == 0
    assert stats.finish_reason == "stopped" and stats.prompt_tokens == alone
    assert len(vectors) == 2 and len(vectors[0]) == 64


def test_closing_a_reply_mid_stream_stops_the_worker_and_passes_the_turn(long_context_gguf):
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        try:
            await host.load(str(long_context_gguf), LoadParams(n_ctx=4096))
            first = host.stream_chat(EngineKind.LLAMACPP, USER, SamplingParams(max_tokens=3000, temperature=0.0))
            second = host.stream_chat(EngineKind.LLAMACPP, USER, SamplingParams(max_tokens=4, temperature=0.0))
            for _ in range(3):
                await first.__anext__()
            await first.aclose()  # the API client went away
            text = await asyncio.wait_for(_collect(second), 20)
            return first.stats, text, second.stats
        finally:
            await host.close()

    first, text, second = run(scenario())
    assert first.finish_reason == "stopped" and first.completion_tokens < 300
    assert text and second.completion_tokens == 4


def test_engines_without_a_capability_say_so(tiny_gguf):
    from app.core.errors import InvalidInputError
    from tests.support.fake_ollama import FakeOllama

    async def scenario():
        with FakeOllama() as fake:
            fake.add_model("llama3.2")
            host = EngineHost(LlamaCppBackend(), ollama_host=fake.host)
            try:
                await host.load("ollama:llama3.2", LoadParams(n_ctx=512))
                with pytest.raises(InvalidInputError, match="cannot complete raw text"):
                    await _collect(host.complete(EngineKind.OLLAMA, "hi", GREEDY))
                with pytest.raises(InvalidInputError, match="cannot embed"):
                    await host.embed(EngineKind.OLLAMA, ["hi"])
                with pytest.raises(InvalidInputError, match="cannot count tokens"):
                    await host.count_tokens(EngineKind.OLLAMA, USER)
                assert await _collect(host.stream_chat(EngineKind.OLLAMA, USER, GREEDY))  # the line moved on
                with pytest.raises(UnavailableError):
                    host.complete(EngineKind.VLLM, "hi", GREEDY)
            finally:
                await host.close()

    run(scenario())
