"""Anthropic Messages request bodies (``/v1/messages``, ``/v1/messages/count_tokens``) read into what the engines
take: the system prompt first, ``tool_use`` blocks as an assistant's tool calls, ``tool_result`` blocks as tool
messages, tools and tool choice in OpenAI's terms. Text models only: images and documents are refused."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from app.core.params import GenerationOptions
from app.services.api.errors import bad_request
from app.services.api.fields import Fields, GenerationCall, sampling_fields

TEXT_ONLY = "this server runs text models; send text blocks only."


def messages_call(body: dict[str, Any], max_tokens_limit: int) -> GenerationCall:
    f = Fields(body)
    model = f.text("model", required=True) or ""
    max_tokens = f.max_tokens(("max_tokens",), max_tokens_limit)
    if max_tokens is None:
        raise bad_request("'max_tokens' is required: the most tokens the reply may have.", param="max_tokens")
    sampling = {**sampling_fields(f, temperature_max=2.0), "max_tokens": max_tokens}
    if (stops := f.stops("stop_sequences")) is not None:
        sampling["stop"] = stops
    thinking = f.obj("thinking") or {}
    if thinking.get("type") not in (None, "enabled", "disabled", "adaptive"):
        raise bad_request('\'thinking.type\' must be "enabled" or "disabled".', param="thinking")
    switch = {"enabled": True, "disabled": False}.get(thinking.get("type") or "")  # adaptive: the model's default
    return GenerationCall(
        model,
        messages=anthropic_messages(body),
        sampling=sampling,
        options=replace(_tool_options(f), enable_thinking=switch),
        stream=bool(f.boolean("stream")),
        keep_alive=f.keep_alive(),
        thinking=thinking.get("type") in ("enabled", "adaptive"),
    )


def count_call(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``count_tokens``: the model, the messages and the tools (OpenAI's shape)."""
    f = Fields(body)
    model = f.text("model", required=True) or ""
    return model, anthropic_messages(body), _tool_options(f).tools


def anthropic_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", param="messages")
    out: list[dict[str, Any]] = []
    system = _system(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for index, message in enumerate(messages):
        out += _message(message, f"messages[{index}]")
    return out


def _system(value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        return "\n\n".join(_text_block(block, f"system[{i}]") for i, block in enumerate(value))
    raise bad_request("'system' must be a string or a list of text blocks.", param="system")


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise bad_request(f'\'{where}\' must be an object whose role is "user" or "assistant".', param=where)
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"'{where}.content' must be a string or a list of content blocks.", param=where)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_block(block, at))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block, at))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, at))
        elif kind == "thinking" and role == "assistant":
            thinking.append(block.get("thinking") if isinstance(block.get("thinking"), str) else "")
        elif kind == "redacted_thinking" and role == "assistant":
            continue  # nothing readable to send back
        else:
            why = TEXT_ONLY if kind in ("image", "document") else "this block does not belong in this message."
            raise bad_request(f"'{at}' is a {kind} block: {why}", param=at)
    if role == "assistant":
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
        if "".join(thinking):  # earlier thinking, for a chat template that shows it again
            reply["reasoning_content"] = "".join(thinking)
        if calls:
            reply["tool_calls"] = calls
        return [reply]
    return results + ([{"role": "user", "content": "\n\n".join(texts)}] if texts or not results else [])


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise bad_request(f'\'{where}\' must be a text block: {{"type": "text", "text": ...}}.', param=where)
    return block["text"]


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise bad_request(f"'{where}' needs an id and a name.", param=where)
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise bad_request(f"'{where}.input' must be an object.", param=where)
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}}  # fmt: skip


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"'{where}.tool_use_id' is required.", param=where)
    content = block.get("content", "")
    if isinstance(content, list):
        content = "".join(_text_block(b, f"{where}.content[{i}]") for i, b in enumerate(content))
    elif not isinstance(content, str):
        raise bad_request(f"'{where}.content' must be a string or a list of text blocks.", param=where)
    if block.get("is_error") is True:
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _tool_options(f: Fields) -> GenerationOptions:
    tools = f.body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise f.fail("tools", "a list of tools")
    converted = [_tool(t, f"tools[{i}]") for i, t in enumerate(tools or [])]
    choice, parallel = _tool_choice(f.obj("tool_choice"))
    if (choice == "required" or isinstance(choice, dict)) and not converted:
        raise bad_request("'tool_choice' needs 'tools'.", param="tool_choice")
    grammar = f.text("grammar")  # llama-server's extension: a raw GBNF grammar (llama.cpp only)
    options = GenerationOptions(tools=converted or None, tool_choice=choice, parallel_tool_calls=parallel,
                                grammar=grammar)  # fmt: skip
    if found := options.problems():
        raise bad_request(" ".join(found), param="grammar" if grammar is not None else "tools")
    return options


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
        raise bad_request(f"'{where}' must have a name and an input_schema.", param=where)
    if tool.get("type") not in (None, "custom"):
        raise bad_request(f"'{where}' is a {tool['type']} tool: only your own tools (with an input_schema) run "
                          "here.", param=where)  # fmt: skip
    schema = tool.get("input_schema", {"type": "object", "properties": {}})
    if not isinstance(schema, dict):
        raise bad_request(f"'{where}.input_schema' must be a JSON Schema object.", param=where)
    function: dict[str, Any] = {"name": tool["name"], "parameters": schema}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool]:
    if choice is None:
        return None, True
    parallel = choice.get("disable_parallel_tool_use") is not True
    kind = choice.get("type")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise bad_request("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", "
                      "\"name\": ...}.", param="tool_choice")  # fmt: skip
