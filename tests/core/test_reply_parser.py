"""The reply parser on recorded model outputs of each format: thinking, content and tool calls, streamed in any
chunks with the same result as parsed whole, and malformed calls kept as content with the reason."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.chat.reply_parser import (
    MAX_HELD_SPACE,
    ContentDelta,
    ContentRecast,
    ParsedEvent,
    ParsedReply,
    ReplyParser,
    ThinkingDelta,
    ToolCall,
    ToolCallError,
    parse_reply,
)
from app.core.chat.tool_formats import (
    MISTRAL_THINK_TAGS,
    THINK_TAGS,
    ReplyConfig,
    ReplyFormat,
    reply_format_for,
)

REPLIES = Path(__file__).resolve().parents[1] / "data" / "replies"
HERMES, LLAMA3, MISTRAL = ReplyFormat.HERMES, ReplyFormat.LLAMA3_JSON, ReplyFormat.MISTRAL


def ids(index: int) -> str:
    return f"call_{index}"


@dataclass(frozen=True)
class Expect:
    config: ReplyConfig
    content: str = ""
    thinking_starts: str = ""
    calls: tuple[tuple[str, dict], ...] = ()
    errors: tuple[str, ...] = ()  # a phrase each error's reason contains
    unclosed: bool = False
    thinking_has: tuple[str, ...] = field(default=())


CASES: dict[str, Expect] = {
    "qwen2.5_hermes_single.txt": Expect(
        ReplyConfig(HERMES), calls=(("get_current_weather", {"location": "Paris, France", "unit": "celsius"}),)
    ),
    "qwen2.5_hermes_parallel.txt": Expect(
        ReplyConfig(HERMES),
        content="I'll check the weather in both cities and convert the temperature for you.",
        calls=(
            ("get_current_weather", {"location": "Tokyo, Japan", "unit": "celsius"}),
            ("get_current_weather", {"location": "Osaka, Japan", "unit": "celsius"}),
            ("convert_temperature", {"value": 21.5, "from_unit": "celsius", "to_unit": "fahrenheit"}),
        ),
    ),
    "qwen3_think_call.txt": Expect(
        ReplyConfig(HERMES),
        thinking_starts="Okay, the user wants to know",
        thinking_has=('<tool_call>{"name": "get_weather", "arguments": {"location": "Berlin"}}</tool_call>',),
        calls=(("get_weather", {"location": "Berlin, Germany", "include_forecast": True}),),
    ),
    "qwen3_think_answer.txt": Expect(
        ReplyConfig(HERMES),
        thinking_starts="The user asks how to compare",
        thinking_has=("</div> and <tool> are just text",),
        content=(REPLIES / "qwen3_think_answer.txt").read_text("utf-8").split("</think>\n\n", 1)[1],
    ),
    "hermes_malformed_then_valid.txt": Expect(
        ReplyConfig(HERMES),
        content=(
            "Let me search for that.\n<tool_call>\n"
            '{"name": "search_web", "arguments": {"query": "best pizza in Naples"}\n</tool_call>'
        ),
        calls=(("search_web", {"query": "pizza napoletana history"}),),
        errors=("not valid JSON",),
    ),
    "hermes_truncated.txt": Expect(
        ReplyConfig(HERMES),
        content=(REPLIES / "hermes_truncated.txt").read_text("utf-8"),
        errors=("ended inside a tool call",),
    ),
    "deepseek_r1_prompt_opened.txt": Expect(
        ReplyConfig(ReplyFormat.NONE, THINK_TAGS, prompt_opens_think=True),
        thinking_starts="Okay, so I need to find how many r's",
        content='The word **"strawberry"** contains **3** letter r\'s: s-t-**r**-a-w-b-e-**r**-**r**-y.',
    ),
    "qwq_unclosed.txt": Expect(
        ReplyConfig(ReplyFormat.NONE), thinking_starts="Alright, let's tackle this integral", unclosed=True
    ),
    "llama3.1_json_call.txt": Expect(
        ReplyConfig(LLAMA3),
        calls=(("get_current_conditions", {"location": "San Francisco, CA", "unit": "Fahrenheit"}),),
    ),
    "llama3.1_python_tag.txt": Expect(
        ReplyConfig(LLAMA3), calls=(("spotify_trending_songs", {"n": "5", "market": "US"}),)
    ),
    "llama3.1_builtin_tool.txt": Expect(
        ReplyConfig(LLAMA3),
        content='<|python_tag|>brave_search.call(query="current weather in Menlo Park, California")',
        errors=("not a JSON tool call",),
    ),
    "llama3.2_parallel.txt": Expect(
        ReplyConfig(LLAMA3),
        calls=(
            ("get_weather", {"city": "Paris", "unit": "celsius"}),
            ("get_weather", {"city": "London", "unit": "celsius"}),
        ),
    ),
    "llama3.2_answer.txt": Expect(ReplyConfig(LLAMA3), content=(REPLIES / "llama3.2_answer.txt").read_text("utf-8")),
    "llama3.1_json_answer.txt": Expect(
        ReplyConfig(LLAMA3), content='{"city": "Paris", "population": 2102650, "country": "France"}'
    ),
    "mistral_v3_parallel.txt": Expect(
        ReplyConfig(MISTRAL),
        calls=(
            ("get_current_weather", {"location": "Paris, France", "format": "celsius"}),
            ("get_current_weather", {"location": "Lyon, France", "format": "celsius"}),
        ),
    ),
    "mistral_v11_parallel.txt": Expect(
        ReplyConfig(MISTRAL),
        calls=(
            ("get_current_weather", {"location": "Paris, France", "format": "celsius"}),
            ("get_current_weather", {"location": "Lyon, France", "format": "celsius"}),
        ),
    ),
    "magistral_think_call.txt": Expect(
        ReplyConfig(MISTRAL, MISTRAL_THINK_TAGS),
        thinking_starts="The user wants the current price",
        thinking_has=('[TOOL_CALLS]get_crypto_price[ARGS]{"symbol": "BTC"}',),
        content="Let me look that up.",
        calls=(("get_crypto_price", {"symbol": "BTC", "currency": "EUR"}),),
    ),
    "mistral_malformed.txt": Expect(
        ReplyConfig(MISTRAL),
        content=(REPLIES / "mistral_malformed.txt").read_text("utf-8"),
        errors=("not valid JSON",),
    ),
}


def recorded(name: str) -> str:
    return (REPLIES / name).read_text("utf-8")


def test_every_recorded_reply_has_a_case():
    assert sorted(p.name for p in REPLIES.glob("*.txt")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_reply(name):
    expect = CASES[name]
    reply = parse_reply(recorded(name), expect.config, call_ids=ids)
    assert reply.content == expect.content
    assert reply.thinking.startswith(expect.thinking_starts)
    assert bool(reply.thinking) == bool(expect.thinking_starts)
    assert reply.thinking == reply.thinking.strip()
    for phrase in expect.thinking_has:
        assert phrase in reply.thinking
    assert [(c.name, json.loads(c.arguments_json)) for c in reply.tool_calls] == list(expect.calls)
    assert [c.index for c in reply.tool_calls] == list(range(len(expect.calls)))
    assert [c.id for c in reply.tool_calls] == [f"call_{i}" for i in range(len(expect.calls))]
    assert len(reply.errors) == len(expect.errors)
    for error, phrase in zip(reply.errors, expect.errors, strict=True):
        assert phrase in error.reason
        assert error.text in reply.content
    assert reply.thinking_unclosed == expect.unclosed
    assert not reply.stray_think_close


# --- streaming equals one-shot --------------------------------------------------------------------------------


def merged(events: list[ParsedEvent]) -> list[ParsedEvent]:
    out: list[ParsedEvent] = []
    for event in events:
        if out and type(event) is type(out[-1]) and isinstance(event, ThinkingDelta | ContentDelta):
            out[-1] = type(event)(out[-1].text + event.text)  # type: ignore[union-attr]
        else:
            out.append(event)
    return out


def replayed(events: list[ParsedEvent]) -> tuple[str, str]:
    """(thinking, content) as a streaming consumer builds them: a recast turns the content so far into thinking."""
    thinking, content = "", ""
    for event in events:
        if isinstance(event, ThinkingDelta):
            thinking += event.text
        elif isinstance(event, ContentDelta):
            content += event.text
        elif isinstance(event, ContentRecast):
            thinking, content = event.thinking, ""
    return thinking, content


def stream(chunks: list[str], config: ReplyConfig) -> tuple[list[ParsedEvent], ParsedReply]:
    parser = ReplyParser(config, call_ids=ids)
    events: list[ParsedEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish()
    return events, parser.reply


def check_same(chunks: list[str], config: ReplyConfig) -> None:
    whole_events, whole = stream(["".join(chunks)], config)
    events, reply = stream(chunks, config)
    assert reply == whole
    assert merged(events) == merged(whole_events)
    assert replayed(events) == (reply.thinking, reply.content)
    assert tuple(e for e in events if isinstance(e, ToolCall)) == reply.tool_calls
    assert tuple(e for e in events if isinstance(e, ToolCallError)) == reply.errors


def test_one_shot_parse_equals_feeding_everything_at_once():
    for name, expect in CASES.items():
        text = recorded(name)
        assert parse_reply(text, expect.config, call_ids=ids) == stream([text], expect.config)[1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_character_by_character(name):
    check_same(list(recorded(name)), CASES[name].config)


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_at_every_position(name):
    """Two chunks, split at every index: every tag of the reply gets cut at every one of its positions."""
    text, config = recorded(name), CASES[name].config
    whole = parse_reply(text, config, call_ids=ids)
    for at in range(len(text) + 1):
        assert stream([text[:at], text[at:]], config)[1] == whole, f"split at {at}: {text[max(0, at - 10) : at]!r}|"


@pytest.mark.parametrize("name", sorted(CASES))
def test_random_chunks(name):
    text, rng = recorded(name), random.Random(name)
    for _ in range(20):
        chunks, at = [], 0
        while at < len(text):
            size = rng.randint(1, 12)
            chunks.append(text[at : at + size])
            at += size
        check_same(chunks, CASES[name].config)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(CASES)))
def test_any_split_streams_like_one_shot(data, name):
    text = recorded(name)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=40).map(sorted))
    bounds = [0, *cuts, len(text)]
    check_same([text[a:b] for a, b in itertools.pairwise(bounds)], CASES[name].config)


PIECES = [
    *'ab <>/{}[]";:\n',
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    '{"name": "f", "arguments": {}}',
    '"arguments": ',
    "<|python_tag|>",
    "\\",
]


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    fmt=st.sampled_from(list(ReplyFormat)),
    opened=st.booleans(),
    data=st.data(),
)
def test_arbitrary_text_never_raises_and_streams_like_one_shot(text, fmt, opened, data):
    """Any text at all, in any format: no exception, and any chunking gives the one-shot result."""
    config = ReplyConfig(fmt, THINK_TAGS, opened)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12).map(sorted))
    bounds = [0, *cuts, len(text)]
    check_same([text[a:b] for a, b in itertools.pairwise(bounds)], config)


# --- holding back only what may still become a tag ------------------------------------------------------------


def content_of(events: list[ParsedEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def test_partial_tag_is_held_and_released_when_it_cannot_be_a_tag():
    parser = ReplyParser(HERMES, call_ids=ids)
    assert content_of(parser.feed("Use the x<tool_c")) == "Use the x"
    assert content_of(parser.feed("ar")) == "<tool_car"
    assert content_of(parser.feed(" element <")) == " element"
    assert content_of(parser.feed("b>")) == " <b>"
    parser.finish()
    assert parser.reply.content == "Use the x<tool_car element <b>"


def test_only_the_shortest_possible_tag_start_is_held():
    parser = ReplyParser(HERMES, call_ids=ids)
    assert content_of(parser.feed("a<<tool")) == "a<"  # "<<tool" cannot be a tag, "<tool" can
    assert content_of(parser.feed("_call>")) == ""
    assert content_of(parser.feed('{"name": "f"}</tool_call>')) == ""
    assert [c.name for c in parser.reply.tool_calls] == ["f"]


def test_content_without_tags_is_never_held_back_much():
    """However the text arrives, all but a possible tag start (and a bounded run of trailing spaces) is out."""
    rng = random.Random(7)
    text = "".join(
        rng.choice(["word ", "<", "</", "[", "{", "\n", "<tool", "[TOOL", "</thi", "x" * 30]) for _ in range(400)
    )
    for config in (ReplyConfig(HERMES), ReplyConfig(MISTRAL), ReplyConfig(ReplyFormat.NONE)):
        parser = ReplyParser(config, call_ids=ids)
        parser.feed("Start. ")
        fed, out = "Start. ", "Start."
        for at in range(0, len(text), 3):
            fed += text[at : at + 3]
            out += content_of(parser.feed(text[at : at + 3]))
            assert len(fed) - len(out) <= len("[TOOL_CALLS]") - 1 + MAX_HELD_SPACE


def test_long_whitespace_run_is_released_beyond_the_bound():
    parser = ReplyParser(HERMES, call_ids=ids)
    assert content_of(parser.feed("a")) == "a"
    assert content_of(parser.feed(" " * (MAX_HELD_SPACE + 10))) == " " * 10
    assert content_of(parser.feed("<tool_call>")) == ""  # the held spaces before a call are dropped
    parser.feed('{"name": "f"}</tool_call>')
    parser.finish()
    assert parser.reply.content == "a" + " " * 10


# --- thinking -------------------------------------------------------------------------------------------------


def test_closing_tag_without_opening_one_when_the_prompt_opened_it():
    config = ReplyConfig(ReplyFormat.NONE, THINK_TAGS, prompt_opens_think=True)
    parser = ReplyParser(config)
    events = parser.feed("Let me think about 2+2")
    assert events == [ThinkingDelta("Let me think about 2+2")]
    assert parser.feed(".\n</th") == [ThinkingDelta(".")]
    assert parser.feed("ink>\n\nIt is 4.") == [ContentDelta("It is 4.")]
    parser.finish()
    assert parser.reply == ParsedReply(thinking="Let me think about 2+2.", content="It is 4.")


def test_closing_tag_without_opening_one_makes_what_came_before_thinking():
    reply = parse_reply(recorded("deepseek_r1_prompt_opened.txt"), ReplyFormat.NONE)
    assert reply.stray_think_close
    assert reply.thinking.startswith("Okay, so I need to find how many r's") and reply.thinking.endswith("three.")
    assert reply.content.startswith('The word **"strawberry"** contains **3**')
    assert "</think>" not in reply.content


def test_recast_is_told_to_a_streaming_consumer():
    parser = ReplyParser(ReplyFormat.NONE)
    assert parser.feed("Hmm, 2+2 ") == [ContentDelta("Hmm, 2+2")]
    assert parser.feed("is 4.\n</think>\n\nFour.") == [
        ContentDelta(" is 4."),
        ContentRecast("Hmm, 2+2 is 4."),
        ContentDelta("Four."),
    ]
    parser.finish()
    assert parser.reply == ParsedReply(thinking="Hmm, 2+2 is 4.", content="Four.", stray_think_close=True)


def test_a_closing_tag_after_thinking_or_a_call_is_no_recast():
    after_thinking = parse_reply("<think>a</think>b</think>c")
    assert (after_thinking.thinking, after_thinking.content) == ("a", "bc")
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    after_call = parse_reply(f"{call}x</think>y", ReplyFormat.HERMES, call_ids=ids)
    assert (after_call.thinking, after_call.content, len(after_call.tool_calls)) == ("", "xy", 1)


def test_think_tag_is_only_a_block_at_the_start_of_a_reply():
    reply = parse_reply("Models such as R1 write <think> first.\n<think>not thinking</think>", ReplyFormat.NONE)
    assert reply.thinking == ""
    assert reply.content == "Models such as R1 write <think> first.\n<think>not thinking"
    assert reply.stray_think_close
    assert parse_reply("\n\n<think>\nhm\n</think>\nyes").thinking == "hm"


def test_thinking_that_never_closes_is_all_thinking():
    reply = parse_reply('<think>\nStep 1: <tool_call>{"name": "f"}', ReplyFormat.HERMES)
    assert reply == ParsedReply(thinking='Step 1: <tool_call>{"name": "f"}', thinking_unclosed=True)


def test_no_think_tags_configured_means_no_thinking():
    reply = parse_reply("<think>x</think>y", ReplyConfig(ReplyFormat.NONE, think=None))
    assert reply == ParsedReply(content="<think>x</think>y")


def test_qwen3_with_thinking_switched_off_in_the_prompt():
    assert parse_reply("Hello there!", ReplyConfig(HERMES)) == ParsedReply(content="Hello there!")


# --- calls: formats and bad input -----------------------------------------------------------------------------


def test_no_tools_format_leaves_call_markup_as_content():
    text = recorded("qwen2.5_hermes_single.txt")
    assert parse_reply(text, ReplyFormat.NONE) == ParsedReply(content=text)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"name": "f", "arguments": [1, 2]}', "are not a JSON object"),
        ('{"arguments": {"a": 1}}', 'has no "name"'),
        ('{"name": "  ", "arguments": {}}', 'has no "name"'),
        ('["f", {"a": 1}]', "must be a JSON object"),
        ("[]", "list of tool calls is empty"),
        ('{"name": "f", "arguments": "{not json"}', "arguments of 'f' is not valid JSON"),
        ('{"name": "f", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("", "not valid JSON"),
    ],
)
def test_malformed_hermes_calls_stay_content_with_the_reason(body, reason):
    text = f"Calling.\n<tool_call>\n{body}\n</tool_call>"
    reply = parse_reply(text, HERMES)
    assert reply.tool_calls == ()
    assert reply.content == text
    assert len(reply.errors) == 1 and reason in reply.errors[0].reason
    assert reply.errors[0].text == text.removeprefix("Calling.\n")


def test_arguments_given_as_a_json_string_or_missing():
    text = '<tool_call>{"name": "f", "arguments": "{\\"q\\": 2}"}</tool_call><tool_call>{"name": "g"}</tool_call>'
    calls = parse_reply(text, HERMES, call_ids=ids).tool_calls
    assert [(c.name, c.arguments_json) for c in calls] == [("f", '{"q": 2}'), ("g", "{}")]


def test_complete_hermes_call_missing_only_its_closing_tag_is_a_call():
    reply = parse_reply('<tool_call>\n{"name": "f", "arguments": {"a": "é"}}\n', HERMES, call_ids=ids)
    assert reply.tool_calls == (ToolCall("call_0", "f", '{"a": "é"}', 0),)


def test_text_between_and_after_calls():
    text = 'First.\n<tool_call>{"name": "a"}</tool_call>\nThen.\n<tool_call>{"name": "b"}</tool_call>\n'
    reply = parse_reply(text, HERMES, call_ids=ids)
    assert reply.content == "First.Then."
    assert [c.index for c in reply.tool_calls] == [0, 1]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('[TOOL_CALLS]get weather[ARGS]{"a": 1}', "not followed by [ARGS]"),
        ("[TOOL_CALLS]f[ARGS][1]", "not a JSON object"),
        ('[TOOL_CALLS]f[ARGS]{"a": 1', "ended before the call's arguments"),
        ("[TOOL_CALLS]", "nothing follows it"),
        ('[TOOL_CALLS]{"name": "f", "arguments": {"a": 1}', "ended before the tool call's JSON"),
        ('[TOOL_CALLS]!{"a": 1}', "no function name"),
        ("[TOOL_CALLS]" + "n" * 300 + '[ARGS]{"a": 1}', "not followed by [ARGS]"),
    ],
)
def test_malformed_mistral_calls_stay_content(text, reason):
    reply = parse_reply(text, MISTRAL)
    assert reply.tool_calls == ()
    assert reply.content == text
    assert len(reply.errors) == 1 and reason in reply.errors[0].reason


def test_mistral_call_ids_from_the_model_and_fresh_ones():
    reply = parse_reply('[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"x": 1}[TOOL_CALLS]g[ARGS]{}', MISTRAL)
    first, second = reply.tool_calls
    assert first.id == "a1B2c3D4e"
    assert len(second.id) == 9 and second.id.isalnum()  # Mistral's templates refuse any other id


def test_mistral_list_without_its_marker():
    """Engines that drop special tokens from the text lose [TOOL_CALLS]: a bare list of calls at the start."""
    reply = parse_reply('[{"name": "f", "arguments": {"x": 1}}]', MISTRAL, call_ids=ids)
    assert [c.name for c in reply.tool_calls] == ["f"]
    assert parse_reply("[1] See the notes.", MISTRAL) == ParsedReply(content="[1] See the notes.")


def test_llama3_json_is_a_call_only_at_the_start():
    text = 'Sure: {"name": "f", "parameters": {}}'
    assert parse_reply(text, LLAMA3) == ParsedReply(content=text)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"name": "f", "parameters": {"a": 1}', "ended before the tool call's JSON"),
        ('{"name": "f", "parameters": 3}', "not a JSON object"),
        ("{not json at all}", None),
        ("{unfinished thought", None),
        ("<|python_tag|>", "not a JSON tool call"),
    ],
)
def test_llama3_text_that_is_not_a_call(text, error):
    reply = parse_reply(text, LLAMA3)
    assert reply.tool_calls == ()
    assert reply.content == text
    assert [e.reason for e in reply.errors if error and error in e.reason] == [e.reason for e in reply.errors]
    assert len(reply.errors) == (1 if error else 0)


def test_llama3_list_of_calls():
    reply = parse_reply('[{"name": "a", "parameters": {}}, {"name": "b", "arguments": {"x": 2}}]', LLAMA3)
    assert [(c.name, c.arguments_json, c.index) for c in reply.tool_calls] == [("a", "{}", 0), ("b", '{"x": 2}', 1)]


def test_default_ids_are_unique_and_openai_shaped():
    text = recorded("qwen2.5_hermes_parallel.txt")
    calls = parse_reply(text, HERMES).tool_calls + parse_reply(text, HERMES).tool_calls
    assert len({c.id for c in calls}) == len(calls)
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in calls)


def test_feeding_after_finish_is_refused_and_finish_is_idempotent():
    parser = ReplyParser(HERMES)
    assert parser.feed("Hi <tool") == [ContentDelta("Hi")]
    assert parser.finish() == [ContentDelta(" <tool")]
    assert parser.finish() == []
    with pytest.raises(RuntimeError, match="already finished"):
        parser.feed("more")


def test_a_large_call_streams_in_linear_time():
    """A 2 MB write_file call in 4-character deltas: the parser must not rescan the call on every delta."""
    body = json.dumps({"name": "write_file", "arguments": {"path": "big.txt", "content": "line {x}\n" * 220_000}})
    text = f"<think>\nWriting it.\n</think>\n<tool_call>\n{body}\n</tool_call>"
    parser = ReplyParser(HERMES, call_ids=ids)
    for at in range(0, len(text), 4):  # a rescan per delta would run past the test's timeout
        parser.feed(text[at : at + 4])
    parser.finish()
    assert json.loads(parser.reply.tool_calls[0].arguments_json)["content"].count("\n") == 220_000


# --- choosing the format from a chat template -----------------------------------------------------------------

QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n" }}
    {{- "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": \
<args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- endif %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
QWEN3_TEMPLATE = """{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}
        {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content }}
        {%- for tool_call in message.tool_calls %}{{- '<tool_call>\\n{"name": "' }}{%- endfor %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""
QWQ_TEMPLATE = """{%- for message in messages %}{%- if message.role == "assistant" %}
{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}{%- endfor %}
{%- if tools %}<tool_call>{%- endif %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
{%- endif %}"""
DEEPSEEK_R1_TEMPLATE = """{% if not add_generation_prompt is defined %}\
{% set add_generation_prompt = false %}{% endif %}\
{%- for message in messages %}{%- if message['role'] == 'assistant' %}{% set content = message['content'] %}\
{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}\
{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}\
{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"""
LLAMA31_TEMPLATE = """{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}"""
LLAMA32_TEMPLATE = LLAMA31_TEMPLATE.replace('{{- "<|python_tag|>" + tool_call.name + ".call(" }}', "")
HERMES_LLAMA_TEMPLATE = """{{- "Given the following functions, please respond with a JSON for a function call " }}
{{- 'wrapped in <tool_call></tool_call> tags with the keys "name" and "arguments".\\n\\n' }}"""
MISTRAL_V3_TEMPLATE = """{%- if message.tool_calls is defined %}{{- "[TOOL_CALLS] [" }}
{%- for tool_call in message.tool_calls %}{%- if not tool_call.id is defined or tool_call.id|length != 9 %}
{{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}{%- endif %}{%- endfor %}
{%- endif %}{{- "[AVAILABLE_TOOLS] [" }}"""
MAGISTRAL_TEMPLATE = """{%- set default_system_message = 'First draft your thinking process (inner monologue) \
until you arrive at a response. Format your response using Markdown. Your thinking process must follow the \
template below:\
[THINK]Your thoughts or/and draft, like working through an exercise on scratch paper.[/THINK]' %}
{%- for tool in message.tool_calls %}{{- "[TOOL_CALLS]" + tool.function.name + "[ARGS]" }}{%- endfor %}"""
GEMMA_TEMPLATE = """{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' }}{% endfor %}\
{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"""


@pytest.mark.parametrize(
    ("template", "architecture", "expected"),
    [
        (QWEN25_TEMPLATE, "qwen2", ReplyConfig(HERMES, None)),
        (QWEN3_TEMPLATE, "qwen3", ReplyConfig(HERMES, THINK_TAGS, prompt_opens_think=False)),
        (QWQ_TEMPLATE, "qwen2", ReplyConfig(HERMES, THINK_TAGS, prompt_opens_think=True)),
        (DEEPSEEK_R1_TEMPLATE, "qwen2", ReplyConfig(ReplyFormat.NONE, THINK_TAGS, prompt_opens_think=True)),
        (LLAMA31_TEMPLATE, "llama", ReplyConfig(LLAMA3, None)),
        (LLAMA32_TEMPLATE, "llama", ReplyConfig(LLAMA3, None)),
        (HERMES_LLAMA_TEMPLATE, "llama", ReplyConfig(HERMES, None)),
        (MISTRAL_V3_TEMPLATE, "llama", ReplyConfig(MISTRAL, None)),
        (MAGISTRAL_TEMPLATE, "llama", ReplyConfig(MISTRAL, MISTRAL_THINK_TAGS)),
        (GEMMA_TEMPLATE, "gemma3", ReplyConfig(ReplyFormat.NONE, None)),
        (None, "qwen3moe", ReplyConfig(HERMES, THINK_TAGS)),
        ("", "llama", ReplyConfig(ReplyFormat.NONE, THINK_TAGS)),
        (None, None, ReplyConfig(ReplyFormat.NONE, THINK_TAGS)),
    ],
)
def test_reply_format_for_templates(template, architecture, expected):
    assert reply_format_for(template, architecture) == expected


def test_format_from_the_template_reads_a_recorded_reply():
    """The whole path: template -> config -> parse, for a QwQ-style reply whose opening tag was in the prompt."""
    config = reply_format_for(QWQ_TEMPLATE, "qwen2")
    reply = parse_reply(recorded("deepseek_r1_prompt_opened.txt"), config)
    assert reply.thinking.startswith("Okay, so I need") and reply.content.startswith("The word")


def test_hermes_call_without_its_closing_tag_before_the_next_call():
    text = (
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>'
        '<tool_call>\n{"name": "c", "arguments": {"oops"\n<tool_call>{"name": "d"}</tool_call>'
    )
    reply = parse_reply(text, HERMES, call_ids=ids)
    assert [(c.name, c.index) for c in reply.tool_calls] == [("a", 0), ("b", 1), ("d", 2)]
    assert reply.content == '<tool_call>\n{"name": "c", "arguments": {"oops"'
    assert len(reply.errors) == 1 and "the next <tool_call> began before </tool_call>" in reply.errors[0].reason
    check_same(list(text), ReplyConfig(HERMES))
