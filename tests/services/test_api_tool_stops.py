"""Tool calls that stop (issue 26), through the real server and llama.cpp worker with the official ``openai`` SDK:
a forced call is one call unless parallel calls are asked, and then the model may end after any call; a call the
token limit cuts is never content and the reply finishes ``length``; a call made again word for word ends the
reply; a forced call's grammar holds on every request, whatever the request before it did; an unseeded reply does
not follow from the requests before it. The chat reads a cut call as a cut call, not as text."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from app.backends.protocol import Delta
from app.core.chat.conversation import Message, Role
from app.core.chat.reply_parser import ReplyParser
from app.core.chat.reply_reader import ReplyReader
from app.core.chat.tool_formats import ReplyConfig, ReplyFormat
from app.core.params import GenerationOptions
from app.services import starter_model
from app.services.api.config import ServerConfig
from app.services.chat.message_reply import MessageReply
from app.services.chat.tool_loop import CUT_CALL_TEXT, OfferedTool, tool_uses
from app.services.mcp.status import ToolInfo
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.uniform_gguf import write_uniform_gguf

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class Served:
    api: ApiHarness
    model: str


HI = [{"role": "user", "content": "hello there"}]
HERMES_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
NOTE = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 60}}, "required": ["text"],
        "additionalProperties": False}  # fmt: skip
NOTE_TOOLS = [{"type": "function", "function": {"name": "save_note", "parameters": NOTE}}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                   "parameters": CITY}}]  # fmt: skip


def call_text(zone: str) -> str:
    return f'<tool_call>{{"name": "get_time", "arguments": {{"zone": "{zone}"}}}}</tool_call>'


def gbnf_literal(text: str) -> str:
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tool-stop-models")
    write_tiny_gguf(folder / "tiny-tools.gguf", name="tiny-tools", chat_template=HERMES_TOOLS_TEMPLATE)
    write_uniform_gguf(folder / "uniform.gguf", name="uniform")
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


@pytest.fixture(scope="module")
def starter(tmp_path_factory):
    """The starter model served with its preset, as ``serve`` serves it (the issue's case)."""
    pytest.importorskip(starter_model.PACKAGE)
    folder = tmp_path_factory.mktemp("starter")
    starter_model.ensure_starter_model(folder)
    with ApiHarness(folder, ServerConfig(port=0), settings_file=folder / "model-settings.json") as harness:
        yield Served(harness, harness.openai().models.list().data[0].id)


def forced_weather(starter, seed: int, **extra):
    client = starter.api.openai().with_options(timeout=300)
    return client.chat.completions.create(
        model=starter.model, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=WEATHER_TOOLS, tool_choice="required", max_tokens=256, seed=seed, **extra,
    )  # fmt: skip


# --- one call unless several are asked; several may end after any call ----------------------------------------
@pytest.mark.parametrize("seed", [0, 4])  # before: 8 calls, 256 of 256 tokens, a half call in the content
def test_a_forced_call_is_one_call(starter, seed):
    reply = forced_weather(starter, seed)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    assert "city" in json.loads(choice.message.tool_calls[0].function.arguments)
    assert reply.usage.completion_tokens < 64


@pytest.mark.parametrize("seed", [0, 4])  # before: the same 8 calls to the token limit
def test_parallel_calls_asked_for_may_end_after_any_call(starter, seed):
    reply = forced_weather(starter, seed, parallel_tool_calls=True)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert reply.usage.completion_tokens < 256 and choice.message.tool_calls
    assert all("city" in json.loads(c.function.arguments) for c in choice.message.tool_calls)


# --- a call the token limit cuts ---------------------------------------------------------------------------------
def test_a_call_cut_by_the_token_limit_is_no_content_and_the_reply_finishes_length(api):
    client = api.openai()
    first = call_text("UTC")
    # greedy: a grammar's text may be written in other tokens at another seed; this way the first call takes
    # the same tokens (or fewer, where one reaches past its end) in both replies
    whole = client.chat.completions.create(model="tiny-tools", messages=HI, tools=TOOLS, temperature=0,
                                           extra_body={"grammar": gbnf_literal(first)})  # fmt: skip
    tokens = whole.usage.completion_tokens
    forced = {"grammar": gbnf_literal(first + "\n" + call_text("a much longer zone name than fits " * 4))}
    for limit in (tokens + 1, tokens + 6):  # cut at the next call's opening tag, and inside its arguments
        ask = dict(model="tiny-tools", messages=HI, tools=TOOLS, max_tokens=limit, temperature=0, extra_body=forced)
        reply = client.chat.completions.create(**ask)
        choice = reply.choices[0]
        assert choice.finish_reason == "length" and choice.message.content is None
        assert [json.loads(c.function.arguments) for c in choice.message.tool_calls] == [{"zone": "UTC"}]
        chunks = list(client.chat.completions.create(**ask, stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [p for c in chunks if c.choices for p in c.choices[0].delta.tool_calls or [] if p.id]
        assert content == "" and len(calls) == 1
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_a_call_made_again_word_for_word_ends_the_reply(api):
    looping = "\n".join([call_text("UTC"), call_text("UTC"), call_text("CET"), call_text("UTC")] * 3)
    reply = api.openai().chat.completions.create(
        model="tiny-tools", messages=HI, tools=TOOLS, parallel_tool_calls=True,
        extra_body={"grammar": gbnf_literal(looping)},
    )  # fmt: skip
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [json.loads(c.function.arguments) for c in choice.message.tool_calls] == [{"zone": "UTC"}]
    assert reply.usage.completion_tokens < len(looping) // 4  # ended at the repeat, not after twelve calls


def test_the_chat_shows_a_cut_call_as_cut_not_as_text():
    reply = MessageReply(Message(Role.ASSISTANT, ""), _Listener())
    reply.reader = ReplyReader(ReplyParser(ReplyConfig(ReplyFormat.HERMES)))
    reply.feed(Delta("Checking. " + call_text("UTC") + '\n<tool_call>{"name": "get_time", "argu'))
    reply.finish(cut=True)
    reply.apply()
    assert reply.content == "Checking." and reply.reader.cut_call is not None
    offered = [OfferedTool("get_time", ToolInfo("clock", "get_time", "", TIME))]
    uses = tool_uses(reply.calls, offered, last_cut=reply.last_call_cut)
    assert [u.name for u in uses] == ["get_time", "get_time"]
    assert not uses[0].is_error and uses[1].is_error and uses[1].result == CUT_CALL_TEXT


# --- the grammar on every request ---------------------------------------------------------------------------------
def test_a_forced_call_keeps_its_grammar_after_a_request_cut_at_max_tokens(api):
    """The issue's free text after a cut request: a raw control character inside a JSON string (the converter's
    string rule let it through, and the unseeded request after a cut one drew it). The uniform model picks
    whatever the grammar allows."""
    client = api.openai()
    for _ in range(4):
        cut = client.chat.completions.create(model="uniform", messages=HI, max_tokens=3)
        assert cut.choices[0].finish_reason == "length"
        reply = client.chat.completions.create(
            model="uniform", messages=HI, tools=NOTE_TOOLS, tool_choice="required", max_tokens=200
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert set(json.loads(call.function.arguments)) == {"text"}  # strict JSON: no raw control characters


def test_an_unseeded_reply_does_not_follow_from_the_request_before_it(api):
    client = api.openai(seeded=False)

    def after_a_seeded_request() -> str:
        client.chat.completions.create(model="uniform", messages=HI, max_tokens=4, seed=7)
        return client.chat.completions.create(model="uniform", messages=HI, max_tokens=24).choices[0].message.content

    assert after_a_seeded_request() != after_a_seeded_request()
    seeded = [client.chat.completions.create(model="uniform", messages=HI, max_tokens=24, seed=3) for _ in range(2)]
    assert seeded[0].choices[0].message.content == seeded[1].choices[0].message.content


def test_parallel_calls_follow_the_request():
    assert GenerationOptions(tools=TOOLS, tool_choice="required").parallel_calls is False
    assert GenerationOptions(tools=TOOLS, tool_choice="required", parallel_tool_calls=True).parallel_calls is True
    assert GenerationOptions(tools=TOOLS).parallel_calls is True
    assert GenerationOptions(tools=TOOLS, parallel_tool_calls=False).parallel_calls is False


# --- helpers ------------------------------------------------------------------------------------------------------
class _Listener:
    """The chat's observer, as the reply tells it (nothing to show here)."""

    def reply_delta(self, text: str) -> None: ...

    def reply_thinking(self, text: str) -> None: ...

    def reply_recast(self, thinking: str) -> None: ...
