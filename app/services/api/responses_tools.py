"""The Responses API's ``tools`` and ``tool_choice``, read into the functions the model can call (Chat's nested
shape, as the engines take them) and a map from each of those back to what the client gave:

- ``function``: itself.
- ``custom`` (freeform input, e.g. Codex's ``apply_patch``): a function with one string parameter, ``input``; the
  model's call comes back as a ``custom_tool_call`` item with that string. A grammar the tool's ``format`` names is
  shown in the description (the engines constrain JSON, not Lark or regex).
- ``namespace``: its functions and custom tools, each named ``<namespace>__<name>`` (the flat name Codex and OpenAI
  use where a namespace cannot be kept); the call comes back with ``name`` and ``namespace`` apart again.
- built-in tools (web search, file search, code interpreter, image generation, MCP, computer use, shells,
  ``apply_patch``…): this server runs none of them, so they are not shown to the model (logged once per type) —
  a client that lists them still gets its answer. A ``tool_choice`` that forces one is a 400 that says so.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from app.services.api.errors import bad_request

log = logging.getLogger("app.services.api")

FLAT_TOOL = '{"type": "function", "name": ..., "parameters": {...}}'
NAMESPACE_JOIN = "__"
# The built-in tools of the Responses API reference (and the openai SDK's ``Tool`` union): none run here.
BUILT_IN = frozenset({
    "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11", "file_search",
    "code_interpreter", "image_generation", "mcp", "computer", "computer_use", "computer_use_preview", "local_shell",
    "shell", "apply_patch", "tool_search", "programmatic_tool_calling",
})  # fmt: skip
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
                "additionalProperties": False}  # fmt: skip
_dropped_logged: set[str] = set()


@dataclass(frozen=True)
class Called:
    """What a call of one engine function is, in the client's terms."""

    kind: str  # "function" or "custom"
    name: str
    namespace: str | None = None


@dataclass
class ToolSet:
    """The request's tools: ``engine`` (what the model sees), ``calls`` (engine name → what a call of it is) and
    ``echo`` (the tools as the response repeats them: as sent, built-in ones too)."""

    engine: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, Called] = field(default_factory=dict)
    echo: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def called(self, engine_name: str) -> Called:
        return self.calls.get(engine_name) or Called("function", engine_name)


def flat_name(name: str, namespace: str | None) -> str:
    """The engine's name for a tool: its own, or ``<namespace>__<name>`` inside a namespace."""
    if not namespace:
        return name
    return f"{namespace.rstrip('_')}{NAMESPACE_JOIN}{name.lstrip('_')}"


def custom_arguments(text: str) -> str:
    """A custom tool's input as the engine function's JSON arguments."""
    return json.dumps({"input": text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The input string back out of the engine function's arguments (the raw text when they do not parse: a call
    cut short)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value["input"] if isinstance(value, dict) and isinstance(value.get("input"), str) else arguments


# --- tools --------------------------------------------------------------------------------------------------------
def read_tools(value: Any) -> ToolSet:
    if value is None:
        return ToolSet()
    if not isinstance(value, list):
        raise bad_request(f"'tools' must be a list of tools, e.g. {FLAT_TOOL}.", param="tools")
    tools = ToolSet()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or not isinstance(kind, str):
            raise bad_request(f"'{where}' must be a tool object with a 'type', e.g. {FLAT_TOOL}.", param=where)
        if kind in BUILT_IN:
            tools.echo.append(tool)
            tools.dropped.append(kind)
            _log_dropped(kind)
        elif kind == "namespace":
            _add_namespace(tools, tool, where)
        elif kind in ("function", "custom"):
            _add(tools, tool, where, None)
        else:
            raise bad_request(f"'{where}' is a {kind!r} tool, which the Responses API does not have: send function, "
                              f"custom or namespace tools ({FLAT_TOOL}).", param=where)  # fmt: skip
    return tools


def _log_dropped(kind: str) -> None:
    if kind not in _dropped_logged:
        _dropped_logged.add(kind)
        log.info("responses: %s tools are not shown to the model: this server runs no built-in tools", kind)


def _add_namespace(tools: ToolSet, tool: dict[str, Any], where: str) -> None:
    namespace, inner = tool.get("name"), tool.get("tools")
    if not isinstance(namespace, str) or not namespace:
        raise bad_request(f"'{where}.name' is required: the namespace's name.", param=f"{where}.name")
    if not isinstance(inner, list) or not inner:
        raise bad_request(f"'{where}.tools' must be a non-empty list of function or custom tools.",
                          param=f"{where}.tools")  # fmt: skip
    for j, member in enumerate(inner):
        at = f"{where}.tools[{j}]"
        if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
            raise bad_request(f"'{at}' must be a function or custom tool: a namespace holds only those.", param=at)
        _add(tools, member, at, namespace, echo=False)
    tools.echo.append({**tool, "description": tool.get("description") or ""})


def _add(tools: ToolSet, tool: dict[str, Any], where: str, namespace: str | None, *, echo: bool = True) -> None:
    if "name" not in tool and isinstance(tool.get("function"), dict):
        raise bad_request(f"'{where}' is in Chat Completions' shape; the Responses API takes it flat: {FLAT_TOOL}.",
                          param=where)  # fmt: skip
    name, description = tool.get("name"), tool.get("description")
    if not isinstance(name, str) or not name:
        raise bad_request(f"'{where}.name' is required.", param=f"{where}.name")
    if description is not None and not isinstance(description, str):
        raise bad_request(f"'{where}.description' must be a string.", param=f"{where}.description")
    engine_name = flat_name(name, namespace)
    if engine_name in tools.calls:
        raise bad_request(f"'{where}' is named {engine_name!r}, like a tool before it: tool names must be unique.",
                          param=f"{where}.name")  # fmt: skip
    if tool["type"] == "custom":
        parameters, echo_tool = CUSTOM_INPUT, _custom_echo(tool, where)
        description = _custom_description(description, tool.get("format"))
    else:
        parameters, echo_tool = _function_parameters(tool, where)
    function = {"name": engine_name, "parameters": parameters, **({"description": description} if description else {})}
    tools.engine.append({"type": "function", "function": function})
    tools.calls[engine_name] = Called(tool["type"], name, namespace)
    if echo:
        tools.echo.append(echo_tool)


def _function_parameters(tool: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    parameters = tool.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise bad_request(f"'{where}.parameters' must be a JSON Schema object.", param=f"{where}.parameters")
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise bad_request(f"'{where}.strict' must be true or false.", param=f"{where}.strict")
    echo = {"type": "function", "name": tool["name"], "description": tool.get("description"),
            "parameters": parameters, "strict": strict}  # fmt: skip
    return parameters, echo


def _custom_echo(tool: dict[str, Any], where: str) -> dict[str, Any]:
    fmt = tool.get("format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        grammar_ok = kind == "grammar" and fmt.get("syntax") in ("lark", "regex") and isinstance(
            fmt.get("definition"), str)  # fmt: skip
        if kind != "text" and not grammar_ok:
            raise bad_request(f"'{where}.format' must be " '{"type": "text"} or {"type": "grammar", "syntax": "lark" '
                              '| "regex", "definition": ...}.', param=f"{where}.format")  # fmt: skip
    echo = {"type": "custom", "name": tool["name"], "description": tool.get("description")}
    return {**echo, "format": fmt} if fmt is not None else echo


def _custom_description(description: str | None, fmt: Any) -> str:
    said = (description or "").strip()
    how = "Call it with its whole input as one string, 'input'."
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        how += f" The input follows this {fmt['syntax']} grammar:\n{fmt['definition']}"
    return f"{said}\n\n{how}" if said else how


# --- tool_choice --------------------------------------------------------------------------------------------------
def read_tool_choice(value: Any, tools: ToolSet) -> tuple[str | dict[str, Any] | None, list[dict[str, Any]]]:
    """The choice in Chat's terms, and the engine tools the model may call (``allowed_tools`` narrows them)."""
    if value is None or value in ("none", "auto", "required"):
        if value == "required" and not tools.engine:
            said = (f"only built-in tools ({', '.join(sorted(set(tools.dropped)))}), which this server cannot run"
                    if tools.dropped else "no 'tools'")  # fmt: skip
            raise bad_request(f"'tool_choice' is \"required\" but there are {said}: send function or custom tools.",
                              param="tool_choice")  # fmt: skip
        return value, tools.engine
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in BUILT_IN:
        raise bad_request(f"'tool_choice' forces the built-in {kind} tool, which this server cannot run: choose a "
                          'function or custom tool, or "auto".', param="tool_choice")  # fmt: skip
    if kind in ("function", "custom"):
        name = _engine_name(value, tools, kind)
        return {"type": "function", "function": {"name": name}}, tools.engine
    if kind == "allowed_tools" and value.get("mode") in ("auto", "required") and isinstance(value.get("tools"), list):
        allowed = {_engine_name(t, tools, str(t["type"])) for t in value["tools"]
                   if isinstance(t, dict) and t.get("type") in ("function", "custom")}  # fmt: skip
        if not allowed and value["mode"] == "required":
            raise bad_request("'tool_choice.tools' must list function or custom tools from 'tools' ({\"type\": "
                              '"function", "name": ...}): this server runs no built-in tools.',
                              param="tool_choice")  # fmt: skip
        return value["mode"], [t for t in tools.engine if t["function"]["name"] in allowed]
    raise bad_request('\'tool_choice\' must be "none", "auto", "required", {"type": "function", "name": ...}, '
                      '{"type": "custom", "name": ...} or {"type": "allowed_tools", "mode": "auto" | "required", '
                      '"tools": [...]}.', param="tool_choice")  # fmt: skip


def _engine_name(choice: dict[str, Any], tools: ToolSet, kind: str) -> str:
    """The engine name of the ``kind`` tool a choice names (with its ``namespace``, or by its flat name)."""
    name, namespace = choice.get("name"), choice.get("namespace")
    engine_name = flat_name(name, namespace if isinstance(namespace, str) else None) if isinstance(name, str) else ""
    called = tools.calls.get(engine_name)
    if called is None or called.kind != kind:
        raise bad_request(f"'tool_choice' names the {kind} tool {name!r}, which is not one of 'tools'.",
                          param="tool_choice")  # fmt: skip
    return engine_name
