"""The API server with the official ``openai`` and ``anthropic`` SDKs as clients, against the real server (uvicorn
in-process) and the real llama.cpp worker on generated GGUFs: models, chat and text completions, streaming and
not, usage and finish reasons, logprobs, the Messages API's event order, token counts, embeddings, structured
output validated with ``jsonschema``, forced tool calls that parse, the request log and the metrics."""

from __future__ import annotations

import json

import jsonschema
import pytest

from app.services.api.config import ServerConfig
from app.services.engines.entries import EngineKind
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

HI = [{"role": "user", "content": "hello there"}]
BOUNDED = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": -3, "maximum": 12},
        "name": {"type": "string", "maxLength": 6},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "count", "name", "tags", "ok"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
HERMES_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# A thinking model's template (Qwen3-like: it mentions <think>), tools shown in Hermes' format.
THINKING_TOOLS_TEMPLATE = "{#- replies may start with <think>...</think> -#}" + HERMES_TOOLS_TEMPLATE
CALL = '<tool_call>{{"name": "get_time", "arguments": {{"zone": "{}"}}}}</tool_call>'
# What the model writes (forced by a raw grammar): a call inside its thinking, then two calls after it.
FORCED = f"<think>I could use {CALL.format('UTC')} here.</think>Checking. {CALL.format('CET')}\n{CALL.format('UTC')}"


def gbnf_literal(text: str) -> str:
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-models")
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat")
    write_tiny_gguf(folder / "tiny-tools.gguf", name="tiny-tools", chat_template=HERMES_TOOLS_TEMPLATE)
    write_tiny_gguf(folder / "tiny-think.gguf", name="tiny-think", chat_template=THINKING_TOOLS_TEMPLATE)
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


def test_models_lists_every_library_gguf_with_its_engine(api):
    models = {m.id: m for m in api.openai().models.list()}
    assert set(models) == {"tiny-chat", "tiny-tools", "tiny-think"}
    assert {m.owned_by for m in models.values()} == {"llamacpp"}
    one = api.openai().models.retrieve("tiny-chat.gguf")  # a file name resolves to its model
    assert one.id == "tiny-chat"


def test_chat_completion_reports_usage_and_a_length_finish(api):
    reply = api.openai().chat.completions.create(model="tiny-chat", messages=HI, max_tokens=5, seed=7)
    choice = reply.choices[0]
    assert reply.model == "tiny-chat" and reply.object == "chat.completion"
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert reply.usage.completion_tokens == 5 and reply.usage.prompt_tokens > 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 5


def test_the_same_seed_gives_the_same_reply_and_penalties_are_taken(api):
    ask = dict(model="tiny-chat", messages=HI, max_tokens=12, seed=1234, temperature=1.0,
               frequency_penalty=0.5, presence_penalty=0.2)  # fmt: skip
    first = api.openai().chat.completions.create(**ask).choices[0].message.content
    second = api.openai().chat.completions.create(**ask).choices[0].message.content
    other = api.openai().chat.completions.create(**{**ask, "seed": 99}).choices[0].message.content
    assert first == second
    assert other != first


def test_streamed_chat_sends_the_role_first_and_usage_last(api):
    stream = api.openai().chat.completions.create(
        model="tiny-chat", messages=HI, max_tokens=6, seed=7, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text and finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert all(c.usage is None for c in chunks[:-1])


def test_text_completions_stream_and_not(api):
    client = api.openai()
    whole = client.completions.create(model="tiny-chat", prompt="Once upon a time", max_tokens=4, seed=3)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 4 and whole.choices[0].text
    parts = list(client.completions.create(model="tiny-chat", prompt="Once upon a time", max_tokens=4, seed=3,
                                           stream=True))  # fmt: skip
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    default = client.completions.create(model="tiny-chat", prompt="Once upon a time")
    assert default.usage.completion_tokens <= 16  # OpenAI's default for completions


def test_logprobs_come_per_token_with_the_alternatives_asked_for(api):
    reply = api.openai().chat.completions.create(
        model="tiny-chat", messages=HI, max_tokens=5, logprobs=True, top_logprobs=3, seed=7
    )
    entries = reply.choices[0].logprobs.content
    assert 0 < len(entries) <= reply.usage.completion_tokens == 5  # a leading space-only token is trimmed with it
    assert all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in entries)
    assert "".join(e.token for e in entries) == reply.choices[0].message.content  # they spell the content exactly
    text = api.openai().completions.create(model="tiny-chat", prompt="The sky", max_tokens=3, logprobs=2, seed=7)
    assert len(text.choices[0].logprobs.tokens) == 3
    assert all(len(top) == 2 for top in text.choices[0].logprobs.top_logprobs)


def test_anthropic_messages_with_a_system_prompt_and_several_turns(api):
    message = api.anthropic().messages.create(
        model="tiny-chat", max_tokens=5, system="You are terse.",
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                  {"role": "user", "content": [{"type": "text", "text": "and now?"}]}],
    )  # fmt: skip
    assert message.type == "message" and message.role == "assistant" and message.model == "tiny-chat"
    assert message.stop_reason == "max_tokens" and message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens == 5
    counted = api.anthropic().messages.count_tokens(
        model="tiny-chat", system="You are terse.",
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                  {"role": "user", "content": "and now?"}],
    )  # fmt: skip
    assert counted.input_tokens == message.usage.input_tokens


def test_anthropic_stream_events_come_in_anthropics_order(api):
    with api.anthropic().messages.stream(model="tiny-chat", max_tokens=6, messages=HI) as stream:
        kinds = [event.type for event in stream if event.type not in ("text",)]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    body = [k for k in kinds[1:-2]]
    assert body[0] == "content_block_start" and body[-1] == "content_block_stop"
    assert set(body[1:-1]) == {"content_block_delta"}
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6 and final.usage.input_tokens > 0
    assert final.content[0].text


def test_the_raw_anthropic_stream_has_a_ping_and_the_usage_at_the_end(api):
    with api.http() as http, http.stream("POST", "/v1/messages", json={
        "model": "tiny-chat", "max_tokens": 3, "stream": True, "messages": HI,
    }) as response:  # fmt: skip
        names = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]


def test_json_schema_is_enforced(api):
    for seed in (1, 2, 3):
        reply = api.openai().chat.completions.create(
            model="tiny-chat", messages=HI, max_tokens=200, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "thing", "schema": BOUNDED}},
        )  # fmt: skip
        assert reply.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(reply.choices[0].message.content), BOUNDED)


def test_json_object_gives_an_object(api):
    reply = api.openai().chat.completions.create(
        model="tiny-chat", messages=HI, max_tokens=60, seed=5, response_format={"type": "json_object"}
    )
    text = reply.choices[0].message.content
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # random weights may write a long object: what there is still starts as one
        assert text.lstrip().startswith("{")


def test_a_schema_that_cannot_be_enforced_is_refused_with_the_reason(api):
    import openai

    unique = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    with pytest.raises(openai.BadRequestError) as caught:
        api.openai().chat.completions.create(
            model="tiny-chat", messages=HI, max_tokens=20,
            response_format={"type": "json_schema", "json_schema": {"name": "u", "schema": unique}},
        )  # fmt: skip
    assert caught.value.status_code == 400 and "uniqueItems" in caught.value.message
    with pytest.raises(openai.BadRequestError), api.openai().chat.completions.create(
        model="tiny-chat", messages=HI, max_tokens=20, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "u", "schema": unique}},
    ):  # fmt: skip
        pass


def test_required_tool_choice_returns_a_tool_call_that_parses(api):
    reply = api.openai().chat.completions.create(
        model="tiny-tools", messages=HI, max_tokens=200, seed=11, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False,
    )  # fmt: skip
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id
    schema = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_a_named_tool_choice_calls_that_tool_streamed_and_through_the_anthropic_api(api):
    stream = api.openai().chat.completions.create(
        model="tiny-tools", messages=HI, max_tokens=200, seed=4, tools=TOOLS, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for piece in delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"name": "", "arguments": ""})
            call["name"] += piece.function.name or ""
            call["arguments"] += piece.function.arguments or ""
    assert finish == "tool_calls" and [c["name"] for c in calls.values()] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)

    anthropic_tools = [{"name": "get_weather", "input_schema": WEATHER}, {"name": "get_time", "input_schema": TIME}]
    message = api.anthropic().messages.create(
        model="tiny-tools", max_tokens=200, messages=HI, tools=anthropic_tools,
        tool_choice={"type": "tool", "name": "get_time"},
    )  # fmt: skip
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and [u.name for u in uses] == ["get_time"]
    jsonschema.validate(uses[0].input, TIME)


def test_calls_come_out_of_the_reply_parallel_and_never_from_inside_the_thinking(api):
    forced = {"grammar": gbnf_literal(FORCED)}  # llama-server's extension, passed to the worker as it is
    ask = dict(model="tiny-think", messages=HI, max_tokens=300, tools=TOOLS, extra_body=forced)
    reply = api.openai().chat.completions.create(**ask)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [json.loads(c.function.arguments) for c in message.tool_calls] == [{"zone": "CET"}, {"zone": "UTC"}]
    assert len({c.id for c in message.tool_calls}) == 2
    assert message.content == "Checking." and "I could use <tool_call>" in message.model_extra["reasoning_content"]
    chunks = list(api.openai().chat.completions.create(**ask, stream=True))
    streamed = [p for c in chunks for p in c.choices[0].delta.tool_calls or []]
    assert [p.index for p in streamed if p.id] == [0, 1]

    message = api.anthropic().messages.create(
        model="tiny-think", max_tokens=300, messages=HI, thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": "get_time", "input_schema": TIME}], extra_body=forced,
    )  # fmt: skip
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert [b.input for b in message.content[2:]] == [{"zone": "CET"}, {"zone": "UTC"}]


def test_embeddings_come_from_a_chat_model_without_loading_it_for_embeddings(api):
    with ApiHarness(api.folder, ServerConfig(port=0, n_parallel=1)) as one:  # chats on the single worker
        _embeddings_from_the_chat_model(one)


def _embeddings_from_the_chat_model(api):
    result = api.openai().embeddings.create(model="tiny-chat", input=["the cat sat", "a journey", "the cat sat"])
    vectors = [d.embedding for d in result.data]
    assert [d.index for d in result.data] == [0, 1, 2] and len(vectors[0]) == 64
    assert vectors[0] == pytest.approx(vectors[2]) and vectors[0] != pytest.approx(vectors[1])
    assert sum(v * v for v in vectors[0]) == pytest.approx(1.0, rel=1e-3)
    assert result.usage.prompt_tokens == result.usage.total_tokens > 3
    chat = api.openai().chat.completions.create(model="tiny-chat", messages=HI, max_tokens=2)
    assert chat.choices[0].message.content is not None
    loaded = api.host.loaded(EngineKind.LLAMACPP)  # loaded for chat: its chat context embeds (issue 26)
    assert loaded.entry.endswith("tiny-chat.gguf") and not loaded.params.embedding
    again = api.openai().embeddings.create(model="tiny-chat", input=["the cat sat"])
    assert again.data[0].embedding == pytest.approx(vectors[0], abs=1e-5)
    assert api.host.loaded(EngineKind.LLAMACPP) is loaded


def test_the_request_log_and_the_metrics_have_the_figures(api):
    api.openai().chat.completions.create(model="tiny-chat", messages=HI, max_tokens=3, seed=7)
    record = api.finished_records("chat.completions")[-1]
    assert record.status == 200 and record.model == "tiny-chat" and record.engine == "llamacpp"
    assert record.completion_tokens == 3 and record.prompt_tokens and record.ttft_ms is not None
    assert record.finish_reason == "length" and record.duration_ms >= record.ttft_ms
    assert "hello" not in repr(api.records)  # figures only: no prompt in the log
    page = api.http().get("/metrics").text
    assert (
        'llmws_api_requests_total{endpoint="chat.completions",engine="llamacpp",model="tiny-chat",status="200"}' in page
    )
    assert 'llmws_api_time_to_first_token_seconds_bucket{engine="llamacpp",le="0.25",model="tiny-chat"}' in page
    assert 'llmws_api_completion_tokens_total{engine="llamacpp",model="tiny-chat"}' in page
    assert api.http().get("/health").json() == {"status": "ok"}
