"""What a request's GenerationOptions become on Ollama's ``/api/chat``, and Ollama's tool calls and logprobs read
back in OpenAI's shapes (``Delta.tool_calls``, ``Delta.logprobs``)."""

from __future__ import annotations

import json
from typing import Any

from app.core.errors import InvalidInputError
from app.core.params import GenerationOptions


def chat_fields(options: GenerationOptions | None) -> dict[str, Any]:
    """``/api/chat`` fields for ``options``: ``format`` ("json" or the schema, which Ollama enforces), ``tools``,
    ``think`` (thinking on/off, or an effort), ``logprobs``/``top_logprobs``.
    Raises InvalidInputError for what Ollama cannot do: force a tool call
    (it has no ``tool_choice``) or follow a raw grammar."""
    if options is None:
        return {}
    options.check()
    if options.grammar is not None:
        raise InvalidInputError("A raw grammar works on llama.cpp only; ask Ollama for a JSON schema instead.")
    if options.tool_mode in ("required", "named"):
        raise InvalidInputError(
            "Ollama cannot force a tool call (tool_choice required or a named function); use tool_choice auto, "
            "or run the model on llama.cpp, which can."
        )
    fields: dict[str, Any] = {}
    if options.format_type == "json_object":
        fields["format"] = "json"
    elif options.format_type == "json_schema":
        fields["format"] = options.json_schema
    if options.prompt_tools:
        fields["tools"] = options.prompt_tools
    if options.reasoning_effort is not None:  # gpt-oss takes an effort; others on/off
        fields["think"] = options.reasoning_effort if options.enable_thinking is not False else False
    elif options.enable_thinking is not None:
        fields["think"] = options.enable_thinking
    if options.logprobs:
        fields["logprobs"] = True
        if options.top_logprobs:
            fields["top_logprobs"] = options.top_logprobs
    return fields


def ollama_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style messages as Ollama takes them: a tool call's ``arguments`` as an object, not JSON text,
    earlier thinking (``reasoning_content``) as Ollama's ``thinking``, and a tool result named by ``tool_name``
    (the called function, found from its ``tool_call_id``) instead of OpenAI's ``tool_call_id``/``name``."""
    converted = []
    call_names: dict[str, str] = {}
    for message in messages:
        if "reasoning_content" in message:
            thinking = message["reasoning_content"]
            message = {k: v for k, v in message.items() if k != "reasoning_content"} | {"thinking": thinking}
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            call_names |= _names_by_call_id(calls)
            message = {**message, "tool_calls": [_object_arguments(c) for c in calls]}
        if message.get("role") == "tool":
            message = _tool_result(message, call_names)
        converted.append(message)
    return converted


def _names_by_call_id(calls: list[Any]) -> dict[str, str]:
    names = {}
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and call.get("id") and function.get("name"):
            names[str(call["id"])] = str(function["name"])
    return names


def _tool_result(message: dict[str, Any], call_names: dict[str, str]) -> dict[str, Any]:
    name = message.get("name") or call_names.get(str(message.get("tool_call_id")))
    kept = {k: v for k, v in message.items() if k not in ("name", "tool_call_id")}
    return kept | {"tool_name": name} if name else kept


def _object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": arguments}}


def tool_call_pieces(calls: Any, first_index: int) -> list[dict[str, Any]]:
    """Ollama's whole tool calls as OpenAI streaming pieces (``arguments`` as JSON text), numbered on from
    ``first_index`` across the reply."""
    pieces = []
    for offset, call in enumerate(calls or []):
        function = call.function
        pieces.append({
            "index": first_index + offset, "id": f"call_{first_index + offset}", "type": "function",
            "function": {"name": function.name, "arguments": json.dumps(dict(function.arguments), ensure_ascii=False)},
        })  # fmt: skip
    return pieces


def logprob_entries(logprobs: Any) -> list[dict[str, Any]] | None:
    """Ollama's logprobs in OpenAI's shape (``bytes`` added)."""
    if not logprobs:
        return None
    return [
        {"token": e.token, "logprob": e.logprob, "bytes": list(e.token.encode()),
         "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.token.encode())}
                          for t in e.top_logprobs or []]}
        for e in logprobs
    ]  # fmt: skip
