"""The Responses API over every engine, through the one base URL: an Ollama model (the fake Ollama server), a vLLM
model (the fake OpenAI-compatible server, and once the real vLLM CPU server), each plain, streamed and with the
engine's own parsed tool calls coming out as ``function_call`` items; the request log names the engine."""

from __future__ import annotations

import json

import pytest

from app.services.api.catalog import ollama_lister
from app.services.api.config import ServerConfig
from app.services.engines.events import VllmEndpoint
from app.services.ollama.shared import SharedOllama
from tests.support.api_harness import ApiHarness
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.timeout(180)

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]


@pytest.fixture(scope="module")
def ollama():
    with FakeOllama() as fake:
        fake.add_model("llama3.2:latest")
        yield fake


@pytest.fixture(scope="module")
def vllm():
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        yield fake


@pytest.fixture(scope="module")
def api(ollama, vllm):
    harness = ApiHarness(None, ServerConfig(port=0), list_ollama=ollama_lister(SharedOllama(lambda: ollama.host)),
                         ollama_host=ollama.host)  # fmt: skip
    with harness:

        async def offer() -> None:
            harness.host.offer_vllm(VllmEndpoint(vllm.base_url, "tiny-llama", None, "remote"))

        harness.run(offer())
        yield harness


@pytest.mark.parametrize("model, engine", [("llama3.2", "ollama"), ("tiny-llama", "vllm")])
def test_a_response_plain_and_streamed_on_each_engine(api, model, engine):
    client = api.openai()
    whole = client.responses.create(model=model, instructions="Be brief.", input="hello there", max_output_tokens=20)
    assert whole.output_text and whole.usage.output_tokens > 0 and whole.status in ("completed", "incomplete")
    assert api.finished_records("responses")[-1].engine == engine
    events = list(client.responses.create(model=model, input="hello there", max_output_tokens=20, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and events[-1].response.output_text == text
    assert events[-1].type in ("response.completed", "response.incomplete")


def test_the_engines_own_tool_calls_are_function_call_items(api, ollama, vllm):
    vllm.tool_arguments = {"city": "Oslo"}
    response = api.openai().responses.create(model="tiny-llama", input="weather?", tools=TOOLS,
                                             tool_choice="required")  # fmt: skip
    [call] = [i for i in response.output if i.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"} and call.call_id
    ollama.tool_calls = [{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]
    try:
        events = list(api.openai().responses.create(model="llama3.2", input="weather?", tools=TOOLS, stream=True))
    finally:
        ollama.tool_calls = None
    [done] = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert done.name == "get_weather" and json.loads(done.arguments) == {"city": "Rome"}
    assert events[-1].type == "response.completed"


@pytest.mark.timeout(600)  # the session's one vLLM server may start here (~30–90 s on 2 cores)
def test_through_the_responses_api_to_the_real_vllm_server(vllm_server):
    with ApiHarness(None, ServerConfig(port=0)) as api:
        endpoint = VllmEndpoint(vllm_server.base_url, vllm_server.served_model_name, vllm_server.api_key, "remote")

        async def offer() -> None:
            api.host.offer_vllm(endpoint)

        api.run(offer())
        model = vllm_server.served_model_name
        response = api.openai().responses.create(model=model, input="hello there", max_output_tokens=8, temperature=0)
        assert response.usage.output_tokens >= 1 and response.status in ("completed", "incomplete")
        events = [e.type for e in api.openai().responses.create(model=model, input="hi", max_output_tokens=8,
                                                                  stream=True)]  # fmt: skip
        assert events[:2] == ["response.created", "response.in_progress"] and events[-1] in (
            "response.completed", "response.incomplete")  # fmt: skip
