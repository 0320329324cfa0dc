"""OllamaBackend against the fake Ollama server, through the official client over real HTTP."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading

import pytest

from app.backends.ollama import OllamaBackend, load_options, sampling_options
from app.backends.protocol import Backend, BackendError, GenerationError, ModelLoadError, StateKind
from app.core.params import LoadParams, SamplingParams
from tests.support.fake_ollama import FakeOllama

USER_HI = [{"role": "user", "content": "hello there my good friend"}]
REPLY = ["You", " said:", " hello", " there", " my", " good", " friend"]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture
def fake():
    before = set(threading.enumerate())
    with FakeOllama() as server:
        server.add_model("llama3.2", context_length=131072, block_count=28)
        yield server
    assert not server.handler_errors
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


async def _loaded(host, n_ctx=2048):
    backend = OllamaBackend(host)
    await backend.load("llama3.2", LoadParams(n_ctx=n_ctx))
    return backend


async def _collect(backend, params=None, messages=USER_HI):
    return [d.text async for d in backend.stream_chat(messages, params or SamplingParams(seed=3))]


def test_options_are_plain_dicts_with_every_sampling_field():
    params = SamplingParams(temperature=0.3, top_p=0.8, top_k=20, min_p=0.07, repeat_penalty=1.2, max_tokens=64, seed=9)
    assert sampling_options(params) == {
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": 20,
        "min_p": 0.07,
        "repeat_penalty": 1.2,
        "num_predict": 64,
        "seed": 9,
    }
    assert "num_predict" not in sampling_options(SamplingParams(max_tokens=None))
    assert load_options(LoadParams(n_ctx=8192, n_gpu_layers=-1, n_threads=6)) == {
        "num_ctx": 8192,
        "num_batch": 512,
        "num_gpu": 999,
        "num_thread": 6,
    }


def test_load_and_stream_chat(fake):
    states = []

    async def scenario():
        backend = OllamaBackend(fake.host)
        backend.add_state_listener(lambda s: states.append(s.kind))
        try:
            info = await backend.load("llama3.2", LoadParams(n_ctx=2048))
            assert isinstance(backend, Backend) and backend.kind == "ollama"
            params = SamplingParams(temperature=0.1, min_p=0.07, max_tokens=100, seed=5)
            return info, await _collect(backend, params), backend.stats(), backend.kv_usage()
        finally:
            await backend.close()

    info, deltas, stats, kv = run(scenario())
    assert info.name == "llama3.2" and info.architecture == "llama"
    assert info.n_ctx == 2048 and info.n_ctx_train == 131072
    assert info.n_gpu_layers == 29 and info.gpu_offload_supported
    assert info.metadata["parameter_size"] == "1.2B" and info.metadata["host"] == fake.host
    assert deltas == REPLY
    assert stats.completion_tokens == len(REPLY) and stats.prompt_tokens == 5 + 4
    assert stats.decode_tokens_per_s == pytest.approx(100.0)  # eval_count / eval_duration * 1e9
    assert stats.ttft_ms is not None and stats.ttft_ms > 0 and stats.finish_reason == "stop"
    assert kv.total_cells == 2048 and kv.used_cells == stats.prompt_tokens + stats.completion_tokens
    assert states == [StateKind.STARTING, StateKind.READY, StateKind.GENERATING, StateKind.READY, StateKind.STOPPED]

    warm, chat = fake.requests_to("/api/chat")
    assert warm.json["messages"] == [] and warm.json["options"] == {"num_ctx": 2048, "num_batch": 512}
    assert chat.json["stream"] is True and chat.json["messages"] == USER_HI
    assert chat.json["options"] == {
        "num_ctx": 2048,  # with every chat: Ollama reloads a model whose options differ
        "num_batch": 512,
        "temperature": 0.1,
        "top_p": 0.95,
        "top_k": 40,
        "min_p": 0.07,
        "repeat_penalty": 1.1,
        "num_predict": 100,
        "seed": 5,
    }


def test_num_predict_limits_the_reply(fake):
    async def scenario():
        backend = await _loaded(fake.host)
        try:
            return await _collect(backend, SamplingParams(max_tokens=3)), backend.stats()
        finally:
            await backend.close()

    deltas, stats = run(scenario())
    assert deltas == REPLY[:3] and stats.finish_reason == "length" and stats.completion_tokens == 3


def test_stop_mid_reply_closes_the_connection(fake):
    fake.reply = lambda messages: [f" w{i}" for i in range(200)]
    fake.chunk_delay = 0.01

    async def scenario():
        backend = await _loaded(fake.host)
        deltas = []
        try:
            async for delta in backend.stream_chat(USER_HI, SamplingParams()):
                deltas.append(delta.text)
                if len(deltas) == 3:
                    backend.stop()
            return deltas, backend.stats(), backend.state.kind
        finally:
            await backend.close()

    deltas, stats, state = run(scenario())
    assert deltas == [" w0", " w1", " w2"]
    assert stats.finish_reason == "stopped" and stats.completion_tokens == 3
    assert state is StateKind.READY
    assert fake.disconnected.wait(2) and fake.disconnects == ["/api/chat"]


def test_cancelling_the_consumer_closes_the_connection(fake):
    fake.reply = lambda messages: [f" w{i}" for i in range(200)]
    fake.chunk_delay = 0.01

    async def scenario():
        backend = await _loaded(fake.host)
        got = asyncio.Event()

        async def consume():
            async for _ in backend.stream_chat(USER_HI, SamplingParams()):
                got.set()

        task = asyncio.create_task(consume())
        await got.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        generating = backend.generating
        await backend.close()
        return generating

    assert run(scenario()) is False
    assert fake.disconnected.wait(2)


def test_error_line_mid_chat_keeps_the_partial_reply(fake):
    fake.fail("/api/chat", error="an error was encountered while running the model: unexpected EOF", after=3)

    async def scenario():
        backend = await _loaded(fake.host)
        deltas = []
        try:
            with pytest.raises(GenerationError) as caught:
                async for delta in backend.stream_chat(USER_HI, SamplingParams()):
                    deltas.append(delta.text)
            return caught.value, deltas, backend.stats(), backend.state.kind
        finally:
            await backend.close()

    error, deltas, stats, state = run(scenario())
    assert deltas == REPLY[:3] and error.partial == "".join(REPLY[:3])
    assert "unexpected EOF" in str(error) and "partial reply was kept" in str(error)
    assert stats.finish_reason == "error" and state is StateKind.READY


def test_an_error_line_mid_chat_leaves_no_half_read_stream_to_the_garbage_collector(fake, monkeypatch):
    """qasync's loop installs no async-generator hooks: the official client's chat stream, left half-read by an
    error line, was finalized by the garbage collector there ("async generator ignored GeneratorExit")."""
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append((u.exc_value, u.object)))
    fake.fail("/api/chat", error="runner crashed", after=2)

    async def scenario():
        sys.set_asyncgen_hooks(firstiter=None, finalizer=None)  # as under qasync
        backend = await _loaded(fake.host)
        try:
            with pytest.raises(GenerationError, match="runner crashed"):
                await _collect(backend)
            gc.collect()
            return await _collect(backend)  # the next reply works
        finally:
            await backend.close()

    assert run(scenario()) == REPLY
    gc.collect()
    assert unraisable == []


def test_server_dying_mid_chat_keeps_the_partial_reply(fake):
    fake.fail("/api/chat", die=True, after=2)

    async def scenario():
        backend = await _loaded(fake.host)
        try:
            with pytest.raises(GenerationError) as caught:
                await _collect(backend)
            return caught.value
        finally:
            await backend.close()

    error = run(scenario())
    assert error.partial == "".join(REPLY[:2])
    assert "connection to Ollama" in str(error) and "lost" in str(error)


HI_LINE = b'{"model": "llama3.2", "created_at": "2025-01-01T00:00:00Z", "message": {"role": "assistant", '
HI_LINE += b'"content": "Hi"}, "done": false}\n'
BAD_LINES = {
    "nested-list": (b"[" * 100_000, "a line of the reply is nested too deeply"),
    "nested-object": (b'{"a":' * 100_000, "a line of the reply is nested too deeply"),
    "not-an-object": (b"[1, 2]", "a line of the reply must be a JSON object"),
    "over-16-MiB": (b'{"a": "' + b"x" * (17 * 1024 * 1024), "a line larger than 16 MiB"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_an_unreadable_line_ends_that_reply_cleanly_and_the_next_one_works(fake, name):
    line, reason = BAD_LINES[name]

    async def scenario():
        backend = await _loaded(fake.host)
        try:
            fake.send_raw("/api/chat", HI_LINE + line + b"\n")
            with pytest.raises(GenerationError, match="sent a reply this app cannot read while generating") as caught:
                await _collect(backend)
            assert reason in str(caught.value) and "partial reply was kept" in str(caught.value)
            assert caught.value.partial == "Hi" and backend.state.kind is StateKind.READY
            assert backend.stats().finish_reason == "error"
            return await _collect(backend)
        finally:
            await backend.close()

    assert run(scenario()) == REPLY


def test_a_nested_answer_while_loading_is_a_load_error(fake):
    fake.send_raw("/api/show", b'{"modelfile": ' + b"[" * 100_000)  # read by the official client

    async def scenario():
        backend = OllamaBackend(fake.host)
        try:
            with pytest.raises(ModelLoadError, match=r"cannot read while loading llama3.2 \(.*nested too deeply"):
                await backend.load("llama3.2", LoadParams())
            return (await backend.load("llama3.2", LoadParams())).name
        finally:
            await backend.close()

    assert run(scenario()) == "llama3.2"


def test_server_down_gives_model_load_error():
    host = FakeOllama.unused_host()
    states = []

    async def scenario():
        backend = OllamaBackend(host)
        backend.add_state_listener(lambda s: states.append(s))
        try:
            with pytest.raises(ModelLoadError) as caught:
                await backend.load("llama3.2", LoadParams())
            return caught.value
        finally:
            await backend.close()

    error = run(scenario())
    assert str(error) == f"Ollama is not running at {host}: start it with `ollama serve`."
    assert states[1].kind is StateKind.FAILED


def test_server_stopping_between_load_and_chat(fake):
    async def scenario():
        backend = await _loaded(fake.host)
        fake.stop()
        try:
            with pytest.raises(GenerationError, match=r"Ollama is not running") as caught:
                await _collect(backend)
            return caught.value, backend.state.kind, backend.model
        finally:
            await backend.close()

    error, state, model = run(scenario())
    assert error.partial == "" and state is StateKind.FAILED and model is None


def test_unknown_model_and_no_model(fake):
    async def scenario():
        backend = OllamaBackend(fake.host)
        try:
            with pytest.raises(ModelLoadError, match=r"no model named 'nope'.*ollama pull nope"):
                await backend.load("nope", LoadParams())
            with pytest.raises(BackendError, match=r"No model is loaded"):
                await _collect(backend)
        finally:
            await backend.close()

    run(scenario())
    assert fake.requests_to("/api/chat") == []  # nothing is loaded for a model that does not exist


def test_ollama_failing_to_load_the_model(fake):
    fake.load_error = "model requires more system memory (9.1 GiB) than is available (4.2 GiB)"

    async def scenario():
        backend = OllamaBackend(fake.host)
        try:
            with pytest.raises(ModelLoadError) as caught:
                await backend.load("llama3.2", LoadParams(n_ctx=32768))
            return caught.value, backend.state
        finally:
            await backend.close()

    error, state = run(scenario())
    assert str(error) == f"Ollama could not load llama3.2: {fake.load_error}"
    assert state.kind is StateKind.FAILED and state.detail == str(error)


def test_unload_and_switching_models_free_ollama_memory(fake):
    fake.add_model("qwen3:0.6b")

    async def scenario():
        backend = await _loaded(fake.host)
        await backend.load("qwen3:0.6b", LoadParams(n_ctx=4096))
        switched = sorted(fake.loaded)
        await backend.unload()
        await backend.close()
        return switched, sorted(fake.loaded), backend.state.kind

    switched, after, state = run(scenario())
    assert switched == ["qwen3:0.6b"] and after == [] and state is StateKind.STOPPED
    assert [r.json.get("keep_alive") for r in fake.requests_to("/api/chat")] == [None, 0, None, 0]
