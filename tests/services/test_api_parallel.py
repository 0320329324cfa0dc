"""Parallel requests on llama.cpp through the real API server (``ServerConfig.n_parallel``: ``serve --parallel``)
with the official SDKs: two streams generate at once (both hold a slot, seen in the engine host's snapshot with
their clients), a request beyond N waits visibly (its record says WAITING, the snapshot counts it) and runs when a
slot frees, a client that goes away frees its slot, requests only the single worker can do (logprobs) go there and
the request log says why, Anthropic's Messages API runs in a slot too, and N × context that will not fit is refused
with the estimate's numbers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from app.core.memory.fit import MachineMemory
from app.core.memory.parallel_fit import DEFAULT_MOST_SLOTS
from app.core.params import LoadParams
from app.services.api.config import ServerConfig
from app.services.api.records import RequestState
from app.services.engines.events import ModelLoaded, ParallelSlotsChanged, ParallelSnapshot
from app.services.engines.parallel_slots import ParallelLoad
from app.services.model_settings import ModelSettings
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(300)

LONG = 3000  # tokens: a stream that is still generating while the test looks (the model never ends by itself)
HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parallel-models")
    write_tiny_gguf(folder / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=2, n_ctx=4096)) as harness:
        yield harness


def _snapshot(api: ApiHarness) -> ParallelSnapshot:
    async def read() -> ParallelSnapshot:
        assert api.host is not None
        return api.host.parallel.snapshot()

    return api.run(read())


def _busy(api: ApiHarness) -> list[str | None]:
    return [s.request for s in _snapshot(api).slots if s.request is not None]


def _stream(api: ApiHarness):
    stream = api.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=LONG, stream=True)
    chunks = iter(stream)
    next(chunks)  # the role chunk or the first token: the request is in
    return stream, chunks


def test_two_streams_generate_at_once_each_in_its_own_slot(api):
    first, first_chunks = _stream(api)
    second, second_chunks = _stream(api)
    try:
        assert any(c.choices and c.choices[0].delta.content for c in first_chunks)  # generating
        assert any(c.choices and c.choices[0].delta.content for c in second_chunks)  # and so is this one, meanwhile
        decoding = lambda: all(s.state == "decoding" and s.client and s.cells > 0 for s in _snapshot(api).slots)  # noqa: E731
        assert api.wait_for(decoding)  # as the engine reports them, about twice a second
        assert api.wait_for(lambda: all(s.generated > 0 for s in _snapshot(api).slots))  # tokens per slot
        snapshot = _snapshot(api)
        assert (snapshot.generated_total or 0) >= sum(s.generated for s in snapshot.slots)  # the Monitor's tok/s
        assert len(_held(snapshot)) == 2
        assert snapshot.cells_total == 2 * 4096  # each sequence has the full context it was loaded with
        assert any(isinstance(e, ParallelSlotsChanged) and len(_held(e.snapshot)) == 2 for e in list(api.events))
        metrics = api.http().get("/metrics").text  # the same figures for a Prometheus scraper
        assert "llmws_api_parallel_slots 2.0" in metrics and "llmws_api_parallel_slots_busy 2.0" in metrics
        assert "llmws_api_parallel_queue 0.0" in metrics and 'llmws_api_parallel_slot_cells{slot="1"}' in metrics
    finally:
        first.close()
        second.close()
    assert api.wait_for(lambda: not _busy(api))  # the clients went away: their slots are free


def _held(snapshot: ParallelSnapshot) -> list[str | None]:
    return [s.request for s in snapshot.slots if s.request is not None]


def test_a_request_beyond_n_waits_visibly_then_runs(api):
    streams = [_stream(api), _stream(api)]
    with ThreadPoolExecutor(1) as pool:  # its response begins only with its first token (or the grace time)
        third = pool.submit(api.openai().chat.completions.create, model="tiny-8k", messages=HI, max_tokens=LONG,
                            stream=True)  # fmt: skip
        try:
            assert api.wait_for(lambda: _snapshot(api).waiting == 1)
            latest = {r.id: r for r in api.records if r.endpoint == "chat.completions"}
            assert [r.state for r in latest.values() if not r.finished].count(RequestState.WAITING) == 1
            streams[0][0].close()
            chunks = third.result(timeout=60)
            assert any(c.choices and c.choices[0].delta.content for c in chunks)  # it got the freed slot
            assert _snapshot(api).waiting == 0
            chunks.close()
        finally:
            for stream, _chunks in streams:
                stream.close()
    assert api.wait_for(lambda: not _busy(api))


def test_logprobs_run_on_the_single_worker_and_the_log_says_why(api):
    reply = api.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=3, logprobs=True)
    assert reply.choices[0].logprobs is not None
    record = api.finished_records("chat.completions")[-1]
    assert record.note is not None and "single llama.cpp worker: logprobs" in record.note


def test_a_prompt_longer_than_a_sequence_runs_on_the_single_worker_with_a_larger_context(api):
    long = [{"role": "user", "content": "word " * 2400}]  # about 4,800 tokens: more than a 4,096-token sequence
    tokens = api.anthropic().messages.count_tokens(model="tiny-8k", messages=long).input_tokens
    assert 4096 < tokens < 8192 - 1024  # the test's premise: no slot holds it, a larger single context does
    reply = api.openai().chat.completions.create(model="tiny-8k", messages=long, max_tokens=3)
    assert reply.usage.prompt_tokens == tokens and reply.usage.completion_tokens == 3
    record = api.finished_records("chat.completions")[-1]
    assert record.note is not None and "more than a parallel sequence's 4,096 tokens" in record.note
    assert record.n_ctx is not None and record.n_ctx > 4096  # the single worker grew its context for it
    short = api.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=2)
    assert short.usage.completion_tokens == 2 and api.finished_records("chat.completions")[-1].note is None


def test_anthropic_messages_run_in_a_slot_with_the_prompt_counted(api):
    message = api.anthropic().messages.create(model="tiny-8k", max_tokens=5, messages=HI)
    assert message.usage.output_tokens == 5 and message.stop_reason == "max_tokens"
    with api.anthropic().messages.stream(model="tiny-8k", max_tokens=4, messages=HI) as stream:
        final = stream.get_final_message()
    assert final.usage.input_tokens > 0 and final.usage.output_tokens == 4
    assert api.finished_records("messages")[-1].note is None  # not sent to the single worker


def test_n_times_context_that_does_not_fit_is_refused_with_the_numbers(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)
    small = MachineMemory((), (), (), 2 * 1024**3, 256 * 1024, "no GPU")  # 256 KiB free: not even one sequence
    with ApiHarness(tmp_path, ServerConfig(port=0, n_parallel=4, n_ctx=8192)) as harness:
        assert harness.host is not None
        harness.host.parallel._machine_memory = lambda: small
        import openai

        with pytest.raises(openai.BadRequestError) as refused:
            harness.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=2)
        assert "4 parallel sequences × 8,192 tokens" in str(refused.value)


def test_beyond_the_queue_bound_a_request_is_refused_at_once(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)
    import openai

    with ApiHarness(tmp_path, ServerConfig(port=0, n_parallel=2, max_queue=1, n_ctx=4096)) as harness:
        running = [_stream(harness), _stream(harness)]
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(harness.openai().chat.completions.create, model="tiny-8k", messages=HI,
                                  max_tokens=LONG, stream=True)  # fmt: skip
            try:
                assert harness.wait_for(lambda: _snapshot(harness).waiting == 1)
                with pytest.raises(openai.APIStatusError) as refused:
                    harness.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=2)
                assert refused.value.status_code == 503 and "parallel llama.cpp slots are busy" in str(refused.value)
            finally:
                running[0][0].close()
                waiting.result(timeout=60).close()
                running[1][0].close()


def test_auto_runs_as_many_as_fit_up_to_four(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)
    with ApiHarness(tmp_path, ServerConfig(port=0, n_parallel=0, n_ctx=1024)) as harness:
        assert harness.host is not None
        harness.host.parallel._machine_memory = lambda: MachineMemory((), (), (), 64 * 1024**3, 32 * 1024**3, "no GPU")
        reply = harness.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=2)
        assert reply.usage is not None and reply.usage.completion_tokens == 2
        assert len(_snapshot(harness).slots) == 4


def test_the_idle_time_unloads_the_parallel_engine(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-8k.gguf", context_length=8192, name="tiny-8k", never_eos=True)
    with ApiHarness(tmp_path, ServerConfig(port=0, n_parallel=2, n_ctx=1024, idle_ttl_s=0)) as harness:
        harness.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=2)
        assert harness.wait_for(lambda: _snapshot(harness).entry is None)  # unloaded: its memory is free
        reply = harness.openai().chat.completions.create(model="tiny-8k", messages=HI, max_tokens=2)
        assert reply.usage is not None and reply.usage.completion_tokens == 2  # and loaded again when asked


def _parallel_load(api: ApiHarness) -> ParallelLoad | None:
    async def read() -> ParallelLoad | None:
        assert api.host is not None
        return api.host.parallel.loaded

    return api.run(read())


def test_by_default_a_model_runs_as_many_requests_as_fit_and_its_setting_or_keep_alive_decide(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-auto.gguf", name="tiny-auto", never_eos=True)
    write_tiny_gguf(tmp_path / "tiny-one.gguf", name="tiny-one", never_eos=True)
    config = ServerConfig(port=0, idle_ttl_s=0.3)
    with ApiHarness(tmp_path, config, settings_file=tmp_path / "settings.json") as api:
        assert api.settings is not None and api.host is not None
        api.settings.set(str(tmp_path / "tiny-one.gguf"), ModelSettings(load=LoadParams(n_parallel=1)))
        ask = api.openai().chat.completions.create
        reply = ask(model="tiny-auto", messages=HI, max_tokens=3, extra_body={"keep_alive": -1})
        assert reply.usage.completion_tokens == 3
        load = _parallel_load(api)
        assert load is not None and load.entry.endswith("tiny-auto.gguf")
        assert load.slots == DEFAULT_MOST_SLOTS  # by the memory estimate: a tiny model's 4 fit any machine
        assert not any(isinstance(e, ModelLoaded) for e in api.events)  # the single worker was not needed
        states = {m["id"]: m["state"] for m in api.http().get("/v1/models").json()["data"]}
        assert states["tiny-auto"] == "loaded" and states["tiny-one"] == "not-loaded"
        record = api.finished_records("chat.completions")[-1]
        assert record.note == f"loaded for {DEFAULT_MOST_SLOTS} parallel requests"
        assert not api.wait_for(lambda: _parallel_load(api) is None, 1.0)  # keep_alive -1: past the server's 0.3 s

        one = ask(model="tiny-one", messages=HI, max_tokens=2)
        assert one.usage.completion_tokens == 2  # its setting: one at a time, on the single worker
        assert [e.entry for e in api.events if isinstance(e, ModelLoaded)] == [str(tmp_path / "tiny-one.gguf")]

        ask(model="tiny-auto", messages=HI, max_tokens=2, extra_body={"keep_alive": 0})
        assert api.wait_for(lambda: _parallel_load(api) is None, 30)  # unloaded once the request ended
