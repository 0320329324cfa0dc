"""The GBNF grammar a request needs on llama.cpp, built by the app, never left to llama-cpp-python (0.3.36
ignores ``response_format`` json_schema and falls back to plain JSON where a schema fails to convert).

- ``json_object`` → any JSON object;
- ``json_schema`` → the schema, through ``llama_cpp.llama_grammar``'s converter plus integer ranges, after
  ``schema_support`` has refused what the converter would skip;
- ``tool_choice`` ``required`` or a named function → a call in the model's format (``tool_calls``) whose
  arguments follow that function's parameters schema; with ``auto`` and a response format, either;
- a raw ``grammar`` as given.

Every grammar is parsed by llama.cpp before use (``check_parses``): an invalid one is refused, not sent to the
sampler (which would crash on it). Only the worker imports this module; ``llama_cpp`` loads on first use.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from app.backends.llamacpp.int_ranges import integer_range_rule
from app.backends.llamacpp.schema_support import SchemaNotEnforceable, check_enforceable
from app.backends.llamacpp.tool_calls import ToolCallFormat
from app.core.errors import InvalidInputError
from app.core.params import GenerationOptions

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
# A character of a JSON string as JSON has it: control characters only escaped (the converter's own ``[^"\\]``
# lets a raw newline into a string, which no JSON parser reads: the call then came back as text)
JSON_STRING_CHAR = r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


class GrammarError(InvalidInputError):
    """The request asks for a structure the grammar cannot enforce; the message says why and what to change."""


def request_grammar(options: GenerationOptions, fmt: ToolCallFormat) -> str | None:
    """The grammar for ``options`` (None when the reply is free text)."""
    if options.grammar is not None:
        return options.grammar
    mode = options.tool_mode
    if mode in ("required", "named"):
        tools = _forced_tools(options)
        parallel = options.parallel_calls and fmt.parallel  # one call unless several were asked
        return _build(lambda c: _tool_calls_rule(c, tools, fmt, parallel))
    if options.format_type == "text":
        return None
    content = {"type": "object"} if options.format_type == "json_object" else options.json_schema
    _check(content, "response_format.json_schema.schema")
    offered = options.tools if mode == "auto" else None
    return _build(lambda c: _content_rule(c, content, offered, fmt, options.parallel_calls))


def check_parses(llm: Any, grammar: str) -> None:
    """Raise GrammarError when llama.cpp cannot parse ``grammar`` (its own message goes to the log)."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError("llama.cpp could not parse the grammar (a GBNF grammar with a rule named root).")
    llama_cpp.llama_sampler_free(sampler)


# --- building ---------------------------------------------------------------------------------------------------
def _build(add_root: Any) -> str:
    converter = _converter_class()(prop_order={"name": 0}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        root = add_root(converter)
    except (GrammarError, SchemaNotEnforceable):
        raise
    except Exception as exc:  # the converter asserts and raises on what it cannot turn into rules
        raise GrammarError(f"The JSON Schema could not be turned into a grammar: {exc}") from exc
    return converter.format_grammar() + f"\nroot ::= {root}\n"


def _content_rule(
    converter: Any, schema: dict[str, Any] | None, tools: list[dict[str, Any]] | None, fmt: ToolCallFormat,
    parallel: bool,
) -> str:  # fmt: skip
    content = _visit(converter, schema or {}, "content")
    if not tools:
        return content
    return f"{content} | {_tool_calls_rule(converter, tools, fmt, parallel and fmt.parallel)}"


def _tool_calls_rule(converter: Any, tools: list[dict[str, Any]], fmt: ToolCallFormat, parallel: bool) -> str:
    """``open call close`` (repeated when ``parallel``), each call one of ``tools`` with checked arguments."""
    branches = []
    for index, tool in enumerate(tools):
        function = tool["function"]
        parameters = function.get("parameters") or EMPTY_PARAMETERS
        _check(parameters, f"the parameters of the function '{function['name']}'")
        parameters = _resolved(converter, parameters, f"tool-{index}")  # its #/ refs point into itself
        branches.append(
            {"type": "object", "properties": {"name": {"const": function["name"]}, fmt.arguments_key: parameters},
             "required": ["name", fmt.arguments_key]}
        )  # fmt: skip
    call = _visit(converter, {"anyOf": branches} if len(branches) > 1 else branches[0], "tool-call")
    opening, closing, separator = (_literal(fmt.open), _literal(fmt.close), _literal(fmt.separator))
    if fmt.each_wrapped:
        one = converter._add_rule("tool-call-block", " ".join(p for p in (opening, call, closing) if p))
        # after any call a blank line ends the reply: a model that would write on gets a way out that is no call
        return f'{one} ({separator} {one})* "\\n\\n"?' if parallel else str(one)
    listed = f"{call} ({separator} {call})*" if parallel else call
    return " ".join(p for p in (opening, listed, closing) if p)


def _forced_tools(options: GenerationOptions) -> list[dict[str, Any]]:
    tools = options.tools or []
    if options.tool_mode == "named":
        return [t for t in tools if t["function"]["name"] == options.named_tool]
    return tools


def _check(schema: Any, what: str) -> None:
    try:
        check_enforceable(schema, what)
    except SchemaNotEnforceable as exc:
        raise GrammarError(f"{exc} Simplify the schema, or leave that keyword out.") from None


def _visit(converter: Any, schema: dict[str, Any], name: str) -> str:
    return str(converter.visit(_resolved(converter, schema, name), name))


def _resolved(converter: Any, schema: dict[str, Any], url: str) -> Any:
    """A copy of ``schema`` whose local ``$ref``s name ``url`` (so schemas visited together stay apart)."""
    return converter.resolve_refs(json.loads(json.dumps(schema)), url)


def _literal(text: str) -> str:
    return json.dumps(text) if text else ""


# --- the converter, with integer ranges ---------------------------------------------------------------------------
@functools.cache
def _converter_class() -> type:
    from llama_cpp import llama_grammar

    class RangeAwareConverter(llama_grammar.SchemaConverter):
        """llama-cpp-python's converter, plus ``minimum``/``maximum`` on integers (it ignores them), and ``$ref``
        rules named per reference (it names them by their last part, so ``#/$defs/a/P`` and ``#/$defs/P``, or
        two tools' ``P``, would share the first one's rule)."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._ref_rules: dict[str, str] = {}

        def resolve_refs(self, schema: Any, url: str) -> Any:
            """Local references made absolute (``url#/…``) and registered. The original stops at a node with a
            ``$ref``, so a schema whose root is a ``$ref`` beside its ``$defs`` kept unresolved references."""

            def visit(node: Any) -> None:
                if isinstance(node, list):
                    for item in node:
                        visit(item)
                    return
                if not isinstance(node, dict):
                    return
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith("#"):
                    node["$ref"] = f"{url}{ref}"
                    self._refs.setdefault(node["$ref"], _pointer(schema, ref))
                elif ref is not None and ref not in self._refs:
                    raise ValueError(f"unsupported reference {ref!r}")
                for value in node.values():
                    visit(value)

            visit(schema)
            return schema

        def _resolve_ref(self, ref: str) -> str:
            name = self._ref_rules.get(ref)
            if name is None:
                base = llama_grammar.INVALID_RULE_CHARS_RE.sub("-", ref.split("/")[-1]) or "ref"
                taken = set(self._rules) | set(self._ref_rules.values()) | set(llama_grammar.RESERVED_NAMES)
                name, index = base, 0
                while name in taken:
                    name, index = f"{base}{index}", index + 1
                self._ref_rules[ref] = name  # before visiting: a recursive schema refers to it
                actual = self.visit(self._refs[ref], name)
                if actual != name:
                    self._add_rule(name, actual)
            return name

        def _add_primitive(self, name: str, rule: Any) -> Any:
            if name == "char":
                rule = llama_grammar.BuiltinRule(JSON_STRING_CHAR, [])
            return super()._add_primitive(name, rule)

        def visit(self, schema: Any, name: str) -> Any:
            if isinstance(schema, dict) and schema.get("type") == "integer" and _bounded(schema):
                rule_name = name + "-" if name in llama_grammar.RESERVED_NAMES else name or "root"
                lo, hi = integer_bounds(schema)
                try:
                    rule = integer_range_rule(lo, hi)
                except ValueError as exc:
                    raise GrammarError(f"An integer in the schema cannot be satisfied: {exc}.") from None
                return self._add_rule(rule_name, f"{rule} space")
            return super().visit(schema, name)

    return RangeAwareConverter


def _pointer(schema: Any, ref: str) -> Any:
    """The part of ``schema`` a local reference (``#/a/b``) points at."""
    target = schema
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise ValueError(f"the reference {ref} points at nothing in the schema")
        target = target[part]
    return target


def _bounded(schema: dict[str, Any]) -> bool:
    return any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive integer range of ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``."""
    lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
    if "exclusiveMinimum" in schema:
        lows.append(math.floor(schema["exclusiveMinimum"]) + 1)
    highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
    if "exclusiveMaximum" in schema:
        highs.append(math.ceil(schema["exclusiveMaximum"]) - 1)
    return (max(lows) if lows else None), (min(highs) if highs else None)
