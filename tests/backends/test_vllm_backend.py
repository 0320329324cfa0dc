"""The vLLM backend against FakeOpenAIServer: loading, streaming, stopping, concurrency, errors, metrics."""

from __future__ import annotations

import asyncio

import pytest

from app.backends.protocol import (
    Backend,
    BackendBusyError,
    BackendError,
    ConcurrentChats,
    GenerationError,
    ModelLoadError,
    StateKind,
    WorkerProcessBackend,
)
from app.backends.vllm import EngineMetrics, VllmBackend, normalize_url, request_body
from app.core.params import LoadParams, SamplingParams
from tests.support.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.timeout(60)

MODEL = "tiny-llama"
USER = [{"role": "user", "content": "hello big world"}]


@pytest.fixture
def fake():
    with FakeOpenAIServer((MODEL,)) as server:
        yield server
    assert not server.handler_errors


def run(coro):
    return asyncio.run(coro)


async def loaded(url: str, **kwargs) -> VllmBackend:
    backend = VllmBackend(url, **kwargs)
    await backend.load(MODEL, LoadParams(n_ctx=2048))
    return backend


async def collect(stream) -> str:
    return "".join([delta.text async for delta in stream])


# --- loading -------------------------------------------------------------------------------------------------
def test_remote_load_describes_the_served_model(fake):
    async def main():
        backend = VllmBackend(fake.base_url + "/v1/")
        states = []
        backend.add_state_listener(states.append)
        try:
            info = await backend.load(MODEL, LoadParams(n_ctx=2048))
            assert (info.name, info.n_ctx, info.path) == (MODEL, 4096, f"/models/{MODEL}")
            assert info.metadata["n_ctx_requested"] == "2048" and info.metadata["base_url"] == fake.base_url
            assert [s.kind for s in states] == [StateKind.STARTING, StateKind.READY]
            kv = backend.kv_usage()
            assert kv is not None and (kv.used_cells, kv.total_cells) == (0, 27000 * 16)
        finally:
            await backend.close()

    run(main())
    assert [r.path for r in fake.requests[:2]] == ["/health", "/v1/models"]


def test_empty_model_name_picks_the_only_served_model(fake):
    async def main():
        backend = VllmBackend(fake.base_url)
        try:
            assert (await backend.load("", LoadParams())).name == MODEL
        finally:
            await backend.close()

    run(main())


def test_a_model_that_is_not_served_is_refused_with_the_served_list():
    with FakeOpenAIServer(("a-model", "b-model")) as fake:

        async def main():
            backend = VllmBackend(fake.base_url)
            try:
                with pytest.raises(ModelLoadError, match=r"does not serve 'other'\. It serves: a-model, b-model"):
                    await backend.load("other", LoadParams())
                assert backend.state.kind is StateKind.FAILED and backend.model is None
            finally:
                await backend.close()

        run(main())


def test_a_server_that_is_down_is_named_in_the_error():
    url = FakeOpenAIServer.unused_url()

    async def main():
        backend = VllmBackend(url)
        try:
            with pytest.raises(ModelLoadError, match=f"vLLM is not answering at {url}"):
                await backend.load(MODEL, LoadParams())
        finally:
            await backend.close()

    run(main())


def test_a_loading_server_is_not_ready(fake):
    fake.loading = True

    async def main():
        backend = VllmBackend(fake.base_url)
        try:
            with pytest.raises(ModelLoadError, match="not ready"):
                await backend.load(MODEL, LoadParams())
        finally:
            await backend.close()

    run(main())


@pytest.mark.parametrize(("key", "expected"), [(None, "needs an API key"), ("wrong", "refused the API key")])
def test_api_key_missing_or_refused(key, expected):
    with FakeOpenAIServer((MODEL,), api_key="secret") as fake:

        async def main():
            backend = VllmBackend(fake.base_url, key)
            try:
                with pytest.raises(ModelLoadError, match=expected) as caught:
                    await backend.load(MODEL, LoadParams())
                assert "secret" not in str(caught.value) and "wrong" not in str(caught.value)
            finally:
                await backend.close()

        run(main())


def test_the_right_api_key_is_sent_as_a_bearer_token():
    with FakeOpenAIServer((MODEL,), api_key="secret") as fake:

        async def main():
            backend = await loaded(fake.base_url, api_key="secret")
            try:
                assert await collect(backend.stream_chat(USER, SamplingParams())) == "You said: hello big world"
            finally:
                await backend.close()

        run(main())
        assert fake.requests_to("/v1/chat/completions")[0].headers["Authorization"] == "Bearer secret"


# --- streaming -----------------------------------------------------------------------------------------------
def test_stream_chat_yields_the_reply_and_measures_it(fake):
    params = SamplingParams(temperature=0.2, top_k=0, seed=7, stop=("zzz",), max_tokens=50, presence_penalty=0.5)

    async def main():
        backend = await loaded(fake.base_url)
        states = []
        backend.add_state_listener(states.append)
        try:
            stream = backend.stream_chat(USER, params)
            assert await collect(stream) == "You said: hello big world"
            stats = stream.stats
            assert stats is not None and backend.stats() is stats
            assert (stats.prompt_tokens, stats.completion_tokens, stats.finish_reason) == (7, 5, "stop")
            assert stats.ttft_ms is not None and stats.ttft_ms >= 0 and stats.total_ms >= stats.ttft_ms
            assert [s.kind for s in states] == [StateKind.GENERATING, StateKind.READY]
        finally:
            await backend.close()

    run(main())
    body = fake.requests_to("/v1/chat/completions")[0].json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["top_k"], body["seed"], body["stop"]) == (0.2, -1, 7, ["zzz"])
    assert (body["max_tokens"], body["presence_penalty"], body["repetition_penalty"]) == (50, 0.5, 1.1)
    assert body["messages"] == USER and body["model"] == MODEL


def test_max_tokens_ends_with_length(fake):
    async def main():
        backend = await loaded(fake.base_url)
        try:
            stream = backend.stream_chat(USER, SamplingParams(max_tokens=2))
            assert await collect(stream) == "You said:"
            assert stream.stats.finish_reason == "length" and stream.stats.completion_tokens == 2
        finally:
            await backend.close()

    run(main())


def test_request_body_leaves_out_unset_options():
    body = request_body("m", USER, SamplingParams(max_tokens=None, seed=None, top_k=40))
    assert "max_tokens" not in body and "seed" not in body and "stop" not in body
    assert body["top_k"] == 40 and "typical_p" not in body


LONG = [{"role": "user", "content": " ".join(f"w{i}" for i in range(200))}]


@pytest.mark.parametrize("how", ["stream.stop", "backend.stop", "cancel", "aclose"])
def test_stopping_a_reply_closes_its_request(fake, how):
    fake.token_delay_s = 0.02

    async def main():
        backend = await loaded(fake.base_url)
        try:
            stream = backend.stream_chat(LONG, SamplingParams())
            got: list[str] = []

            async def consume():
                async for delta in stream:
                    got.append(delta.text)
                    if len(got) == 3 and how in ("stream.stop", "backend.stop"):
                        (stream if how == "stream.stop" else backend).stop()
                    if len(got) == 3 and how == "aclose":
                        break

            task = asyncio.create_task(consume())
            if how == "cancel":
                while len(got) < 3:
                    await asyncio.sleep(0.01)
                task.cancel()
            with pytest.raises(asyncio.CancelledError) if how == "cancel" else _nothing():
                await task
            if how == "aclose":
                await stream.aclose()
            assert stream.stats.finish_reason == "stopped" and 3 <= stream.stats.completion_tokens < 10
            assert backend.state.kind is StateKind.READY and backend.active_chats == 0
        finally:
            await backend.close()

    run(main())
    assert fake.disconnected.wait(5) and fake.wait_idle()
    request_id = fake.requests_to("/v1/chat/completions")[0].request_id
    assert fake.disconnects == [request_id] and fake.finished[request_id] == "abort"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_eight_chats_generate_at_once_each_with_its_own_text(fake):
    fake.token_delay_s = 0.5  # ~2 s per reply: the metrics read after all eight start still sees them running

    async def main():
        backend = await loaded(fake.base_url)
        peak = 0

        def watch(_state):
            nonlocal peak
            peak = max(peak, backend.active_chats)

        try:
            streams = [backend.stream_chat([{"role": "user", "content": f"chat {i}"}], SamplingParams())
                       for i in range(8)]  # fmt: skip

            async def consume(stream):
                text = await collect(stream)
                watch(None)
                return text

            async def sample_metrics():
                await asyncio.to_thread(fake.wait_in_flight, 8)
                return await backend.metrics()

            texts, metrics = await asyncio.gather(asyncio.gather(*(consume(s) for s in streams)), sample_metrics())
            assert texts == [f"You said: chat {i}" for i in range(8)]
            assert [s.stats.completion_tokens for s in streams] == [4] * 8
            assert metrics.requests_running == 8
            assert backend.kv_usage().used_cells > 0  # from the reading taken while all eight were in flight
            assert backend.state.kind is StateKind.READY
        finally:
            await backend.close()

    run(main())
    assert fake.max_in_flight >= 8


def test_load_while_replies_are_in_flight_is_busy(fake):
    fake.token_delay_s = 0.02

    async def main():
        backend = await loaded(fake.base_url)
        try:
            stream = backend.stream_chat(USER, SamplingParams())
            await stream.__anext__()
            with pytest.raises(BackendBusyError):
                await backend.load(MODEL, LoadParams())
            await stream.aclose()
        finally:
            await backend.close()

    run(main())


# --- errors --------------------------------------------------------------------------------------------------
def test_http_400_carries_vllms_message(fake):
    fake.fail("/v1/chat/completions", status=400, error="temperature must be non-negative, got -1.")

    async def main():
        backend = await loaded(fake.base_url)
        try:
            stream = backend.stream_chat(USER, SamplingParams())
            with pytest.raises(GenerationError, match="temperature must be non-negative") as caught:
                await collect(stream)
            assert caught.value.partial == "" and stream.stats.finish_reason == "error"
        finally:
            await backend.close()

    run(main())


def test_context_overflow_is_reported(fake):
    async def main():
        backend = await loaded(fake.base_url)
        try:
            with pytest.raises(GenerationError, match="maximum context length is 4096"):
                await collect(backend.stream_chat(USER, SamplingParams(max_tokens=5000)))
        finally:
            await backend.close()

    run(main())


@pytest.mark.parametrize(("die", "expected"), [(False, "stopped the reply with an error: engine died"),
                                               (True, "connection to vLLM .* was lost")])  # fmt: skip
def test_mid_stream_failures_keep_the_partial_reply(fake, die, expected):
    fake.fail("/v1/chat/completions", error="engine died", after=2, die=die)

    async def main():
        backend = await loaded(fake.base_url)
        try:
            stream = backend.stream_chat(USER, SamplingParams())
            with pytest.raises(GenerationError, match=expected) as caught:
                await collect(stream)
            assert caught.value.partial == "You said:" and "partial reply was kept" in str(caught.value)
            assert backend.state.kind is StateKind.READY
        finally:
            await backend.close()

    run(main())


HI_CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
NESTED_PAYLOADS = {
    "nested-list": (b"[" * 100_000, "a chunk of the reply is nested too deeply"),
    "nested-object": (b'{"a":' * 100_000, "a chunk of the reply is nested too deeply"),
    "not-json": (b"{oops", "a chunk of the reply is not valid JSON"),
    "over-16-MiB": (b'"' + b"x" * (17 * 1024 * 1024), "a line larger than 16 MiB"),
}


@pytest.mark.parametrize("name", NESTED_PAYLOADS)
def test_an_unreadable_chunk_ends_that_reply_cleanly_and_the_next_one_works(fake, name):
    payload, reason = NESTED_PAYLOADS[name]

    async def main():
        backend = await loaded(fake.base_url)
        try:
            fake.send_raw("/v1/chat/completions", HI_CHUNK + b"data: " + payload + b"\n\ndata: [DONE]\n\n")
            stream = backend.stream_chat(USER, SamplingParams())
            with pytest.raises(GenerationError, match="sent a reply this app cannot read") as caught:
                await collect(stream)
            assert reason in str(caught.value) and "partial reply was kept" in str(caught.value)
            assert caught.value.partial == "Hi" and stream.stats.finish_reason == "error"
            assert backend.state.kind is StateKind.READY
            assert await collect(backend.stream_chat(USER, SamplingParams())) == "You said: hello big world"
        finally:
            await backend.close()

    run(main())


def test_chunks_of_the_wrong_shape_are_ignored(fake):
    odd = b'data: {"choices": [5, {"delta": "x"}, {"delta": {"content": 7}}], "usage": 3}\n\n'
    fake.send_raw("/v1/chat/completions", odd + HI_CHUNK + b"data: [DONE]\n\n")

    async def main():
        backend = await loaded(fake.base_url)
        try:
            stream = backend.stream_chat(USER, SamplingParams())
            assert await collect(stream) == "Hi" and stream.stats.finish_reason == "stop"
        finally:
            await backend.close()

    run(main())


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"data": ' + b"[" * 100_000])
def test_a_nested_model_list_is_not_a_vllm_server(fake, body):
    fake.send_raw("/v1/models", body)

    async def main():
        backend = VllmBackend(fake.base_url)
        try:
            with pytest.raises(ModelLoadError, match=r"is not a vLLM \(OpenAI-compatible\) server"):
                await backend.load(MODEL, LoadParams())
            assert (await backend.load(MODEL, LoadParams())).name == MODEL  # the next answer is a real one
        finally:
            await backend.close()

    run(main())


def test_server_gone_after_loading_fails_the_backend(fake):
    async def main():
        backend = await loaded(fake.base_url)
        fake.stop()
        try:
            with pytest.raises(GenerationError, match="not answering"):
                await collect(backend.stream_chat(USER, SamplingParams()))
            assert backend.state.kind is StateKind.FAILED and backend.model is None
        finally:
            await backend.close()

    run(main())


def test_metrics_that_are_not_prometheus_text_are_an_error(fake):
    fake.metrics_page = "<html>proxy error</html>"

    async def main():
        backend = await loaded(fake.base_url)  # loading does not need metrics
        try:
            assert backend.kv_usage() is None
            with pytest.raises(BackendError, match="not Prometheus text"):
                await backend.metrics()
        finally:
            await backend.close()

    run(main())


# --- capabilities ---------------------------------------------------------------------------------------------
def test_capabilities_the_ui_can_check(fake):
    backend = VllmBackend(fake.base_url)
    assert isinstance(backend, Backend) and isinstance(backend, ConcurrentChats) and isinstance(backend, EngineMetrics)
    assert isinstance(backend.stream_chat, object) and not isinstance(backend, WorkerProcessBackend)
    run(backend.close())


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "http://127.0.0.1:8000"),
        ("localhost:9000", "http://localhost:9000"),
        ("http://10.0.0.2:8000/v1/", "http://10.0.0.2:8000"),
        ("https://gpu.example.org/vllm", "https://gpu.example.org/vllm"),
    ],
)
def test_normalize_url(given, expected):
    assert normalize_url(given) == expected


@pytest.mark.parametrize("bad", ["ftp://host", "http://user:pw@host:8000"])
def test_normalize_url_refuses_what_is_not_a_server_address(bad):
    with pytest.raises(BackendError) as caught:
        normalize_url(bad)
    assert "pw" not in str(caught.value)
