"""Reading API requests without a server: Anthropic messages in the engines' (OpenAI's) terms, keep_alive
durations, tool choices; and the model gate that lets a model switch wait its turn without being starved."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.services.api.anthropic_requests import messages_call
from app.services.api.errors import ApiError
from app.services.api.fields import UNSET, Fields
from app.services.api.openai_requests import chat_call
from app.services.engines.gate import ModelGate


def test_anthropic_messages_become_the_engines_messages():
    call = messages_call({
        "model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
        "stop_sequences": ["END"], "temperature": 0.3,
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "-3 C"}]},
                {"type": "text", "text": "and tomorrow?"}]},
        ],
        "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }, 100)  # fmt: skip
    assert call.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "hmm", "tool_calls": [{
            "id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "-3 C"},
        {"role": "user", "content": "and tomorrow?"},
    ]  # fmt: skip
    assert call.sampling == {"temperature": 0.3, "max_tokens": 9, "stop": ("END",)}
    assert call.options.tool_mode == "required" and not call.options.parallel_tool_calls
    assert call.options.tools[0]["function"]["description"] == "Weather"


def test_openai_messages_keep_tool_calls_and_join_text_parts():
    call = chat_call({
        "model": "m", "stream": True, "stream_options": {"include_usage": True}, "max_completion_tokens": 5,
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
    }, 100)  # fmt: skip
    assert call.messages[0] == {"role": "system", "content": "ab"}
    assert call.messages[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert call.messages[2] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
    assert call.stream and call.include_usage and call.sampling["max_tokens"] == 5 and call.keep_alive is UNSET


@pytest.mark.parametrize(
    ("body", "seconds"),
    [({"keep_alive": 0}, 0.0), ({"keep_alive": "5m"}, 300.0), ({"keep_alive": "1h30m"}, 5400.0),
     ({"keep_alive": "-1"}, -1.0), ({"keep_alive": "250ms"}, 0.25), ({"keep_alive": "45"}, 45.0),
     ({"ttl": 60}, 60.0), ({}, UNSET)],
)  # fmt: skip
def test_keep_alive_reads_ollamas_durations_and_lm_studios_ttl(body, seconds):
    assert Fields(body).keep_alive() == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "m5", True, [1]])
def test_a_keep_alive_that_is_not_a_duration_is_refused(value):
    with pytest.raises(ApiError) as caught:
        Fields({"keep_alive": value}).keep_alive()
    assert caught.value.status == 400 and caught.value.param == "keep_alive"


def test_the_error_shapes_of_both_apis():
    error = ApiError(404, "no such model", param="model", code="model_not_found")
    assert error.body(error_dialect("openai")) == {
        "error": {"message": "no such model", "type": "invalid_request_error", "param": "model",
                  "code": "model_not_found"}}  # fmt: skip
    assert error.body(error_dialect("anthropic")) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no such model"},
    }
    assert json.dumps(error.body(error_dialect("anthropic")))


def error_dialect(name: str):
    from app.services.api.errors import Dialect

    return Dialect(name)


def test_a_model_switch_waits_for_the_requests_on_the_loaded_model_and_is_not_starved():
    async def scenario() -> list[str]:
        gate, order = ModelGate(), []

        async def use(key: str, hold: float) -> None:
            async with gate.use(key):
                order.append(f"+{key}")
                await asyncio.sleep(hold)
                order.append(f"-{key}")

        first = asyncio.create_task(use("a", 0.05))
        await asyncio.sleep(0)
        switch = asyncio.create_task(use("b", 0.01))
        await asyncio.sleep(0)
        late_same = asyncio.create_task(use("a", 0.01))  # arrives after the switch: waits behind it
        await asyncio.gather(first, switch, late_same)
        assert gate.holders == 0 and gate.waiting == 0
        return order

    assert asyncio.run(scenario()) == ["+a", "-a", "+b", "-b", "+a", "-a"]


def test_a_request_that_gives_up_waiting_leaves_the_line():
    async def scenario() -> None:
        gate = ModelGate()
        async with gate.use("a"):
            waiting = asyncio.create_task(gate.use("b").__aenter__())
            await asyncio.sleep(0)
            assert gate.waiting == 1
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            assert gate.waiting == 0
        async with gate.use("c"):
            assert gate.active == "c"

    asyncio.run(scenario())
