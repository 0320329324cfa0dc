"""The pieces behind llama.cpp's structured output, without a worker: integer ranges, which schemas the grammar can
enforce, the grammars built for a request, the tool-call formats and the messages the chat template receives."""

from __future__ import annotations

import json
import random
import re

import pytest

from app.backends.llamacpp import grammars
from app.backends.llamacpp.int_ranges import integer_range_rule
from app.backends.llamacpp.schema_support import SchemaNotEnforceable, check_enforceable
from app.backends.llamacpp.tool_calls import (
    FORMATS,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    template_messages,
    tool_call_format,
    with_tool_instructions,
)
from app.core.params import GenerationOptions
from tests.support.gguf_factory import CHATML_TEMPLATE


def _as_regex(rule: str) -> re.Pattern[str]:
    """The GBNF integer rule as a Python regex (its literals are digits and "-", its classes digit ranges)."""
    return re.compile(re.sub(r'"([^"]*)"', lambda m: re.escape(m[1]), rule).replace(" ", ""))


RANGES = [(0, 9), (5, 15), (-5, 5), (-100, -3), (7, 7), (123, 4567), (-999, 1000), (None, 5), (3, None),
          (None, -7), (-20, None), (None, None)]  # fmt: skip


@pytest.mark.parametrize(
    ("lo", "hi"), RANGES + [(a, a + random.Random(a).randint(0, 2500)) for a in range(-3000, 3000, 97)]
)
def test_an_integer_range_matches_exactly_its_integers(lo, hi):
    pattern = _as_regex(integer_range_rule(lo, hi))
    first = -12_000 if lo is None else lo - 1500
    last = 12_000 if hi is None else hi + 1500
    inside = [v for v in range(first, last + 1) if (lo is None or v >= lo) and (hi is None or v <= hi)]
    assert [v for v in range(first, last + 1) if pattern.fullmatch(str(v))] == inside
    assert not any(pattern.fullmatch(text) for text in ("-0", "01", "+1", "", "1.0"))


def test_an_empty_range_is_an_error():
    with pytest.raises(ValueError, match="above the maximum"):
        integer_range_rule(3, 2)


ENFORCEABLE = [
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": ["integer", "null"]}}},
    {"type": "object", "properties": {"x": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]}},
     "required": ["x"], "additionalProperties": False, "title": "T", "description": "d"},
    {"$defs": {"P": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}},
     "type": "object", "properties": {"p": {"$ref": "#/$defs/P"},
                                      "ps": {"type": "array", "items": {"$ref": "#/$defs/P"}, "maxItems": 4}}},
    {"allOf": [{"$ref": "#/definitions/A"}, {"properties": {"b": {"const": 1}}}],
     "definitions": {"A": {"type": "object", "properties": {"a": {"enum": [1, 2]}}}}},
    {"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"type": "boolean"}]},
    {"type": "string", "pattern": "^[a-z]{2,4}$"},
    {"type": "object", "additionalProperties": {"type": "number"}},
    {"type": "string", "enum": ["a", "b"], "description": "choice"},
    {"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}}}},
    {},
]  # fmt: skip


@pytest.mark.parametrize("schema", ENFORCEABLE)
def test_schemas_the_grammar_enforces_are_accepted_and_convert(schema):
    check_enforceable(schema)
    options = GenerationOptions(response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    grammar = grammars.request_grammar(options, FORMATS[HERMES])
    assert grammar is not None and "root ::= content" in grammar


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "integer", "multipleOf": 2}, "'multipleOf'"),
        ({"type": ["string", "null"], "maxLength": 3}, "several types and also constrains them"),
        ({"anyOf": [{"type": "string"}], "properties": {"a": {}}}, "combines 'anyOf' with properties"),
        ({"allOf": [{"type": "string", "minLength": 1}]}, "allOf is enforced only for parts that add object"),
        ({"type": "array", "maxItems": 2}, "without one items schema"),
        ({"maxLength": 2}, "without type string"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not define"),
        ({"type": "object", "nullable": True}, "'nullable'"),
        ({"type": "strin"}, "unknown type"),
        ({"type": "object", "properties": {"a": False}}, "no value can match"),
    ],
)
def test_schemas_the_grammar_would_not_enforce_are_refused_with_the_reason(schema, words):
    with pytest.raises(SchemaNotEnforceable, match=re.escape(words)):
        check_enforceable(schema)
    options = GenerationOptions(response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    with pytest.raises(grammars.GrammarError, match=re.escape(words)):
        grammars.request_grammar(options, FORMATS[HERMES])


def test_a_schema_nested_beyond_reason_is_refused():
    schema: dict = {"type": "string"}
    for _ in range(100):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(SchemaNotEnforceable, match="nested more than"):
        check_enforceable(schema)


TOOLS = [
    {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {
        "p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"enum": [1]}}}}},
    {"type": "function", "function": {"name": "b", "parameters": {"type": "object", "properties": {
        "p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"enum": ["x"]}}}}},
    {"type": "function", "function": {"name": "c"}},
]  # fmt: skip


def test_each_tools_references_stay_its_own_in_one_grammar():
    options = GenerationOptions(tools=TOOLS, tool_choice="required", parallel_tool_calls=True)
    grammar = grammars.request_grammar(options, FORMATS[HERMES])
    assert grammar is not None
    assert '"1"' in grammar and '"\\"x\\""' in grammar  # both P's, neither lost to the other
    assert 'root ::= tool-call-block ("\\n" tool-call-block)*' in grammar


@pytest.mark.parametrize(
    ("options", "expected", "absent"),
    [
        (GenerationOptions(), None, None),
        (GenerationOptions(tools=TOOLS), None, None),  # auto: the model decides, in free text
        (
            GenerationOptions(tools=TOOLS, tool_choice="none", response_format={"type": "json_object"}),
            "content",
            "tool",
        ),
        (GenerationOptions(tools=TOOLS, response_format={"type": "json_object"}), "content | tool-call-block", None),
        (
            GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "c"}}),
            "tool-call-block",
            '"a"',
        ),
        (GenerationOptions(grammar='root ::= "x"'), 'root ::= "x"', None),
    ],
)
def test_the_grammar_a_request_gets(options, expected, absent):
    grammar = grammars.request_grammar(options, FORMATS[HERMES])
    if expected is None:
        assert grammar is None
        return
    assert grammar is not None and expected in grammar
    if absent:
        assert absent not in grammar


def test_a_grammar_for_each_format_parses_in_llama_cpp(tiny_gguf):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=64, verbose=False)
    try:
        for fmt in FORMATS.values():
            for choice in ("required", {"type": "function", "function": {"name": "b"}}):
                grammar = grammars.request_grammar(GenerationOptions(tools=TOOLS, tool_choice=choice), fmt)
                grammars.check_parses(llm, grammar)
        for schema in ENFORCEABLE:
            fmt = {"type": "json_schema", "json_schema": {"schema": schema}}
            grammars.check_parses(
                llm, grammars.request_grammar(GenerationOptions(response_format=fmt), FORMATS[HERMES])
            )
        with pytest.raises(grammars.GrammarError):
            grammars.check_parses(llm, "root ::= (")
    finally:
        llm.close()


@pytest.mark.parametrize(
    ("template", "architecture", "expected"),
    [
        ("...{{ '<tool_call>' }}...", "qwen2", HERMES),
        ("...[TOOL_CALLS]...", "llama", MISTRAL),
        ("...<|python_tag|>...", "llama", LLAMA3_JSON),
        ("...Respond with a JSON for a function call...", "llama", LLAMA3_JSON),
        (CHATML_TEMPLATE, "mistral", HERMES),  # no format of its own: the app shows it Hermes' words
        (None, "mistral", MISTRAL),
        (None, None, HERMES),
    ],
)
def test_the_call_format_comes_from_the_chat_template(template, architecture, expected):
    assert tool_call_format(template, architecture).name == expected


def test_rendered_calls_read_back_as_json():
    calls = [("f", {"a": 1}), ("g", {})]
    hermes = FORMATS[HERMES].render(calls)
    assert [json.loads(b) for b in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", hermes)][1] == {
        "name": "g", "arguments": {}}  # fmt: skip
    assert json.loads(FORMATS[MISTRAL].render(calls).removeprefix("[TOOL_CALLS]"))[0]["arguments"] == {"a": 1}
    assert json.loads(FORMATS[LLAMA3_JSON].render(calls[:1])) == {"name": "f", "parameters": {"a": 1}}


def test_messages_are_made_ready_for_templates():
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    broken = {"id": "2", "type": "function", "function": {"name": "f", "arguments": "not json"}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call, broken]}]
    (ready,) = template_messages(messages)
    assert ready["content"] == "" and ready["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert ready["tool_calls"][1] == broken and messages[0]["content"] is None  # the caller's list is untouched


def test_tools_go_into_the_system_prompt_and_calls_into_the_text_for_a_template_without_tools():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    calls = [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": calls}]  # fmt: skip
    out = with_tool_instructions(messages, tools, FORMATS[HERMES])
    assert out[0]["content"].startswith("Be brief.\n\n# Tools") and '"name": "f"' in out[0]["content"]
    assert out[2] == {"role": "assistant", "content": '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'}
    alone = with_tool_instructions([{"role": "user", "content": "hi"}], tools, FORMATS[MISTRAL])
    assert alone[0]["role"] == "system" and "[TOOL_CALLS][" in alone[0]["content"]


def test_generation_options_say_what_is_asked():
    named = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "a"}})
    assert (named.tool_mode, named.named_tool, named.prompt_tools) == ("named", "a", TOOLS)
    none = GenerationOptions(tools=TOOLS, tool_choice="none")
    assert (none.tool_mode, none.prompt_tools) == ("none", None)
    assert GenerationOptions(tools=TOOLS).tool_mode == "auto" and GenerationOptions().tool_mode == "none"
    schema = {"type": "object"}
    fmt = GenerationOptions(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    assert (fmt.format_type, fmt.json_schema) == ("json_schema", schema)
    assert GenerationOptions.from_dict(named.to_dict()) == named


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (GenerationOptions(response_format={"type": "xml"}), "response_format.type must be one of"),
        (GenerationOptions(response_format={"type": "json_schema"}), "needs json_schema.schema"),
        (GenerationOptions(tools=[{"type": "retrieval"}]), "tools must be a list"),
        (GenerationOptions(tools=TOOLS + TOOLS[:1]), "share one"),
        (GenerationOptions(tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]), "JSON Schema"),
        (GenerationOptions(tools=TOOLS, tool_choice="always"), 'tool_choice must be "auto"'),
        (GenerationOptions(tools=TOOLS, tool_choice={"type": "function"}), "tool_choice must be"),
        (GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "z"}}), "not among"),
        (GenerationOptions(tool_choice="required"), "needs tools"),
        (GenerationOptions(logprobs=True, top_logprobs=21), "from 0 to 20"),
        (GenerationOptions(top_logprobs=1), "needs logprobs"),
        (GenerationOptions(grammar="root ::= x", response_format={"type": "json_object"}), "either a grammar"),
    ],
)
def test_malformed_generation_options_are_named(options, words):
    assert any(words in problem for problem in options.problems())
