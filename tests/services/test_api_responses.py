"""The Responses API (``POST /v1/responses``) with the official ``openai`` SDK as the client, against the real server
and the real llama.cpp worker on generated GGUFs: plain and streamed responses (the events in OpenAI's order, each
parsed by the SDK's own stream reader), ``instructions`` and item input, function tools and a tool round trip,
``text.format`` json_schema, thinking as a ``reasoning`` item, logprobs, and each bad input refused with its
``param``. A grammar (llama-server's extension) makes the random-weight model write an exact text where a test needs
one."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import jsonschema
import openai
import pydantic
import pytest

from app.services.api.config import ServerConfig
from tests.backends.test_thinking_engines import THINK_TEMPLATE
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "The weather", "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}},
]
HERMES_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def literal(text: str) -> dict[str, str]:
    """A grammar that lets the model write only ``text`` (then it stops)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return {"grammar": f'root ::= "{escaped}"'}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("responses-models")
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat", never_eos=True)
    write_tiny_gguf(folder / "tiny-tools.gguf", name="tiny-tools", chat_template=HERMES_TOOLS_TEMPLATE)
    write_tiny_gguf(folder / "tiny-think.gguf", name="tiny-think", chat_template=THINK_TEMPLATE)
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


# --- plain ------------------------------------------------------------------------------------------------------
def test_a_response_cut_at_max_output_tokens_is_incomplete_with_its_usage(api):
    response = api.openai().responses.create(model="tiny-chat", input="hello there", max_output_tokens=5, temperature=0,
                                             metadata={"run": "1"}, user="u-1")  # fmt: skip
    assert response.id.startswith("resp_") and response.object == "response" and response.model == "tiny-chat"
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "incomplete"
    assert message.id.startswith("msg_") and message.content[0].type == "output_text"
    assert response.output_text == message.content[0].text and response.output_text  # the SDK's own property
    usage = response.usage
    assert usage.output_tokens == 5 and usage.input_tokens > 5 and usage.total_tokens == usage.input_tokens + 5
    assert usage.output_tokens_details.reasoning_tokens == 0 and usage.input_tokens_details.cached_tokens == 0
    assert response.max_output_tokens == 5 and response.metadata == {"run": "1"} and response.user == "u-1"
    assert response.store is True and response.tools == [] and response.tool_choice == "auto"
    assert response.parallel_tool_calls is True and response.text.format.type == "text"
    assert response.created_at > 0 and response.error is None
    record = api.finished_records("responses")[-1]
    assert record.status == 200 and record.model == "tiny-chat" and record.completion_tokens == 5


def test_a_finished_response_is_completed(api):
    response = api.openai().responses.create(model="tiny-chat", input="hi", temperature=0.3, top_p=0.9,
                                             extra_body=literal("Hello, world!"))  # fmt: skip
    assert response.status == "completed" and response.incomplete_details is None
    assert response.output_text == "Hello, world!" and response.output[0].status == "completed"
    assert (response.temperature, response.top_p) == (0.3, 0.9)


def test_instructions_and_system_items_make_one_system_prompt(api):
    """``instructions`` and a leading developer/system message are the one system prompt the template gets: the
    same prompt whichever way a client sends it, and a string input is one user message."""
    client = api.openai()
    ask = dict(model="tiny-chat", max_output_tokens=1)
    by_instructions = client.responses.create(**ask, instructions="Be terse.", input="hello there")
    by_items = client.responses.create(**ask, input=[
        {"role": "developer", "content": "Be terse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]},
    ])  # fmt: skip
    both = client.responses.create(**ask, instructions="Be terse.", input=[
        {"role": "system", "content": "Be kind."}, {"role": "user", "content": "hello there"}])  # fmt: skip
    plain = client.responses.create(**ask, input="hello there")
    assert by_instructions.usage.input_tokens == by_items.usage.input_tokens > plain.usage.input_tokens
    assert both.usage.input_tokens > by_instructions.usage.input_tokens


def test_an_assistant_turn_in_the_input_is_part_of_the_conversation(api):
    client = api.openai()
    alone = client.responses.create(model="tiny-chat", input="and now?", max_output_tokens=1)
    turns = client.responses.create(model="tiny-chat", max_output_tokens=1, input=[
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": "and now?"},
    ])  # fmt: skip
    assert turns.usage.input_tokens > alone.usage.input_tokens + 4


# --- streamed -------------------------------------------------------------------------------------------------------
def test_a_stream_sends_the_events_in_openais_order(api):
    stream = api.openai().responses.create(
        model="tiny-chat", input="hi", stream=True, max_output_tokens=6, temperature=0
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]  # fmt: skip
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]  # fmt: skip
    created, final = events[0].response, events[-1].response
    assert created.status == "in_progress" and created.output == [] and created.id == final.id
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-4].text == text == final.output_text and final.usage.output_tokens == 6
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {final.output[0].id}


def test_the_sdks_stream_helper_reads_a_completed_stream(api):
    with api.openai().responses.stream(model="tiny-chat", input="hi", extra_body=literal("Fine, thanks.")) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Fine, thanks." and final.status == "completed"


def test_the_raw_stream_names_each_event_as_its_data_does(api):
    with api.http() as http, http.stream("POST", "/v1/responses", json={
        "model": "tiny-chat", "input": "hi", "stream": True, "max_output_tokens": 3,
    }) as response:  # fmt: skip
        lines = [line for line in response.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert names == [d["type"] for d in data] and names[0] == "response.created"
    assert "[DONE]" not in "".join(lines)  # the Responses stream ends with its last event


# --- tools ----------------------------------------------------------------------------------------------------------
def test_a_required_tool_gives_one_function_call_that_parses(api):
    response = api.openai().responses.create(model="tiny-tools", input="weather?", tools=TOOLS,
                                             tool_choice="required", parallel_tool_calls=False,
                                             max_output_tokens=200, temperature=0.8)  # fmt: skip
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and response.status == "completed"
    call = calls[0]
    assert call.id.startswith("fc_") and call.call_id and call.status == "completed"
    assert call.name in ("get_weather", "get_time") and isinstance(json.loads(call.arguments), dict)
    if call.name == "get_weather":
        jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert [t.name for t in response.tools] == ["get_weather", "get_time"] and response.tools[0].strict is True
    assert response.parallel_tool_calls is False and response.tool_choice == "required"


def test_a_named_tool_streams_its_arguments(api):
    with api.openai().responses.stream(model="tiny-tools", input="weather?", tools=TOOLS, max_output_tokens=200,
                                       tool_choice={"type": "function", "name": "get_weather"}) as stream:  # fmt: skip
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather" and added.item.arguments == ""
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == deltas
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.output_item.done")
    jsonschema.validate(json.loads(deltas), WEATHER)
    [call] = [i for i in final.output if i.type == "function_call"]
    assert call.arguments == deltas and call.id == added.item.id and call.call_id == added.item.call_id
    assert kinds[-1] == "response.completed"


def test_a_tool_round_trip_sends_the_call_and_its_output_back(api):
    client = api.openai()
    named = {"type": "function", "name": "get_weather"}
    first = client.responses.create(model="tiny-tools", input="weather in Paris?", tools=TOOLS, tool_choice=named,
                                    max_output_tokens=200)  # fmt: skip
    [call] = [i for i in first.output if i.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear"}'}
    again = client.responses.create(model="tiny-tools", tools=TOOLS, max_output_tokens=4, input=[
        {"role": "user", "content": "weather in Paris?"}, call.model_dump(exclude_none=True), result])  # fmt: skip
    assert again.output[0].type == "message" and again.output[0].role == "assistant"  # answered, not called again
    assert (again.status == "incomplete") == (again.usage.output_tokens == 4)  # the tiny model may end sooner
    chained = client.responses.create(model="tiny-tools", tools=TOOLS, max_output_tokens=4,
                                      previous_response_id=first.id, input=[result])  # fmt: skip
    assert chained.usage.input_tokens == again.usage.input_tokens  # the stored call stands in for the sent one
    assert chained.previous_response_id == first.id


def test_a_function_call_output_without_its_call_is_refused(api):
    with pytest.raises(openai.BadRequestError) as caught:
        api.openai().responses.create(model="tiny-tools", tools=TOOLS, input=[
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "call_nowhere", "output": "42"}])  # fmt: skip
    assert "call_nowhere" in caught.value.message and caught.value.body["param"] == "input"


# --- text format --------------------------------------------------------------------------------------------------
class Forecast(pydantic.BaseModel):
    city: Literal["Paris", "Rome"]
    days: int = pydantic.Field(ge=1, le=7)


def test_a_json_schema_format_gives_text_that_parses_and_validates(api):
    bounded = {**WEATHER, "properties": {**WEATHER["properties"], "note": {"type": "string", "maxLength": 5}},
               "required": ["city", "days", "note"]}  # fmt: skip
    response = api.openai().responses.create(model="tiny-chat", input="weather?", max_output_tokens=200, text={
        "format": {"type": "json_schema", "name": "forecast", "schema": bounded, "strict": True}})  # fmt: skip
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), bounded)
    assert response.text.format.type == "json_schema" and response.text.format.name == "forecast"
    parsed = api.openai().responses.parse(model="tiny-chat", input="weather?", text_format=Forecast,
                                          max_output_tokens=200)  # fmt: skip
    assert isinstance(parsed.output_parsed, Forecast)  # the SDK sent the schema and parsed what came back


def test_a_json_object_format_gives_an_object(api):
    response = api.openai().responses.create(model="tiny-chat", input="hi", max_output_tokens=80,
                                             text={"format": {"type": "json_object"}})  # fmt: skip
    assert response.output_text.lstrip().startswith("{")
    if response.status == "completed":
        assert isinstance(json.loads(response.output_text), dict)


# --- thinking and logprobs ---------------------------------------------------------------------------------------
THOUGHT = {"grammar": 'root ::= "Let me see" "</think>" "Yes"'}  # after the template's opening <think>


def test_thinking_comes_as_a_reasoning_item_before_the_message(api):
    response = api.openai().responses.create(model="tiny-think", input="hi", max_output_tokens=40,
                                             extra_body=THOUGHT)  # fmt: skip
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_") and reasoning.summary == []
    assert reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text == "Let me see"
    assert message.type == "message" and response.output_text == "Yes"
    assert 0 < response.usage.output_tokens_details.reasoning_tokens < response.usage.output_tokens
    again = api.openai().responses.create(model="tiny-think", max_output_tokens=1, previous_response_id=response.id,
                                          input="and?")  # fmt: skip
    bare = api.openai().responses.create(model="tiny-think", max_output_tokens=1, input=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Yes"},
        {"role": "user", "content": "and?"}])  # fmt: skip
    assert again.usage.input_tokens > bare.usage.input_tokens  # the template shows the earlier thinking again


def test_streamed_thinking_has_its_own_item_and_events(api):
    with api.openai().responses.stream(model="tiny-think", input="hi", max_output_tokens=40,
                                       extra_body=THOUGHT) as stream:  # fmt: skip
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thinking == "Let me see"
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    assert [i.type for i in final.output] == ["reasoning", "message"] and final.output_text == "Yes"


def test_reasoning_effort_and_none_reach_the_template(api):
    client = api.openai()
    ask = dict(model="tiny-think", input="hi", max_output_tokens=1)
    default = client.responses.create(**ask)
    high = client.responses.create(**ask, reasoning={"effort": "high"})
    off = client.responses.create(**ask, reasoning={"effort": "none"})
    assert high.usage.input_tokens > default.usage.input_tokens and off.usage.input_tokens > default.usage.input_tokens
    assert high.reasoning.effort == "high"


def test_logprobs_come_with_the_text_when_included(api):
    response = api.openai().responses.create(model="tiny-chat", input="hi", max_output_tokens=4, top_logprobs=2,
                                             include=["message.output_text.logprobs"])  # fmt: skip
    entries = response.output[0].content[0].logprobs
    assert len(entries) == 4 and all(e.logprob <= 0 and len(e.top_logprobs) == 2 for e in entries)
    stream = api.openai().responses.create(model="tiny-chat", input="hi", max_output_tokens=3, stream=True,
                                           include=["message.output_text.logprobs"])  # fmt: skip
    deltas = [e for e in stream if e.type == "response.output_text.delta"]
    assert sum(len(d.logprobs) for d in deltas) == 3


# --- bad input --------------------------------------------------------------------------------------------------
# fmt: off
BAD = {
    "no model": ({"input": "hi"}, "model"),
    "no input": ({"model": "tiny-chat"}, "input"),
    "empty input": ({"model": "tiny-chat", "input": []}, "input"),
    "input not a list": ({"model": "tiny-chat", "input": {"role": "user"}}, "input"),
    "an unknown role": ({"model": "tiny-chat", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    "an image part": ({"model": "tiny-chat", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://x/y.png"}]}]}, "input[0].content[0]"),
    "a built-in tool's item": ({"model": "tiny-chat", "input": [{"type": "web_search_call", "id": "ws_1"}]},
                               "input[0]"),
    "an item reference": ({"model": "tiny-chat", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    "a call without call_id": ({"model": "tiny-chat", "input": [{"type": "function_call", "name": "f"}]},
                               "input[0].call_id"),
    "only a system message": ({"model": "tiny-chat", "input": [{"role": "system", "content": "x"}]}, "input"),
    "a forced built-in tool": ({"model": "tiny-chat", "input": "hi", "tools": [{"type": "web_search"}],
                                "tool_choice": {"type": "web_search"}}, "tool_choice"),  # unforced: not shown
    "a tool in Chat's shape": ({"model": "tiny-chat", "input": "hi", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools[0]"),
    "a tool without a name": ({"model": "tiny-chat", "input": "hi", "tools": [{"type": "function"}]},
                              "tools[0].name"),
    "a choice of an unknown tool": ({"model": "tiny-chat", "input": "hi", "tools": TOOLS,
                                     "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    "required without tools": ({"model": "tiny-chat", "input": "hi", "tool_choice": "required"}, "tool_choice"),
    "a schema format without a schema": ({"model": "tiny-chat", "input": "hi", "text": {
        "format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    "a format in Chat's shape": ({"model": "tiny-chat", "input": "hi", "text": {"format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}}, "text.format"),
    "an unknown format": ({"model": "tiny-chat", "input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format"),
    "an unknown effort": ({"model": "tiny-chat", "input": "hi", "reasoning": {"effort": "max"}}, "reasoning.effort"),
    "max_output_tokens 0": ({"model": "tiny-chat", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    "a temperature of 3": ({"model": "tiny-chat", "input": "hi", "temperature": 3}, "temperature"),
    "include not a list": ({"model": "tiny-chat", "input": "hi", "include": "x"}, "include"),
    "a background run": ({"model": "tiny-chat", "input": "hi", "background": True}, "background"),
    "a conversation": ({"model": "tiny-chat", "input": "hi", "conversation": "conv_1"}, "conversation"),
    "a stored prompt": ({"model": "tiny-chat", "input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt"),
    "a bad truncation": ({"model": "tiny-chat", "input": "hi", "truncation": "middle"}, "truncation"),
}
# fmt: on


@pytest.mark.parametrize("body, param", BAD.values(), ids=BAD.keys())
def test_bad_input_is_a_400_naming_the_field(api, body, param):
    response = api.http().post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_an_unknown_model_is_a_404_and_malformed_json_a_400(api):
    with pytest.raises(openai.NotFoundError):
        api.openai().responses.create(model="no-such-model", input="hi")
    broken = api.http().post("/v1/responses", content=b"{not json", headers={"content-type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"


def test_a_schema_the_grammar_cannot_enforce_is_refused_before_the_stream_starts(api):
    unique = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    with httpx.Client(base_url=api.url, timeout=60) as http:
        response = http.post("/v1/responses", json={"model": "tiny-chat", "input": "hi", "stream": True, "text": {
            "format": {"type": "json_schema", "name": "u", "schema": unique}}})  # fmt: skip
    assert response.status_code == 400 and "uniqueItems" in response.json()["error"]["message"]


# --- every body and event, validated against the SDK's own types --------------------------------------------------
def test_every_body_and_event_validates_as_the_sdks_types(api):
    """Not just read leniently (the SDK constructs without validating): each field has the type the SDK's pydantic
    models declare, for a message with logprobs, thinking, and function calls, streamed and not."""
    from openai.types.responses import Response, ResponseStreamEvent

    events = pydantic.TypeAdapter(ResponseStreamEvent)
    asks = [
        {"model": "tiny-chat", "input": "hi", "max_output_tokens": 4, "include": ["message.output_text.logprobs"],
         "top_logprobs": 1},
        {"model": "tiny-think", "input": "hi", "max_output_tokens": 40, **THOUGHT, "reasoning": {"effort": "low"}},
        {"model": "tiny-tools", "input": "hi", "tools": TOOLS, "tool_choice": "required", "max_output_tokens": 200,
         "parallel_tool_calls": True, "text": {"format": {"type": "text"}, "verbosity": "low"}},
    ]  # fmt: skip
    with api.http() as http:
        for ask in asks:
            whole = http.post("/v1/responses", json=ask)
            assert whole.status_code == 200, whole.text
            Response.model_validate(whole.json())
            with http.stream("POST", "/v1/responses", json={**ask, "stream": True}) as stream:
                data = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
            for event in data:
                events.validate_python(event)
            Response.model_validate(data[-1]["response"])


def test_a_failure_mid_stream_is_a_response_failed_event_with_what_came_before(api):
    from openai.types.responses import ResponseFailedEvent

    from app.core.chat.reply_reader import CallArgs, CallStart, TextOut, ThinkingOut
    from app.services.api.errors import ApiError
    from app.services.api.responses_render import ResponseEvents, ResponseHead

    stream = ResponseEvents(ResponseHead("tiny-chat", {"parallel_tool_calls": True, "tool_choice": "auto",
                                                       "tools": []}))  # fmt: skip
    sent = stream.first() + stream.outs([ThinkingOut("hm"), TextOut("Checking."), CallStart(0, "call_1", "get_time"),
                                         CallArgs(0, "{}")])  # fmt: skip
    failed = ResponseFailedEvent.model_validate(stream.failed(ApiError(500, "The engine stopped.")))
    assert failed.response.status == "failed" and failed.response.error.code == "server_error"
    assert failed.response.error.message == "The engine stopped."
    assert [i.type for i in failed.response.output] == ["reasoning", "message"]  # the call never finished
    assert failed.sequence_number == len(sent)
