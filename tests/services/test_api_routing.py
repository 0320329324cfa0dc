"""One base URL reaches every engine: a library GGUF runs in llama.cpp, an Ollama model in Ollama (the fake
Ollama server), a vLLM model on the vLLM server (the fake one, and once the real vLLM CPU server). Model ids are
unique and stable; a GGUF named like another engine's model gets its engine's prefix. Engines' own tool calls pass
through."""

from __future__ import annotations

import json
import threading

import pytest

from app.services.api.catalog import Candidate, assign_ids, ollama_lister
from app.services.api.config import ServerConfig
from app.services.engines.entries import EngineKind
from app.services.engines.events import ModelUnloaded, VllmEndpoint
from app.services.ollama.shared import SharedOllama
from tests.support.api_harness import ApiHarness
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

HI = [{"role": "user", "content": "hello there"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


# --- ids ----------------------------------------------------------------------------------------------------------
def test_ids_are_the_library_names_and_a_model_seen_with_a_namesake_is_told_apart():
    candidates = [
        Candidate(EngineKind.LLAMACPP, "/m/a/qwen-q4.gguf", "Qwen 7B"),
        Candidate(EngineKind.LLAMACPP, "/m/a/qwen-q8.gguf", "Qwen 7B"),
        Candidate(EngineKind.LLAMACPP, "/m/b/qwen-q8.gguf", "Qwen 7B"),
        Candidate(EngineKind.LLAMACPP, "/m/solo.gguf", "Solo"),
        Candidate(EngineKind.LLAMACPP, "/m/store/blob.gguf", "llama3.2:latest"),
        Candidate(EngineKind.OLLAMA, "ollama:llama3.2:latest", "llama3.2:latest"),
        Candidate(EngineKind.VLLM, "vllm:served", "served"),
    ]
    models = assign_ids(candidates)
    ids = {m.id: m for m in models}
    assert "Solo" in ids and "served" in ids and ids["served"].engine is EngineKind.VLLM
    assert ids["Qwen 7B"].entry == "/m/a/qwen-q4.gguf"  # seen together: the first by path keeps the name …
    assert ids["qwen-q8"].entry == "/m/a/qwen-q8.gguf"  # … the others go by their file's stem …
    twin = [i for i in ids if i.startswith("qwen-q8@")]  # … and with a short hash when even those match
    assert len(twin) == 1 and ids[twin[0]].entry == "/m/b/qwen-q8.gguf"
    assert ids["llama3.2:latest"].entry == "ollama:llama3.2:latest"  # the name Ollama gave it wins over the GGUF's
    assert ids["llamacpp/llama3.2:latest"].entry == "/m/store/blob.gguf"
    assert "llama3.2" in ids["llama3.2:latest"].aliases  # Ollama's name without ":latest"
    assert [m.id for m in assign_ids(candidates[::-1])] == [m.id for m in models]  # whatever the order seen
    again = assign_ids([Candidate(EngineKind.LLAMACPP, "/m/solo.gguf", "Solo")])
    assert again[0].id == "Solo"  # stable: the same file keeps its id


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-routing")
    write_tiny_gguf(folder / "tiny-gguf.gguf", name="tiny-gguf")
    write_tiny_gguf(folder / "shared.gguf", name="shared:latest")
    return folder


@pytest.fixture(scope="module")
def ollama():
    with FakeOllama() as fake:
        fake.add_model("llama3.2:latest")
        fake.add_model("shared:latest")
        yield fake


@pytest.fixture(scope="module")
def vllm():
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        yield fake


@pytest.fixture(scope="module")
def api(folder, ollama, vllm):
    harness = ApiHarness(folder, ServerConfig(port=0), list_ollama=ollama_lister(SharedOllama(lambda: ollama.host)),
                         ollama_host=ollama.host)  # fmt: skip
    with harness:

        async def offer() -> None:
            harness.host.offer_vllm(VllmEndpoint(vllm.base_url, "tiny-llama", None, "remote"))

        harness.run(offer())
        yield harness


def test_one_listing_has_every_engine_and_prefixes_the_clash(api, ollama):
    owners = {m.id: m.owned_by for m in api.openai().models.list()}
    assert owners == {
        "tiny-gguf": "llamacpp", "llama3.2:latest": "ollama", "tiny-llama": "vllm",
        "shared:latest": "ollama", "llamacpp/shared:latest": "llamacpp",
    }  # fmt: skip
    before = len(ollama.requests_to("/api/chat"))
    api.openai().chat.completions.create(model="shared:latest", messages=HI, max_tokens=2)
    assert len(ollama.requests_to("/api/chat")) > before  # Ollama's own name is its model's


def test_each_model_runs_in_its_engine(api, ollama, vllm):
    client = api.openai()
    gguf = client.chat.completions.create(model="tiny-gguf", messages=HI, max_tokens=3)
    parallel = api.host.parallel.loaded  # a llama.cpp model runs as many requests at once as fit (the default)
    assert gguf.usage.completion_tokens == 3 and parallel is not None and parallel.entry.endswith("tiny-gguf.gguf")

    before = len(ollama.requests_to("/api/chat"))
    local = client.chat.completions.create(model="llama3.2", messages=HI, max_tokens=50)
    assert local.choices[0].message.content.startswith("You said")  # the fake Ollama echoes
    assert len(ollama.requests_to("/api/chat")) > before

    served = client.chat.completions.create(model="tiny-llama", messages=HI, max_tokens=50)
    assert served.choices[0].message.content == "You said: hello there" and served.usage.prompt_tokens > 0
    assert vllm.requests_to("/v1/chat/completions")[-1].json["model"] == "tiny-llama"

    clash = api.anthropic().messages.create(model="ollama/shared:latest", max_tokens=50, messages=HI)
    assert clash.content[0].text.startswith("You said") and clash.model == "shared:latest"


def test_vllm_gets_whole_requests_whole_and_keeps_its_own_sampling_defaults(api, vllm):
    """A non-streamed request reaches vLLM without SSE (its per-token cost is the server's); what the client left
    unset is left to vLLM (the model's generation defaults), not filled with the app's llama.cpp settings."""
    whole = api.openai().chat.completions.create(model="tiny-llama", messages=HI, max_tokens=50, temperature=0.2)
    assert whole.choices[0].message.content == "You said: hello there" and whole.usage.completion_tokens > 0
    sent = vllm.requests_to("/v1/chat/completions")[-1].json
    assert sent["stream"] is False and "stream_options" not in sent
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 50
    assert not {"top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty"} & sent.keys()

    streamed = api.openai().chat.completions.create(model="tiny-llama", messages=HI, max_tokens=50, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "You said: hello there"
    assert vllm.requests_to("/v1/chat/completions")[-1].json["stream"] is True

    vllm.tool_arguments = {"city": "Oslo"}
    try:
        called = api.openai().chat.completions.create(
            model="tiny-llama", messages=HI, tools=TOOLS, tool_choice="required"
        )
    finally:
        vllm.tool_arguments = {}
    call = called.choices[0].message.tool_calls[0]
    assert json.loads(call.function.arguments) == {"city": "Oslo"} and called.choices[0].finish_reason == "tool_calls"


def test_vllm_takes_requests_side_by_side(api, vllm):
    vllm.token_delay_s = 0.05
    try:
        results: list[str] = []
        threads = [threading.Thread(target=lambda: results.append(api.openai().chat.completions.create(
            model="tiny-llama", messages=HI, max_tokens=20).choices[0].finish_reason)) for _ in range(6)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert results == ["stop"] * 6 and vllm.max_in_flight >= 6  # no line in front of vLLM
    finally:
        vllm.token_delay_s = 0.0


def test_engines_parsed_tool_calls_pass_through(api, ollama, vllm):
    vllm.tool_arguments = {"city": "Oslo"}
    reply = api.openai().chat.completions.create(model="tiny-llama", messages=HI, tools=TOOLS, tool_choice="required")
    call = reply.choices[0].message.tool_calls[0]
    assert reply.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}

    ollama.tool_calls = [{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]
    try:
        message = api.anthropic().messages.create(
            model="llama3.2", max_tokens=50, messages=HI,
            tools=[{"name": "get_weather", "input_schema": WEATHER}],
        )  # fmt: skip
        uses = [b for b in message.content if b.type == "tool_use"]
        assert message.stop_reason == "tool_use" and uses[0].input == {"city": "Rome"}
        import anthropic

        with pytest.raises(anthropic.BadRequestError, match="cannot force a tool call"):
            api.anthropic().messages.create(model="llama3.2", max_tokens=50, messages=HI, tool_choice={"type": "any"},
                                            tools=[{"name": "get_weather", "input_schema": WEATHER}])  # fmt: skip
    finally:
        ollama.tool_calls = None


def test_keep_alive_zero_unloads_an_ollama_model_right_after(api, ollama):
    api.openai().chat.completions.create(model="llama3.2", messages=HI, max_tokens=5, extra_body={"keep_alive": 0})
    assert api.wait_for(lambda: any(isinstance(e, ModelUnloaded) and e.engine is EngineKind.OLLAMA
                                    for e in api.events), 5)  # fmt: skip
    assert api.wait_for(lambda: "llama3.2:latest" not in ollama.loaded, 60)


def test_what_an_engine_cannot_do_is_a_400_never_ignored(api, ollama):
    import anthropic
    import openai

    ollama.logprobs_supported = False  # an Ollama before 0.12.11 ignores the field
    try:
        with pytest.raises(openai.BadRequestError, match="gave no logprobs") as caught:
            api.openai().chat.completions.create(model="llama3.2", messages=HI, max_tokens=5, logprobs=True)
        assert caught.value.body["param"] == "logprobs"
    finally:
        ollama.logprobs_supported = True
    with_logprobs = api.openai().chat.completions.create(model="llama3.2", messages=HI, logprobs=True, top_logprobs=2)
    assert with_logprobs.choices[0].logprobs.content[0].logprob == -0.25
    with pytest.raises(openai.BadRequestError, match="cannot complete raw text"):
        api.openai().completions.create(model="llama3.2", prompt="Once", max_tokens=3)
    with pytest.raises(openai.BadRequestError, match="cannot embed"):
        api.openai().embeddings.create(model="tiny-llama", input="text")
    with pytest.raises(anthropic.BadRequestError, match="cannot count tokens"):
        api.anthropic().messages.count_tokens(model="llama3.2", messages=HI)


def test_through_the_api_to_the_real_vllm_server(vllm_server):
    with ApiHarness(None, ServerConfig(port=0)) as api:
        endpoint = VllmEndpoint(vllm_server.base_url, vllm_server.served_model_name, vllm_server.api_key, "remote")

        async def offer() -> None:
            api.host.offer_vllm(endpoint)

        api.run(offer())
        ids = [m.id for m in api.openai().models.list()]
        assert ids == [vllm_server.served_model_name]
        reply = api.openai().chat.completions.create(model=ids[0], messages=HI, max_tokens=8, temperature=0)
        assert reply.usage.completion_tokens >= 1 and reply.choices[0].finish_reason in ("length", "stop")
        with api.anthropic().messages.stream(model=ids[0], max_tokens=8, messages=HI) as stream:
            events = [event.type for event in stream]
        assert events[0] == "message_start" and events[-1] == "message_stop"
