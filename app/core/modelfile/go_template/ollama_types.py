"""Ollama's template data model (template/template.go: templateMessage, templateTool…, api.ToolProperty), built
from the chat request's messages and tools."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from app.core import safe_json
from app.core.modelfile.go_template.gojson import json_object, json_string, marshal_json


class _NilSlice(list[Any]):
    """A nil Go slice: empty and false, but JSON-encodes as null."""

    go_nil = True

    def go_json(self) -> str:
        return "null"


class _JSONMap(dict[str, Any]):
    """Ollama's templateArgs / templateProperties: a map that prints as JSON (keys sorted, like any Go map)."""

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        super().__init__(items or {})
        self.go_nil = items is None

    def go_string(self) -> str:
        return "{}" if self.go_nil else marshal_json(dict(self))

    def go_json(self) -> str:
        return "null" if self.go_nil else marshal_json(dict(self))


class _OrderedProperties(dict[str, Any]):
    """api.ToolPropertiesMap nested in a property: JSON keeps the insertion order."""

    def go_json(self) -> str:
        return "{" + ",".join(f"{json_string(k)}:{marshal_json(v)}" for k, v in self.items()) + "}"


class _PropertyType(list[str]):
    """api.PropertyType: a JSON-schema type, a string or a list of strings."""

    def go_string(self) -> str:
        if len(self) <= 1:
            return self[0] if self else ""
        return "[" + " ".join(self) + "]"

    def go_json(self) -> str:
        return json_string(self[0]) if len(self) == 1 else marshal_json(list(self))


class _PrintsAsJSON:
    """A value that prints as its JSON encoding: its ``go_string`` is its ``go_json``."""

    def go_json(self) -> str:
        raise NotImplementedError

    def go_string(self) -> str:
        return self.go_json()


_TS_TYPES = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "array": "any[]",
    "object": "Record<string, any>",
    "null": "null",
}


@dataclass
class ToolProperty:
    """api.ToolProperty (no String method: it prints as a Go struct)."""

    AnyOf: list[Any]
    Type: _PropertyType
    Items: Any
    Description: str
    Enum: list[Any]
    Properties: _OrderedProperties | None
    Required: list[Any]

    go_type: ClassVar[str] = "api.ToolProperty"

    @classmethod
    def from_json(cls, d: Any) -> ToolProperty:
        d = _as_dict(d)
        any_of = d.get("anyOf")
        type_ = d.get("type")
        props = d.get("properties")
        return cls(
            AnyOf=[cls.from_json(x) for x in any_of] if isinstance(any_of, list) else _NilSlice(),
            Type=_PropertyType(
                [type_] if isinstance(type_, str) else [str(t) for t in type_] if isinstance(type_, list) else []
            ),
            Items=_json_any(d.get("items")),
            Description=str(d.get("description") or ""),
            Enum=_json_any(d["enum"]) if isinstance(d.get("enum"), list) else _NilSlice(),
            Properties=_OrderedProperties({str(k): cls.from_json(v) for k, v in props.items()})
            if isinstance(props, dict)
            else None,
            Required=[str(x) for x in d["required"]] if isinstance(d.get("required"), list) else _NilSlice(),
        )

    def go_json(self) -> str:
        return json_object(
            [
                ("anyOf", self.AnyOf, "empty"),
                ("type", self.Type, "empty"),
                ("items", self.Items, "nil"),
                ("description", self.Description, "empty"),
                ("enum", self.Enum, "empty"),
                ("properties", self.Properties, "nil"),
                ("required", self.Required, "empty"),
            ]
        )

    def to_typescript_type(self) -> str:
        if self.AnyOf:
            return " | ".join(p.to_typescript_type() for p in self.AnyOf)
        if not self.Type:
            return "any"
        return " | ".join(_TS_TYPES.get(t, "any") for t in self.Type)


# Ollama's current main prints templateToolFunctionParameters and templateToolFunction in Go syntax, a known bug
# (ollama#14601); released versions before v0.14 and the pending fix print JSON, which is what templates are written
# for.
@dataclass
class _ToolFunctionParameters(_PrintsAsJSON):
    Type: str
    Defs: Any
    Items: Any
    Required: list[Any]
    Properties: _JSONMap

    go_type: ClassVar[str] = "template.templateToolFunctionParameters"

    def go_json(self) -> str:
        return json_object(
            [
                ("type", self.Type, ""),
                ("$defs", self.Defs, "nil"),
                ("items", self.Items, "nil"),
                ("required", self.Required, "empty"),
                ("properties", self.Properties, ""),
            ]
        )


@dataclass
class _ToolFunction(_PrintsAsJSON):
    Name: str
    Description: str
    Parameters: _ToolFunctionParameters

    go_type: ClassVar[str] = "template.templateToolFunction"

    def go_json(self) -> str:
        return json_object(
            [("name", self.Name, ""), ("description", self.Description, ""), ("parameters", self.Parameters, "")]
        )


@dataclass
class _Tool(_PrintsAsJSON):
    Type: str
    Items: Any
    Function: _ToolFunction

    go_type: ClassVar[str] = "template.templateTool"

    def go_json(self) -> str:
        return json_object([("type", self.Type, ""), ("items", self.Items, "nil"), ("function", self.Function, "")])


class _Tools(list[_Tool], _PrintsAsJSON):
    """Ollama's templateTools: prints as a JSON array ("null" when the request has no tools)."""

    go_type = "template.templateTools"

    def __init__(self, tools: Iterable[_Tool] | None) -> None:
        super().__init__(tools or [])
        self.go_nil = tools is None

    def go_json(self) -> str:
        return "null" if self.go_nil else "[" + ",".join(t.go_json() for t in self) + "]"


@dataclass
class _ToolCallFunction:
    Index: int
    Name: str
    Arguments: _JSONMap


@dataclass
class _ToolCall:
    ID: str
    Function: _ToolCallFunction


@dataclass
class _Message:
    """Ollama's templateMessage, what {{ range .Messages }} walks over."""

    Role: str
    Content: str
    Thinking: str = ""
    Images: list[Any] = field(default_factory=_NilSlice)
    ToolCalls: list[_ToolCall] = field(default_factory=_NilSlice)
    ToolName: str = ""
    ToolCallID: str = ""

    go_type: ClassVar[str] = "*template.templateMessage"
    go_pointer: ClassVar[bool] = True


def _json_any(v: Any) -> Any:
    """A JSON value as Go decodes it into `any`: every number becomes a float64."""
    if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
        return v
    if isinstance(v, int):
        return float(v)
    if isinstance(v, dict):
        return {str(k): _json_any(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_any(x) for x in v]
    return v


def _as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def convert_tools(tools: Sequence[Any] | None) -> _Tools:
    if tools is None:
        return _Tools(None)
    converted = []
    for tool in tools:
        tool = _as_dict(tool)
        fn = _as_dict(tool.get("function"))
        params = _as_dict(fn.get("parameters"))
        props = params.get("properties")
        required = params.get("required")
        converted.append(
            _Tool(
                Type=str(tool.get("type") or ""),
                Items=_json_any(tool.get("items")),
                Function=_ToolFunction(
                    Name=str(fn.get("name") or ""),
                    Description=str(fn.get("description") or ""),
                    Parameters=_ToolFunctionParameters(
                        Type=str(params.get("type") or ""),
                        Defs=_json_any(params.get("$defs")),
                        Items=_json_any(params.get("items")),
                        Required=[str(x) for x in required] if isinstance(required, list) else _NilSlice(),
                        Properties=_JSONMap(
                            {str(k): ToolProperty.from_json(v) for k, v in props.items()}
                            if isinstance(props, dict)
                            else None
                        ),
                    ),
                ),
            )
        )
    return _Tools(converted)


def _convert_tool_calls(calls: Any) -> list[_ToolCall]:
    if not isinstance(calls, list) or not calls:
        return _NilSlice()
    converted = []
    for call in calls:
        call = _as_dict(call)
        fn = _as_dict(call.get("function"))
        args = fn.get("arguments")
        if isinstance(args, str):  # OpenAI-style arguments arrive as a JSON string
            try:
                args = safe_json.loads(args, what="the tool call's arguments")
            except safe_json.JsonError:  # malformed, nested too deeply or too large: rendered as no arguments
                args = None
        converted.append(
            _ToolCall(
                ID=str(call.get("id") or ""),
                Function=_ToolCallFunction(
                    Index=int(fn.get("index") or 0),
                    Name=str(fn.get("name") or ""),
                    Arguments=_JSONMap(_json_any(args) if isinstance(args, dict) else None),
                ),
            )
        )
    return converted


def template_message(m: Mapping[str, Any]) -> _Message:
    images = m.get("images")
    return _Message(
        Role=m["role"],
        Content=m["content"],
        Thinking=str(m.get("thinking") or ""),
        Images=list(images) if isinstance(images, list) and images else _NilSlice(),
        ToolCalls=_convert_tool_calls(m.get("tool_calls")),
        ToolName=str(m.get("tool_name") or ""),
        ToolCallID=str(m.get("tool_call_id") or ""),
    )
