"""What an API request asks of llama.cpp, through the real worker on generated GGUFs: JSON schemas enforced by the
app's grammar (or refused with the reason), forced tool calls in the model's format, logprobs, finish reasons,
raw completions, token counts, embeddings, and a reply that stops when its consumer stops reading.

Random weights only finish a grammar that forces an end, so the schemas are bounded (enums, integer ranges,
maxLength, maxItems); every result is validated with ``jsonschema``."""

from __future__ import annotations

import asyncio
import gc
import json
import re

import jsonschema
import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.protocol import RequestRefusedError
from app.core.errors import InvalidInputError
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(120)

USER = [{"role": "user", "content": "hello there"}]
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "maxLength": 4},
    },
    "required": ["city", "days"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}},
]  # fmt: skip
BOUNDED = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": -3, "maximum": 12},
        "name": {"type": "string", "maxLength": 6},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
        "size": {"$ref": "#/$defs/size"},
    },
    "required": ["color", "count", "name", "tags", "ok", "size"],
    "$defs": {"size": {"anyOf": [{"const": "S"}, {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4}]}},
}
# Tool-aware templates: the GGUF's own template shows the tools (so the app adds no system prompt for them).
HERMES_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}[INST]{{ m['content'] }}[/INST]"
    "{% elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
)
LLAMA3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if tools %}Respond with a JSON for a function call with its proper arguments: "
    '{"name": function name, "parameters": dictionary of argument name and its value}. '
    "Do not use variables. {{ tools | tojson }} <|python_tag|>{% endif %}<|im_start|>assistant\n"
)


class Worker:
    """One event loop and one loaded backend for the module: each test runs coroutines on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.backend = LlamaCppBackend()
        self.path: str | None = None

    def run(self, coro, timeout=90):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def load(self, path, **params) -> LlamaCppBackend:
        wanted = (str(path), tuple(sorted(params.items())))
        if self.path != wanted:
            self.run(self.backend.load(str(path), LoadParams(**{"n_ctx": 2048, **params})))
            self.path = wanted
        return self.backend

    def close(self) -> None:
        self.run(self.backend.close())
        self.loop.close()


@pytest.fixture(scope="module")
def worker():
    held = Worker()
    yield held
    held.close()


@pytest.fixture(scope="module")
def template_ggufs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tool-templates")
    return {
        name: write_tiny_gguf(folder / f"{name}.gguf", chat_template=template, name=name)
        for name, template in (
            ("hermes", HERMES_TOOLS_TEMPLATE),
            ("mistral", MISTRAL_TEMPLATE),
            ("llama3", LLAMA3_TEMPLATE),
        )
    }


async def _reply(backend, options=None, params=None, messages=USER):
    deltas = [d async for d in backend.stream_chat(messages, params or SamplingParams(max_tokens=300), options)]
    return "".join(d.text for d in deltas), deltas, backend.stats()


def _schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


# --- structured output ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_bounded_json_schema_is_followed(worker, tiny_gguf, seed):
    backend = worker.load(tiny_gguf)
    options = GenerationOptions(response_format=_schema_format(BOUNDED))
    text, _, stats = worker.run(_reply(backend, options, SamplingParams(max_tokens=400, seed=seed, temperature=1.0)))
    assert stats.finish_reason == "stop", text
    jsonschema.validate(json.loads(text), BOUNDED)


def test_json_object_gives_a_json_object(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    options = GenerationOptions(response_format={"type": "json_object"})
    for seed in range(4):
        text, _, stats = worker.run(_reply(backend, options, SamplingParams(max_tokens=60, seed=seed)))
        assert text.lstrip().startswith("{")
        if stats.finish_reason == "stop":  # random weights may run to max_tokens inside a string
            assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "number", "minimum": 0}, "not an integer"),
        ({"type": "object", "properties": {"id": {"type": "string", "format": "email"}}}, "format 'email'"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "'uniqueItems'"),
        ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "pattern or a format alone"),
        ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, "'not'"),
        ({"$ref": "https://example.com/schema.json"}, "only references inside the schema"),
        ({"type": "object", "required": ["a"]}, "requires a without describing it"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "cannot be satisfied"),
        ({"type": "string", "pattern": "abc"}, "could not be turned into a grammar"),
    ],
)
def test_a_schema_the_grammar_cannot_enforce_is_refused_with_the_reason(worker, tiny_gguf, schema, reason):
    backend = worker.load(tiny_gguf)
    with pytest.raises(RequestRefusedError) as caught:
        worker.run(_reply(backend, GenerationOptions(response_format=_schema_format(schema))))
    assert reason in str(caught.value) and caught.value.kind == "invalid_input"
    assert worker.run(_reply(backend, params=SamplingParams(max_tokens=3)))[2].completion_tokens == 3  # still fine


def test_an_invalid_raw_grammar_is_refused_before_sampling(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    with pytest.raises(RequestRefusedError, match="could not parse the grammar"):
        worker.run(_reply(backend, GenerationOptions(grammar="root ::= undefined-rule")))
    text, _, _ = worker.run(_reply(backend, GenerationOptions(grammar='root ::= "yes" | "no"')))
    assert text in ("yes", "no")


@pytest.mark.parametrize(
    "options",
    [
        GenerationOptions(response_format={"type": "xml"}),
        GenerationOptions(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
        GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
        GenerationOptions(tool_choice="required"),
        GenerationOptions(tools=[{"type": "function", "function": {}}]),
        GenerationOptions(logprobs=True, top_logprobs=50),
        GenerationOptions(top_logprobs=2),
    ],
)
def test_malformed_options_are_refused_before_the_worker_sees_them(worker, tiny_gguf, options):
    backend = worker.load(tiny_gguf)
    with pytest.raises(InvalidInputError):
        worker.run(_reply(backend, options))


# --- tools ---------------------------------------------------------------------------------------------------------
def _hermes_calls(text):
    assert re.fullmatch(r"<tool_call>\n.*?\n</tool_call>(\n<tool_call>\n.*?\n</tool_call>)*", text, re.DOTALL), text
    return [json.loads(block) for block in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL)]


def _valid_call(call, key="arguments"):
    tool = next(t for t in TOOLS if t["function"]["name"] == call["name"])
    jsonschema.validate(call[key], tool["function"]["parameters"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_named_tool_choice_forces_a_valid_call_in_the_models_format(worker, tiny_gguf, seed):
    backend = worker.load(tiny_gguf)
    options = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    text, _, stats = worker.run(_reply(backend, options, SamplingParams(max_tokens=300, seed=seed, temperature=1.0)))
    assert stats.finish_reason == "stop"
    (call,) = _hermes_calls(text)
    assert call["name"] == "get_weather"
    _valid_call(call)


def test_required_tool_choice_calls_one_of_the_tools(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    options = GenerationOptions(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    names = set()
    for seed in range(4):
        text, _, _ = worker.run(_reply(backend, options, SamplingParams(max_tokens=300, seed=seed, temperature=1.0)))
        (call,) = _hermes_calls(text)
        _valid_call(call)
        names.add(call["name"])
    assert names <= {"get_weather", "get_time"}


@pytest.mark.parametrize(
    ("fmt", "pattern", "key"),
    [("mistral", r"^\[TOOL_CALLS\](\[.*\])$", "arguments"), ("llama3", r"^(\{.*\})\s*$", "parameters")],
)
def test_the_call_format_follows_the_chat_template(worker, template_ggufs, fmt, pattern, key):
    backend = worker.load(template_ggufs[fmt])
    options = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    text, _, _ = worker.run(_reply(backend, options, SamplingParams(max_tokens=200, seed=5)))
    match = re.match(pattern, text, re.DOTALL)
    assert match, text
    payload = json.loads(match[1])
    call = payload[0] if isinstance(payload, list) else payload
    assert call["name"] == "get_time"
    _valid_call(call, key)


@pytest.mark.parametrize("model", ["chatml", "hermes", "mistral", "llama3"])
def test_forced_calls_read_back_through_the_reply_parser(worker, tiny_gguf, template_ggufs, model):
    """What the grammar forces is what the app's reply parser reads, in each format, for the model's template."""
    from app.core.chat.reply_parser import parse_reply
    from app.core.chat.tool_formats import ReplyFormat, reply_format_for

    path = tiny_gguf if model == "chatml" else template_ggufs[model]
    backend = worker.load(path)
    options = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    text, _, _ = worker.run(_reply(backend, options, SamplingParams(max_tokens=300, seed=7, temperature=1.0)))
    found = reply_format_for(backend.model.metadata.get("tokenizer.chat_template"), backend.model.architecture).tools
    parsed = parse_reply(text, found if found is not ReplyFormat.NONE else ReplyFormat.HERMES)
    (call,) = parsed.tool_calls
    assert call.name == "get_weather" and not parsed.content.strip() and not parsed.errors
    jsonschema.validate(json.loads(call.arguments_json), WEATHER)


def test_tools_reach_the_prompt_through_the_template_or_the_system_prompt(worker, tiny_gguf, template_ggufs):
    """ChatML without tools in its template: the app writes them into the system prompt. A template that shows
    tools gets them as they are. ``tool_choice: none`` shows none, as if there were no tools."""
    for path in (tiny_gguf, template_ggufs["hermes"]):
        backend = worker.load(path)
        bare = worker.run(backend.count_tokens(USER))
        with_tools = worker.run(backend.count_tokens(USER, TOOLS))
        none = GenerationOptions(tools=TOOLS, tool_choice="none")
        _, _, stats = worker.run(_reply(backend, none, SamplingParams(max_tokens=2)))
        assert with_tools > bare + 50 and stats.prompt_tokens == bare
    backend = worker.load(template_ggufs["hermes"])
    own = worker.run(backend.count_tokens(USER, TOOLS))
    backend = worker.load(tiny_gguf)
    assert worker.run(backend.count_tokens(USER, TOOLS)) > own  # the written instructions are longer


def test_tool_results_in_the_history_render_and_count(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    call = {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": "12:00"}]  # fmt: skip
    counted = worker.run(backend.count_tokens(history, TOOLS))
    _, _, stats = worker.run(_reply(backend, GenerationOptions(tools=TOOLS), SamplingParams(max_tokens=2), history))
    assert counted == stats.prompt_tokens and counted > worker.run(backend.count_tokens(USER, TOOLS))


# --- logprobs, finish reasons, completions, counts -----------------------------------------------------------------
def test_logprobs_match_llama_cpp_with_logits_all(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    options = GenerationOptions(logprobs=True, top_logprobs=3)
    prompt = "The quick brown fox"
    deltas = worker.run(_collect(backend.stream_completion(prompt, SamplingParams(max_tokens=6, temperature=0.0),
                                                           options)))  # fmt: skip
    entries = [e for d in deltas for e in d.logprobs]
    assert "".join(d.text for d in deltas) == "".join(e["token"] for e in entries)
    for entry in entries:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"} and len(entry["top_logprobs"]) == 3
        assert bytes(entry["bytes"]).decode() == entry["token"] and entry["logprob"] <= 0
        assert entry["top_logprobs"][0]["logprob"] >= entry["logprob"] - 1e-9  # greedy took the likeliest
    import llama_cpp

    reference = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=2048, logits_all=True, verbose=False)
    try:
        expected = reference.create_completion(prompt, max_tokens=6, temperature=0.0, logprobs=3)
    finally:
        reference.close()
    assert [e["logprob"] for e in entries] == pytest.approx(expected["choices"][0]["logprobs"]["token_logprobs"],
                                                            abs=1e-4)  # fmt: skip


def test_no_logprobs_unless_asked(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    _, deltas, _ = worker.run(_reply(backend, params=SamplingParams(max_tokens=4)))
    assert deltas and all(d.logprobs is None for d in deltas)


def test_a_reply_cut_by_max_tokens_says_length(worker, long_context_gguf):
    backend = worker.load(long_context_gguf)
    _, _, stats = worker.run(_reply(backend, params=SamplingParams(max_tokens=5, temperature=0.0)))
    assert stats.finish_reason == "length" and stats.completion_tokens == 5 and stats.prompt_tokens > 0


def test_a_raw_completion_continues_the_text_without_the_template(worker, long_context_gguf):
    backend = worker.load(long_context_gguf)
    deltas = worker.run(_collect(backend.stream_completion("Once upon a time", SamplingParams(max_tokens=7))))
    stats = backend.stats()
    assert "".join(d.text for d in deltas) and stats.finish_reason == "length" and stats.completion_tokens == 7
    assert stats.prompt_tokens == worker.run(_token_count(long_context_gguf, "Once upon a time"))
    with pytest.raises(InvalidInputError, match="cannot call tools"):
        backend.stream_completion("x", SamplingParams(), GenerationOptions(tools=TOOLS))


def test_token_counts_match_the_prompt_a_chat_uses(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    counted = worker.run(backend.count_tokens(messages))
    _, _, stats = worker.run(_reply(backend, params=SamplingParams(max_tokens=2), messages=messages))
    assert counted == stats.prompt_tokens
    counted = worker.run(backend.count_tokens(messages, TOOLS))
    _, _, stats = worker.run(_reply(backend, GenerationOptions(tools=TOOLS), SamplingParams(max_tokens=2), messages))
    assert counted == stats.prompt_tokens


# --- embeddings --------------------------------------------------------------------------------------------------
def test_an_embedding_load_embeds_and_refuses_to_chat(worker, tiny_gguf):
    backend = worker.load(tiny_gguf, embedding=True)
    first, second, again = worker.run(backend.embed(["the cat sat", "a journey of a thousand miles", "the cat sat"]))
    assert len(first) == 64 and sum(x * x for x in first) == pytest.approx(1.0)
    assert first == pytest.approx(again, abs=1e-5) and first != pytest.approx(second, abs=1e-3)
    with pytest.raises(RequestRefusedError, match="embeddings only"):
        worker.run(_reply(backend))
    with pytest.raises(RequestRefusedError, match="embeddings only"):
        worker.run(backend.count_tokens(USER))
    with pytest.raises(InvalidInputError):
        worker.run(backend.embed([]))


def test_a_text_longer_than_the_context_is_refused_not_cut(worker, tiny_gguf):
    backend = worker.load(tiny_gguf, embedding=True, n_ctx=64)
    with pytest.raises(RequestRefusedError, match="Split the text"):
        worker.run(backend.embed(["hello there " * 80]))
    assert len(worker.run(backend.embed(["hello"]))[0]) == 64


def test_a_chat_load_embeds_on_its_context_as_an_embedding_load_does(worker, tiny_gguf):
    embedded = worker.run(worker.load(tiny_gguf, embedding=True).embed_counted(["hello", "the cat sat"]))
    backend = worker.load(tiny_gguf)  # for chat (issue 26: embeddings without a reload)
    vectors, tokens = worker.run(backend.embed_counted(["hello", "the cat sat"]))
    assert vectors == [pytest.approx(v, abs=1e-5) for v in embedded[0]] and tokens == embedded[1] > 2


# --- a consumer that stops reading ----------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["aclose", "dropped"])
def test_a_consumer_that_stops_reading_stops_generation(worker, long_context_gguf, how):
    backend = worker.load(long_context_gguf, n_ctx=8192)

    async def scenario():
        stream = backend.stream_chat(USER, SamplingParams(max_tokens=8000, temperature=0.0))  # the context
        for _ in range(3):
            await stream.__anext__()
        if how == "aclose":
            await stream.aclose()
        else:  # the client went away and nothing closes the stream: its finalizer does
            del stream
            gc.collect()
        await asyncio.wait_for(backend.wait_idle(), 10)
        return backend.stats()

    stats = worker.run(scenario())
    # short of the 8000 asked; how far the tiny model ran before the stop landed depends on the machine's load
    # (1,088 tokens with both cores busy)
    assert stats.finish_reason == "stopped" and stats.completion_tokens < 8000
    assert worker.run(_reply(backend, params=SamplingParams(max_tokens=3)))[2].completion_tokens == 3


async def _collect(stream):
    return [d async for d in stream]


async def _token_count(path, text):
    import llama_cpp

    model = llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False)
    try:
        return len(model.tokenize(text.encode(), add_bos=False))  # the test models add no BOS
    finally:
        model.close()


def test_the_worker_itself_refuses_malformed_requests_and_answers_the_next(tiny_gguf):
    """Commands the backend would never send (it checks first): the worker still answers each with an error."""
    from tests.backends.test_worker_errors import RawWorker

    raw = RawWorker()
    try:
        raw.send({"op": "load", "id": 1, "path": str(tiny_gguf), "params": {"n_ctx": 256}})
        assert raw.until(1)["event"] == "loaded"
        bad = [
            {"op": "chat", "messages": USER, "options": {"top_logprobs": 7}},
            {"op": "count", "messages": USER, "tools": [{"type": "function"}]},
            {"op": "complete", "prompt": ["not", "text"]},
            {"op": "embed", "texts": []},
        ]
        for request_id, command in enumerate(bad, start=2):
            raw.send({**command, "id": request_id})
            error = raw.until(request_id)
            assert error["event"] == "error" and error["kind"] in ("bad_input", "bad_command"), error
        raw.send({"op": "complete", "id": 9, "prompt": "Hello", "sampling": {"max_tokens": 2}})
        assert raw.until(9)["event"] == "done"
        raw.send({"op": "count", "id": 10, "messages": USER})
        assert raw.until(10)["tokens"] > 0
    finally:
        assert raw.close() == 0
