"""Anthropic Messages request bodies (``/v1/messages``, ``/v1/messages/count_tokens``) read into what the engines
take: the system prompt first (the top-level ``system`` and every ``role: "system"`` entry of ``messages``, in
order: chat templates such as Gemma's have no system turns mid-conversation), consecutive turns of one role
combined (as Anthropic does), ``tool_use`` blocks as an assistant's tool calls, ``tool_result`` blocks as tool
messages, tools and tool choice in OpenAI's terms. What only Anthropic's servers do (prompt caching, context
editing, betas, service tiers, metadata) is accepted and has nothing to do here; what this server cannot honour
(MCP connectors, compaction, server-held threads, server tools, images) is refused, saying so."""

from __future__ import annotations

import json
from typing import Any

from app.core.params import GenerationOptions
from app.services.api.errors import bad_request
from app.services.api.fields import Fields, GenerationCall, sampling_fields

TEXT_ONLY = "this server runs text models; send text blocks only."
THINKING_TYPES = ("adaptive", "enabled", "disabled", "between_tools")
THINKING_DISPLAYS = ("summarized", "omitted", "updates")
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}  # to the templates'
CLEAR_AT = ("never", "next_user_message")
BILLING_HEADER = "x-anthropic-billing-header:"
NOT_HERE = {
    "mcp_servers": "this server does not connect to MCP servers; run them in your client and send their tools.",
    "compaction": "this server does not summarize conversations; send the messages to answer.",
    "thread": "this server keeps no conversation state; send the whole conversation in 'messages'.",
}

Located = tuple[Any, str]  # a content block and where it was in the request


def messages_call(body: dict[str, Any], max_tokens_limit: int) -> GenerationCall:
    f = Fields(body)
    model = f.text("model", required=True) or ""
    max_tokens = f.max_tokens(("max_tokens",), max_tokens_limit)
    if max_tokens is None:
        raise bad_request("'max_tokens' is required: the most tokens the reply may have.", param="max_tokens")
    sampling = {**sampling_fields(f, temperature_max=2.0), "max_tokens": max_tokens}
    if (stops := f.stops("stop_sequences")) is not None:
        sampling["stop"] = stops
    for key, why in NOT_HERE.items():
        f.refuse(key, why)
    switch, shown = _thinking(f)
    messages = anthropic_messages(body)
    return GenerationCall(
        model,
        messages=messages,
        sampling=sampling,
        options=_options(f, enable_thinking=switch, reasoning_effort=_effort(f), exact_stops=f.has("stop_sequences")),
        stream=bool(f.boolean("stream")),
        keep_alive=f.keep_alive(),
        thinking=shown,
    )


def count_call(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``count_tokens``: the model, the messages and the tools (OpenAI's shape)."""
    f = Fields(body)
    model = f.text("model", required=True) or ""
    return model, anthropic_messages(body), _tools(f)


# --- the conversation -------------------------------------------------------------------------------------------
def anthropic_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", param="messages")
    system = [_system(body.get("system"))]
    turns: list[tuple[str, list[Located]]] = []  # (role, its blocks): consecutive turns of one role combined
    last_user = _last_user(messages)
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = _role(message, where)
        if role == "system":
            system.append(_system_entry(message, where, shown=index > last_user))
        elif turns and turns[-1][0] == role:
            turns[-1][1].extend(_blocks(message, where))
        else:
            turns.append((role, _blocks(message, where)))
    if not turns:
        raise bad_request("'messages' needs a user turn: system entries alone leave nothing to answer.",
                          param="messages")  # fmt: skip
    prompt = "\n\n".join(part for part in system if part)
    out: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
    for role, blocks in turns:
        out += _turn(role, blocks)
    return out


def _last_user(messages: list[Any]) -> int:
    return max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), default=-1)


def _role(message: Any, where: str) -> str:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        raise bad_request(f'\'{where}\' must be an object whose role is "user", "assistant" or "system".',
                          param=where)  # fmt: skip
    return str(message["role"])


def _system(value: Any) -> str:
    """The top-level system prompt without Claude Code's attribution line (``x-anthropic-billing-header: …``): it
    is meant for Anthropic's billing, changes with every request, and would make each prompt new to the engine's
    prefix cache (a 20k-token prompt evaluated again on every turn)."""
    if isinstance(value, list):
        texts = [_text_block(block, f"system[{i}]") for i, block in enumerate(value)]
        return "\n\n".join(text for text in texts if not text.startswith(BILLING_HEADER))
    text = _texts(value, "system")
    return text.partition("\n")[2] if text.startswith(BILLING_HEADER) else text


def _texts(value: Any, where: str) -> str:
    """A string, or a list of text blocks joined by blank lines."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        return "\n\n".join(_text_block(block, f"{where}[{i}]") for i, block in enumerate(value))
    raise bad_request(f"'{where}' must be a string or a list of text blocks.", param=where)


def _system_entry(message: dict[str, Any], where: str, *, shown: bool) -> str:
    """A ``role: "system"`` entry's text; empty when its ``clear_at`` hides it (a user turn came after it)."""
    clear_at = message.get("clear_at")
    if clear_at is not None and clear_at not in CLEAR_AT:
        raise bad_request(f'\'{where}.clear_at\' must be "never" or "next_user_message".', param=where)
    content = message.get("content")
    if content is None and message.get("output_config") is None:
        raise bad_request(f"'{where}' needs content (or an output_config).", param=where)
    for i, block in enumerate(content if isinstance(content, list) else []):
        if isinstance(block, dict) and block.get("type") in ("tool_addition", "tool_removal"):
            raise bad_request(f"'{where}.content[{i}]' is a {block['type']} block: this server offers the same "
                              "tools for the whole conversation; change 'tools' instead.", param=where)  # fmt: skip
    text = _texts(content, f"{where}.content")
    return text if shown or clear_at != "next_user_message" else ""


def _blocks(message: dict[str, Any], where: str) -> list[Located]:
    content = message.get("content")
    if isinstance(content, str):
        return [({"type": "text", "text": content}, where)]
    if not isinstance(content, list):
        raise bad_request(f"'{where}.content' must be a string or a list of content blocks.", param=where)
    return [(block, f"{where}.content[{i}]") for i, block in enumerate(content)]


def _turn(role: str, blocks: list[Located]) -> list[dict[str, Any]]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block, at in blocks:
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


# --- thinking and effort ----------------------------------------------------------------------------------------
def _thinking(f: Fields) -> tuple[bool | None, bool]:
    """(the template's thinking switch, whether the reply shows thinking blocks). ``adaptive`` and
    ``between_tools`` leave thinking to the model (its template's default); ``budget_tokens`` is read, not
    enforced: thinking counts toward ``max_tokens``, which bounds it."""
    thinking = f.obj("thinking") or {}
    kind = thinking.get("type")
    if kind not in (None, *THINKING_TYPES):
        raise bad_request(f"'thinking.type' must be one of {', '.join(THINKING_TYPES)}.", param="thinking")
    settings = Fields(thinking, "thinking.")
    settings.integer("budget_tokens", 0)
    display = settings.text("display")
    if display is not None and display not in THINKING_DISPLAYS:
        raise bad_request(f"'thinking.display' must be one of {', '.join(THINKING_DISPLAYS)}.", param="thinking")
    switch = {"enabled": True, "disabled": False}.get(kind or "")
    return switch, kind in ("enabled", "adaptive", "between_tools") and display != "omitted"


def _effort(f: Fields) -> str | None:
    """``output_config.effort``, or that of a system entry after the last user turn (it applies to this turn),
    as the templates' reasoning effort."""
    effort = _effort_of(f.obj("output_config") or {}, "output_config")
    messages = f.body.get("messages") or []
    last_user = _last_user(messages)
    for index, message in enumerate(messages[last_user + 1 :], start=last_user + 1):
        if message.get("role") == "system" and message.get("output_config") is not None:
            config = message["output_config"]
            where = f"messages[{index}].output_config"
            if not isinstance(config, dict):
                raise bad_request(f"'{where}' must be an object.", param=where)
            effort = _effort_of(config, where) or effort
    return effort


def _effort_of(config: dict[str, Any], where: str) -> str | None:
    effort = config.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise bad_request(f"'{where}.effort' must be one of {', '.join(EFFORTS)}.", param=where)
    return EFFORTS.get(effort) if effort is not None else None


# --- tools and output format ------------------------------------------------------------------------------------
def _options(f: Fields, **switches: Any) -> GenerationOptions:
    converted = _tools(f)
    choice, parallel = _tool_choice(f.obj("tool_choice"))
    if (choice == "required" or isinstance(choice, dict)) and not converted:
        raise bad_request("'tool_choice' needs 'tools'.", param="tool_choice")
    grammar = f.text("grammar")  # llama-server's extension: a raw GBNF grammar (llama.cpp only)
    response_format = _output_format(f)
    options = GenerationOptions(tools=converted, tool_choice=choice, parallel_tool_calls=parallel, grammar=grammar,
                                response_format=response_format, **switches)  # fmt: skip
    if found := options.problems():
        param = "grammar" if grammar is not None else "output_config" if response_format else "tools"
        raise bad_request(" ".join(found), param=param)
    return options


def _output_format(f: Fields) -> dict[str, Any] | None:
    """``output_config.format`` (structured outputs: ``{"type": "json_schema", "schema": {...}}``) as OpenAI's
    ``response_format``."""
    fmt = (f.obj("output_config") or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad_request("'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}.",
                          param="output_config")  # fmt: skip
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"], "strict": True}}


def _tools(f: Fields) -> list[dict[str, Any]] | None:
    tools = f.body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise f.fail("tools", "a list of tools")
    return [_tool(t, f"tools[{i}]") for i, t in enumerate(tools or [])] or None


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


def _tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    """(OpenAI's tool choice, parallel calls): ``disable_parallel_tool_use: true`` is one call at most, ``false``
    lets the model make several; unset (None) leaves it to the engine (one call when a call is forced)."""
    if choice is None:
        return None, None
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise bad_request("'tool_choice.disable_parallel_tool_use' must be true or false.", param="tool_choice")
    parallel = None if disable is None else not disable
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise bad_request("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", "
                      "\"name\": ...}.", param="tool_choice")  # fmt: skip
