"""Context that fits the client, through the real llama.cpp worker and the official SDKs: ``ServerConfig.n_ctx``
(``serve --ctx``) over each model's saved context; a request longer than the loaded context reloads the model, in
its turn, with a larger one (rounded up, at most the trained context) and the request log says so; a prompt that
cannot fit is a 400 naming the figures and the setting; a model the window loaded is reloaded only while the window
is not waiting for it. Ollama gets the larger context as its ``num_ctx``; vLLM's refusal names ``--max-model-len``.
The servers here run one request at a time (``n_parallel=1``): this is the single worker's part; the parallel
engine's is in test_api_parallel.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.load_checks import estimate_settings
from app.core.memory.estimate import estimate_memory
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams, SamplingParams
from app.services.api.catalog import ollama_lister
from app.services.api.config import ServerConfig
from app.services.api.context import REPLY_ROOM, ContextNeed, CountMemo, most_that_fits, wanted_context
from app.services.engines.entries import EngineKind
from app.services.engines.events import ModelLoaded, ModelUnloaded, VllmEndpoint
from app.services.model_settings import ModelSettings
from app.services.ollama.shared import SharedOllama
from tests.support.api_harness import ApiHarness
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

HI = [{"role": "user", "content": "hello there"}]
LONG = [{"role": "user", "content": "tell me about the weather in the mountains, please " * 60}]
GIB = 1024**3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-context")
    write_tiny_gguf(folder / "roomy.gguf", name="roomy", context_length=8192)
    write_tiny_gguf(folder / "short.gguf", name="short", context_length=1024)
    return folder


def _loads(api):
    return [e for e in api.events if isinstance(e, ModelLoaded)]


def _message(error) -> str:
    body = error.body
    if isinstance(body, dict):
        return body.get("message") or body.get("error", {}).get("message") or str(error)
    return str(error)


def _settings(api, folder, name, n_ctx):
    api.settings.set(str(folder / name), ModelSettings(load=LoadParams(n_ctx=n_ctx)))


# --- what a request needs, and what fits (pure) ---------------------------------------------------------------
def test_the_reply_is_given_room_up_to_a_floor_and_the_context_is_rounded_up_to_the_trained_one():
    assert ContextNeed(HI, max_tokens=32000).room == REPLY_ROOM  # Claude Code's 32,000: not all of it
    assert ContextNeed(HI, max_tokens=4).room == 4 and ContextNeed(HI).room == REPLY_ROOM
    assert wanted_context(19_550, REPLY_ROOM, 32768) == 21504  # a multiple of 1024
    assert wanted_context(40_000, REPLY_ROOM, 32768) == 32768  # never past the trained context by itself
    assert wanted_context(1500, 4, None) == 2048
    assert ContextNeed(LONG).bound() > len(LONG[0]["content"])  # an upper bound: a token per byte, and framing
    assert ContextNeed([], prompt="x" * 100).chat() == [{"role": "user", "content": "x" * 100}]


def test_an_agents_next_turn_is_bounded_by_the_last_count_without_counting_again():
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    first = ContextNeed(LONG, tools)
    memo = CountMemo()
    assert memo.bound("m", first) is None  # nothing counted yet
    memo.remember("m", first, 700)
    reply = {"role": "assistant", "content": "It is sunny."}
    then = ContextNeed([*LONG, reply, *HI], tools)
    new_bytes = sum(len(json.dumps(m, sort_keys=True).encode()) + 16 for m in (reply, *HI))
    assert 700 + new_bytes < memo.bound("m", then) < then.bound()  # the count and the new messages' bytes
    assert memo.bound("m", ContextNeed([*LONG, reply], None)) is None  # other tools: counted again
    assert memo.bound("m", ContextNeed([*HI, reply], tools)) is None  # not the same start
    assert memo.bound("m", ContextNeed([], tools, prompt="x")) is None and memo.bound("other", then) is None


def test_the_largest_context_that_fits_counts_the_loaded_cache_as_given_back(folder):
    path = str(folder / "roomy.gguf")
    loaded = LoadParams(n_ctx=512)

    def machine(available: int) -> MachineMemory:
        return MachineMemory((), (), (), 64 * GIB, available, "no GPU here")

    assert most_that_fits(path, loaded, 0, 8192, machine(16 * GIB)) == 8192
    assert most_that_fits(path, LoadParams(n_ctx=256), 0, 8192, machine(0)) == 0  # nothing fits
    header = read_gguf_header(path)
    at_2048 = estimate_memory(header, estimate_settings(LoadParams(n_ctx=2048, n_gpu_layers=0))).host_bytes
    tight = most_that_fits(path, loaded, 0, 8192, machine(int(at_2048 / 0.9) + 1))
    assert tight is not None and 2048 <= tight < 8192  # the estimate's "fits", with 10% headroom
    assert most_that_fits(str(folder / "missing.gguf"), loaded, 0, 8192, machine(GIB)) is None  # cannot judge


def test_a_context_size_out_of_range_is_refused_with_the_setting():
    from app.core.errors import InvalidInputError

    assert ServerConfig(n_ctx=None).problems() == [] and ServerConfig(n_ctx=32768).problems() == []
    for bad in (0, 8, -1, 10**9):
        with pytest.raises(InvalidInputError, match="context size must be from 16") as refused:
            ServerConfig(n_ctx=bad).check()
        assert refused.value.setting == "n_ctx"


# --- the server -------------------------------------------------------------------------------------------------
def test_the_server_loads_each_model_with_its_own_context_and_serve_ctx_overrides_it(folder, tmp_path):
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1), settings_file=tmp_path / "a.json") as api:
        _settings(api, folder, "roomy.gguf", 1536)
        api.openai().chat.completions.create(model="roomy", messages=HI, max_tokens=2)
        assert [e.info.n_ctx for e in _loads(api)] == [1536]  # the model's saved context
        assert api.finished_records()[-1].n_ctx == 1536
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1, n_ctx=2560), settings_file=tmp_path / "b.json") as api:
        _settings(api, folder, "roomy.gguf", 1536)
        api.anthropic().messages.create(model="roomy", max_tokens=2, messages=HI)
        assert [(e.params.n_ctx, e.info.n_ctx) for e in _loads(api)] == [(2560, 2560)]  # --ctx wins


def test_a_request_longer_than_the_loaded_context_reloads_it_larger_and_the_log_says_so(folder, tmp_path):
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1), settings_file=tmp_path / "s.json") as api:
        _settings(api, folder, "roomy.gguf", 512)
        tokens = api.anthropic().messages.count_tokens(model="roomy", messages=LONG).input_tokens
        assert 512 < tokens < 8192 - 1024  # the test's premise: it needs a reload, and one fits
        reply = api.anthropic().messages.create(model="roomy", max_tokens=4, messages=LONG)
        assert reply.usage.input_tokens == tokens and reply.usage.output_tokens > 0
        expected = -(-(tokens + 4) // 1024) * 1024  # the prompt and the reply's 4 tokens, rounded up
        assert [e.info.n_ctx for e in _loads(api)] == [512, expected]
        record = api.finished_records("messages")[-1]
        assert record.status == 200 and record.n_ctx == expected and record.load_ms is not None
        assert record.note == f"reloaded with a context of {expected:,} tokens (was 512): the prompt has {tokens:,}"

        api.openai().chat.completions.create(model="roomy", messages=HI, max_tokens=2)
        assert len(_loads(api)) == 2  # a short request runs on the larger context as it is
        assert api.finished_records("chat.completions")[-1].note is None

        # a raw completion is counted as one user turn (a few tokens over, never under)
        long_prompt = LONG[0]["content"] * 3
        api.openai().completions.create(model="roomy", prompt=long_prompt, max_tokens=2)
        assert len(_loads(api)) == 3 and _loads(api)[-1].info.n_ctx > expected
        assert api.host.loaded(EngineKind.LLAMACPP).params.n_ctx == _loads(api)[-1].info.n_ctx


def test_a_prompt_beyond_the_trained_context_is_a_400_naming_the_figures_and_the_setting(folder, tmp_path):
    import anthropic
    import openai

    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1), settings_file=tmp_path / "s.json") as api:
        _settings(api, folder, "short.gguf", 512)
        tokens = api.anthropic().messages.count_tokens(model="short", messages=LONG).input_tokens
        assert tokens > 1024  # the premise: longer than the model was trained on
        with pytest.raises(openai.BadRequestError) as refused:
            api.openai().chat.completions.create(model="short", messages=LONG, max_tokens=4)
        message = _message(refused.value)
        assert refused.value.body["code"] == "context_length_exceeded"
        assert (
            f"{tokens:,} tokens" in message
            and "1,024 tokens" in message
            and "the server's context size option" in message
        )
        with pytest.raises(anthropic.BadRequestError, match="trained on a context of 1,024"):
            api.anthropic().messages.create(model="short", max_tokens=4, messages=LONG)
        assert [e.info.n_ctx for e in _loads(api)] == [512]  # nothing reloaded for nothing
        assert api.finished_records("messages")[-1].status == 400

        api.openai().chat.completions.create(model="short", messages=HI, max_tokens=4)  # the model still serves
        assert api.finished_records("chat.completions")[-1].status == 200


def test_a_model_the_window_loaded_is_reloaded_when_the_window_is_idle_and_stays_the_windows(folder):
    entry = str(folder / "roomy.gguf")
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1, idle_ttl_s=0.2)) as api:
        api.run(api.host.load(entry, LoadParams(n_ctx=512)))  # the window's load
        api.openai().chat.completions.create(model="roomy", messages=LONG, max_tokens=4)
        assert [e.info.n_ctx for e in _loads(api)] == [512, _loads(api)[-1].info.n_ctx] and len(_loads(api)) == 2
        assert _loads(api)[-1].info.n_ctx > 512
        assert "reloaded with a context" in (api.finished_records()[-1].note or "")
        assert not api.wait_for(lambda: any(isinstance(e, ModelUnloaded) for e in api.events), 1.0)  # no idle TTL


def test_a_model_the_window_waits_for_is_not_reloaded_under_it(folder):
    import openai

    entry = str(folder / "roomy.gguf")
    kind = EngineKind.LLAMACPP
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1)) as api:
        api.run(api.host.load(entry, LoadParams(n_ctx=512)))
        release = api.run(_make_event())
        holding = asyncio.run_coroutine_threadsafe(_hold(api.host, entry, release), api.background.loop)
        assert api.wait_for(lambda: api.host.in_use(kind), 10)  # the window holds the engine's turn
        failures: list[BaseException] = []

        def long_request() -> None:
            try:
                api.openai().chat.completions.create(model="roomy", messages=LONG, max_tokens=4)
            except BaseException as exc:  # the request's outcome, for the test thread
                failures.append(exc)

        request = threading.Thread(target=long_request)
        request.start()
        assert api.wait_for(lambda: api.host.waiting(kind) == 1, 30)  # the API request is in line
        window_reply = asyncio.run_coroutine_threadsafe(_window_reply(api.host), api.background.loop)
        assert api.wait_for(lambda: api.host.waiting(kind) == 2, 30)  # … and the window's reply behind it
        api.background.loop.call_soon_threadsafe(release.set)
        request.join(60)
        holding.result(30)
        assert window_reply.result(60)  # the window's reply ran on its model
        assert len(failures) == 1 and isinstance(failures[0], openai.BadRequestError)
        message = _message(failures[0])
        assert "loaded in the window with a context of 512" in message and "at least" in message
        assert [e.info.n_ctx for e in _loads(api)] == [512]


async def _make_event() -> asyncio.Event:
    return asyncio.Event()


async def _hold(host, entry: str, release: asyncio.Event) -> None:
    async with host.use(entry, LoadParams(n_ctx=512)):
        await release.wait()


async def _window_reply(host) -> bool:
    reply = host.stream_chat(EngineKind.LLAMACPP, HI, SamplingParams(max_tokens=2, temperature=0.0))
    [delta.text async for delta in reply]
    return reply.stats is not None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_starter_model_takes_a_long_prompt_by_growing_its_context(tmp_path_factory):
    """A real tokenizer and template: the starter's preset loads it with 4,096 tokens; a prompt of ~5,000 grows it."""
    from app.services import starter_model

    pytest.importorskip(starter_model.PACKAGE)
    models = tmp_path_factory.mktemp("starter")
    starter_model.ensure_starter_model(models)
    text = "The quick brown fox jumps over the lazy dog while the farmer sleeps in the sun. " * 260
    with ApiHarness(models, ServerConfig(port=0, n_parallel=1), settings_file=models / "settings.json") as api:
        name = api.openai().models.list().data[0].id
        long = [{"role": "user", "content": text}]
        tokens = api.anthropic().messages.count_tokens(model=name, messages=long).input_tokens
        assert 4096 < tokens < 32768 - 1024
        reply = api.anthropic().with_options(timeout=500).messages.create(model=name, max_tokens=8, messages=long)
        assert reply.usage.input_tokens == tokens
        assert [e.info.n_ctx for e in _loads(api)] == [4096, -(-(tokens + 8) // 1024) * 1024]
        assert "reloaded with a context" in (api.finished_records("messages")[-1].note or "")


# --- the other engines ------------------------------------------------------------------------------------------
def test_ollama_is_reloaded_with_the_num_ctx_the_request_needs():
    with FakeOllama() as ollama:
        ollama.add_model("llama3.2:latest", context_length=32768)
        lister = ollama_lister(SharedOllama(lambda: ollama.host))
        with ApiHarness(None, ServerConfig(port=0, n_parallel=1), list_ollama=lister, ollama_host=ollama.host) as api:
            long = [{"role": "user", "content": "word " * 4000}]  # ~6,700 tokens by the rough estimate
            api.openai().chat.completions.create(model="llama3.2", messages=long, max_tokens=50)
            wanted = wanted_context(ContextNeed(long).estimate(), 50, 32768)
            assert wanted > 4096 and ollama.loaded["llama3.2:latest"].num_ctx == wanted
            assert ollama.requests_to("/api/chat")[-1].json["options"]["num_ctx"] == wanted
            assert api.host.loaded(EngineKind.OLLAMA).info.n_ctx == wanted
            assert "reloaded with a context" in (api.finished_records()[-1].note or "")


def test_vllm_s_refusal_of_a_long_request_names_its_max_model_len():
    import openai

    with FakeOpenAIServer(models=("tiny-llama",), max_model_len=64) as vllm, ApiHarness(None) as api:

        async def offer() -> None:
            api.host.offer_vllm(VllmEndpoint(vllm.base_url, "tiny-llama", None, "remote"))

        api.run(offer())
        with pytest.raises(openai.BadRequestError) as refused:
            api.openai().chat.completions.create(model="tiny-llama", messages=LONG, max_tokens=10)
        message = _message(refused.value)
        assert "maximum context length is 64" in message and "--max-model-len" in message
