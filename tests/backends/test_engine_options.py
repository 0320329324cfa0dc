"""Structured output, tools and logprobs passed to vLLM and Ollama, which enforce and parse them themselves: the
request shapes each server receives, the tool calls and logprobs read back from their streams, and what each
refuses rather than ignores. Against the fake servers (tests/support/fake_openai.py, fake_ollama.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.backends.ollama import OllamaBackend
from app.backends.protocol import RequestRefusedError, TextCompletion
from app.backends.vllm import VllmBackend
from app.core.errors import InvalidInputError
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.timeout(60)

USER = [{"role": "user", "content": "hello big world"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "strict": True}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


# --- vLLM -------------------------------------------------------------------------------------------------------
@pytest.fixture
def vllm():
    with FakeOpenAIServer(("tiny",)) as server:
        yield server
    assert not server.handler_errors


async def _vllm_deltas(fake, options, messages=USER, prompt=None, params=None):
    backend = VllmBackend(fake.base_url)
    try:
        await backend.load("tiny", LoadParams(n_ctx=2048))
        params = params or SamplingParams(max_tokens=16)
        if prompt is not None:
            stream = backend.stream_completion(prompt, params, options)
        else:
            stream = backend.stream_chat(messages, params, options)
        return [d async for d in stream], stream.stats
    finally:
        await backend.close()


def test_vllm_gets_response_format_tools_and_logprobs_as_openai_fields(vllm):
    options = GenerationOptions(response_format=JSON_SCHEMA, tools=TOOLS, parallel_tool_calls=False, logprobs=True,
                                top_logprobs=2)  # fmt: skip
    run(_vllm_deltas(vllm, options))
    (request,) = vllm.requests_to("/v1/chat/completions")
    body = request.json
    assert body["response_format"] == JSON_SCHEMA and body["tools"] == TOOLS and body["tool_choice"] == "auto"
    assert body["parallel_tool_calls"] is False and body["logprobs"] is True and body["top_logprobs"] == 2
    run(_vllm_deltas(vllm, GenerationOptions()))
    plain = vllm.requests_to("/v1/chat/completions")[-1].json
    assert not {"response_format", "tools", "tool_choice", "logprobs", "top_logprobs"} & set(plain)


def test_vllm_tool_calls_come_back_as_tool_call_pieces(vllm):
    vllm.tool_arguments = {"city": "Paris"}
    deltas, stats = run(_vllm_deltas(vllm, GenerationOptions(tools=TOOLS, tool_choice=NAMED)))
    pieces = [piece for d in deltas for piece in d.tool_calls or []]
    assert pieces[0]["function"]["name"] == "get_weather" and pieces[0]["id"].startswith("chatcmpl-tool-")
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == {"city": "Paris"}
    assert {p["index"] for p in pieces} == {0} and stats.finish_reason == "tool_calls"
    assert vllm.requests_to("/v1/chat/completions")[0].json["tool_choice"] == NAMED


def test_vllm_logprobs_come_back_per_token(vllm):
    deltas, _ = run(_vllm_deltas(vllm, GenerationOptions(logprobs=True, top_logprobs=3)))
    entries = [e for d in deltas for e in d.logprobs or []]
    assert [e["token"] for e in entries] == [d.text for d in deltas if d.text]
    assert all(len(e["top_logprobs"]) == 3 and e["logprob"] == -0.5 for e in entries)


def test_vllm_completions_take_the_prompt_and_logprobs(vllm):
    deltas, stats = run(_vllm_deltas(vllm, GenerationOptions(logprobs=True, top_logprobs=2), prompt="big world"))
    assert "".join(d.text for d in deltas) == "You said: big world" and stats.finish_reason == "stop"
    (request,) = vllm.requests_to("/v1/completions")
    assert request.json["prompt"] == "big world" and request.json["logprobs"] == 2
    entries = [e for d in deltas for e in d.logprobs or []]
    assert len(entries) == 4 and all(len(e["top_logprobs"]) == 2 for e in entries)
    assert isinstance(VllmBackend(vllm.base_url), TextCompletion)


def test_vllm_refusing_a_request_is_a_refused_request(vllm):
    vllm.tool_parser = False  # a server started without --enable-auto-tool-choice
    with pytest.raises(RequestRefusedError, match="enable-auto-tool-choice") as caught:
        run(_vllm_deltas(vllm, GenerationOptions(tools=TOOLS)))
    assert caught.value.kind == "invalid_input"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (GenerationOptions(grammar='root ::= "x"'), "llama.cpp only"),
        (GenerationOptions(tool_choice="required"), "needs tools"),
        (GenerationOptions(response_format={"type": "yaml"}), "response_format.type"),
    ],
)
def test_vllm_refuses_what_it_cannot_do_before_sending(vllm, options, words):
    with pytest.raises(InvalidInputError, match=words):
        run(_vllm_deltas(vllm, options))
    assert not vllm.requests_to("/v1/chat/completions")


def test_vllm_completions_refuse_tools(vllm):
    with pytest.raises(InvalidInputError, match="cannot call tools"):
        run(_vllm_deltas(vllm, GenerationOptions(tools=TOOLS), prompt="x"))


# --- Ollama ------------------------------------------------------------------------------------------------------
@pytest.fixture
def ollama():
    with FakeOllama() as server:
        server.add_model("llama3.2")
        yield server
    assert not server.handler_errors


async def _ollama_deltas(fake, options, messages=USER, params=None):
    backend = OllamaBackend(fake.host)
    try:
        await backend.load("llama3.2", LoadParams(n_ctx=2048))
        deltas = [d async for d in backend.stream_chat(messages, params or SamplingParams(), options)]
        return deltas, backend.stats()
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("response_format", "expected"), [({"type": "json_object"}, "json"), (JSON_SCHEMA, SCHEMA), (None, None)]
)
def test_ollama_gets_format_as_json_or_the_schema(ollama, response_format, expected):
    run(_ollama_deltas(ollama, GenerationOptions(response_format=response_format)))
    assert ollama.requests_to("/api/chat")[-1].json.get("format") == expected


def test_ollama_gets_tools_and_its_tool_calls_come_back_numbered(ollama):
    ollama.tool_calls = [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
    ]
    deltas, stats = run(_ollama_deltas(ollama, GenerationOptions(tools=TOOLS)))
    calls = [c for d in deltas for c in d.tool_calls or []]
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (0, "get_weather", {"city": "Paris"}),
        (1, "get_weather", {"city": "Rome"}),
    ]
    assert len({c["id"] for c in calls}) == 2 and stats.finish_reason == "stop"
    assert ollama.requests_to("/api/chat")[-1].json["tools"] == TOOLS


def test_ollama_tool_choice_none_sends_no_tools(ollama):
    ollama.tool_calls = [{"function": {"name": "get_weather", "arguments": {}}}]
    deltas, _ = run(_ollama_deltas(ollama, GenerationOptions(tools=TOOLS, tool_choice="none")))
    assert "tools" not in ollama.requests_to("/api/chat")[-1].json and not any(d.tool_calls for d in deltas)


def test_ollama_history_tool_calls_carry_object_arguments(ollama):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    history = [*USER, {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]  # fmt: skip
    run(_ollama_deltas(ollama, GenerationOptions(tools=TOOLS), messages=history))
    sent = ollama.requests_to("/api/chat")[-1].json["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"} and sent[2] == history[2]
    assert call["function"]["arguments"] == '{"city": "Oslo"}'  # the caller's messages are untouched


def test_ollama_tool_results_in_openai_shape_are_named_by_tool_name(ollama):
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    history = [*USER, {"role": "assistant", "content": "", "tool_calls": calls},
               {"role": "tool", "tool_call_id": "c2", "content": "noon"},
               {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"}]  # fmt: skip
    run(_ollama_deltas(ollama, GenerationOptions(tools=TOOLS), messages=history))
    sent = ollama.requests_to("/api/chat")[-1].json["messages"]
    assert sent[2] == {"role": "tool", "content": "noon", "tool_name": "get_time"}
    assert sent[3] == {"role": "tool", "content": "sunny", "tool_name": "get_weather"}


def test_ollama_logprobs_come_back_in_openai_shape(ollama):
    deltas, _ = run(_ollama_deltas(ollama, GenerationOptions(logprobs=True, top_logprobs=2)))
    body = ollama.requests_to("/api/chat")[-1].json
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    for delta in deltas:
        (entry,) = delta.logprobs
        assert entry["token"] == delta.text and bytes(entry["bytes"]).decode() == delta.text
        assert [t["logprob"] for t in entry["top_logprobs"]] == [-0.25, -2.0]


def test_ollama_gets_stop_and_penalties(ollama):
    params = SamplingParams(stop=("END",), presence_penalty=0.5, frequency_penalty=0.25)
    run(_ollama_deltas(ollama, None, params=params))
    options = ollama.requests_to("/api/chat")[-1].json["options"]
    assert options["stop"] == ["END"] and options["presence_penalty"] == 0.5 and options["frequency_penalty"] == 0.25


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (GenerationOptions(tools=TOOLS, tool_choice="required"), "cannot force a tool call"),
        (GenerationOptions(tools=TOOLS, tool_choice=NAMED), "cannot force a tool call"),
        (GenerationOptions(grammar='root ::= "x"'), "llama.cpp only"),
        (GenerationOptions(logprobs=True, top_logprobs=99), "top_logprobs"),
    ],
)
def test_ollama_refuses_what_it_cannot_enforce(ollama, options, words):
    with pytest.raises(InvalidInputError, match=words):
        run(_ollama_deltas(ollama, options))
    assert all(not r.json.get("messages") for r in ollama.requests_to("/api/chat"))  # only the warm-up was sent
