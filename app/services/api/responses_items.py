"""The Responses API's conversation items: ``input`` (a string, or a list of items) checked and written in one
canonical shape (the shape stored with a response and listed by ``input_items``), and a conversation of items read
into the chat messages the engines take. Items: messages (roles user, assistant, system, developer; text parts),
``function_call`` (with its ``namespace``, if any) and ``function_call_output``, ``custom_tool_call`` and
``custom_tool_call_output``, ``reasoning``. Text models only: image, file and audio parts of a message are refused
with the reason; in a tool's output (Codex's ``view_image`` returns one) each is replaced by a line that says it was
left out, so an agent's turn goes on. The server runs no built-in tools, so their items are refused."""

from __future__ import annotations

import secrets
from typing import Any

from app.services.api.errors import bad_request
from app.services.api.responses_tools import custom_arguments, flat_name

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text")
TEXT_ONLY = "this server runs text models; send text parts only."
NO_BUILT_IN_TOOLS = (
    "this server runs no built-in tools; send messages, function and custom tool calls and their outputs."
)
LEFT_OUT = "[{kind} left out: this server's models read text only]"


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


# --- input, checked -----------------------------------------------------------------------------------------------
def input_items(value: Any) -> list[dict[str, Any]]:
    """``input`` as canonical items: a string is one user message."""
    if isinstance(value, str):
        return [_message_item("user", [{"type": "input_text", "text": value}])]
    if not isinstance(value, list) or not value:
        raise bad_request("'input' must be a string or a non-empty list of items.", param="input")
    return [canonical_item(item, f"input[{i}]") for i, item in enumerate(value)]


def canonical_item(item: Any, where: str) -> dict[str, Any]:
    """One item, checked (a 400 naming ``where`` and what is wrong), in the canonical shape."""
    if not isinstance(item, dict):
        raise bad_request(f"'{where}' must be an object (a message, a function_call or a function_call_output).",
                          param=where)  # fmt: skip
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _message(item, where)
    if kind == "function_call":
        return _function_call(item, where)
    if kind in ("function_call_output", "custom_tool_call_output"):
        return _call_output(item, where, kind)
    if kind == "custom_tool_call":
        return _custom_call(item, where)
    if kind == "reasoning":
        return _reasoning(item, where)
    if kind == "item_reference":
        raise bad_request(f"'{where}' is an item_reference: send the item itself, or continue a stored response "
                          "with 'previous_response_id'.", param=where)  # fmt: skip
    raise bad_request(f"'{where}' is a {kind} item: {NO_BUILT_IN_TOOLS}", param=where)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise bad_request(f"'{where}.role' must be one of {', '.join(ROLES)}.", param=f"{where}.role")
    content = item.get("content")
    part_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        parts = [{"type": part_type, "text": content}]
    elif isinstance(content, list):
        parts = [{"type": part_type, "text": _part_text(p, f"{where}.content[{i}]")} for i, p in enumerate(content)]
    else:
        raise bad_request(f"'{where}.content' must be a string or a list of text parts.", param=f"{where}.content")
    return _message_item(role, parts, item.get("id"))


def _message_item(role: str, parts: list[dict[str, Any]], given_id: Any = None) -> dict[str, Any]:
    if role == "assistant":
        parts = [{**p, "annotations": []} for p in parts]
    item_id = given_id if isinstance(given_id, str) and given_id else new_item_id("msg")
    return {"type": "message", "id": item_id, "role": role, "status": "completed", "content": parts}


def _part_text(part: Any, where: str) -> str:
    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
    if kind == "refusal" and isinstance(part.get("refusal"), str):  # an assistant's earlier refusal, as text
        return str(part["refusal"])
    if kind not in TEXT_PARTS:
        raise bad_request(f"'{where}' is a {kind} part: {TEXT_ONLY}", param=where)
    if not isinstance(part.get("text"), str):
        raise bad_request(f"'{where}.text' must be a string.", param=f"{where}.text")
    return str(part["text"])


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "{}")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"'{where}.call_id' is required: the id the call's output answers.", param=f"{where}.call_id")
    if not isinstance(name, str) or not name:
        raise bad_request(f"'{where}.name' is required: the function the model called.", param=f"{where}.name")
    if not isinstance(arguments, str):
        raise bad_request(f"'{where}.arguments' must be a JSON string.", param=f"{where}.arguments")
    call = {"type": "function_call", "id": _id_of(item, "fc"), "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}  # fmt: skip
    return {**call, **_namespace(item, where)}


def _custom_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name, text = item.get("call_id"), item.get("name"), item.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"'{where}.call_id' is required: the id the call's output answers.", param=f"{where}.call_id")
    if not isinstance(name, str) or not name:
        raise bad_request(f"'{where}.name' is required: the custom tool the model called.", param=f"{where}.name")
    if not isinstance(text, str):
        raise bad_request(f"'{where}.input' must be a string: the custom tool's input.", param=f"{where}.input")
    call = {"type": "custom_tool_call", "id": _id_of(item, "ctc"), "call_id": call_id, "name": name, "input": text,
            "status": "completed"}  # fmt: skip
    return {**call, **_namespace(item, where)}


def _namespace(item: dict[str, Any], where: str) -> dict[str, str]:
    namespace = item.get("namespace")
    if namespace is None:
        return {}
    if not isinstance(namespace, str) or not namespace:
        raise bad_request(f"'{where}.namespace' must be the name of the namespace the tool is in.",
                          param=f"{where}.namespace")  # fmt: skip
    return {"namespace": namespace}


def _call_output(item: dict[str, Any], where: str, kind: str) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"'{where}.call_id' is required: the call_id of the call it answers.",
                          param=f"{where}.call_id")  # fmt: skip
    if isinstance(output, list):
        output = "".join(_output_text(p, f"{where}.output[{i}]") for i, p in enumerate(output))
    elif not isinstance(output, str):
        raise bad_request(f"'{where}.output' must be a string or a list of content parts.", param=f"{where}.output")
    prefix = "fco" if kind == "function_call_output" else "ctco"
    return {"type": kind, "id": _id_of(item, prefix), "call_id": call_id, "output": output, "status": "completed"}


def _output_text(part: Any, where: str) -> str:
    """A part of a tool's output as text: an image or a file is a line saying it was left out."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_image", "input_file", "input_audio"):
        return LEFT_OUT.format(kind=kind.removeprefix("input_"))
    return _part_text(part, where)


def _id_of(item: dict[str, Any], prefix: str) -> str:
    given = item.get("id")
    return given if isinstance(given, str) and given else new_item_id(prefix)


def _reasoning(item: dict[str, Any], where: str) -> dict[str, Any]:
    """Earlier thinking, sent back: its text is kept (for a chat template that shows it again); an encrypted one
    (another server's) has nothing readable and is kept without text."""
    texts = []
    for key in ("content", "summary"):
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise bad_request(f"'{where}.{key}' must be a list of text parts.", param=f"{where}.{key}")
        texts += [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    item_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else new_item_id("rs")
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [{"type": "reasoning_text", "text": "".join(texts)}] if texts else []}  # fmt: skip


# --- a conversation of items, as chat messages --------------------------------------------------------------------
def conversation(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for ``instructions`` and canonical items, in order: function calls join the assistant turn
    they follow (or make one), outputs become tool messages (named after their call), thinking goes with the next
    assistant turn. The instructions and every system/developer message, in order, are one system message (chat
    templates take the system prompt first, once; many refuse one later), and consecutive user messages are one
    turn (Codex sends its environment and the prompt as two; strict templates want the roles to alternate)."""
    messages: list[dict[str, Any]] = []
    thinking: list[str] = []
    names: dict[str, str] = {}
    for item in items:
        kind = item["type"]
        if kind == "reasoning":
            thinking += [p["text"] for p in item.get("content") or []]
        elif kind == "message":
            text = "".join(p["text"] for p in item["content"])
            messages.append(_with_thinking({"role": ROLES[item["role"]], "content": text}, thinking))
        elif kind in ("function_call", "custom_tool_call"):
            turn = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
            if turn is None:
                turn = _with_thinking({"role": "assistant", "content": ""}, thinking)
                messages.append(turn)
            name = flat_name(item["name"], item.get("namespace"))
            arguments = item["arguments"] if kind == "function_call" else custom_arguments(item["input"])
            function = {"name": name, "arguments": arguments}
            turn.setdefault("tool_calls", []).append({"id": item["call_id"], "type": "function", "function": function})
            names[item["call_id"]] = name
        else:
            messages.append(_tool_result(item, names))
    return _one_system_prompt(instructions, messages)


def _with_thinking(message: dict[str, Any], thinking: list[str]) -> dict[str, Any]:
    if message["role"] == "assistant" and "".join(thinking):
        message["reasoning_content"] = "".join(thinking)
    if message["role"] == "assistant":
        thinking.clear()
    return message


def _tool_result(item: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    call_id = item["call_id"]
    if call_id not in names:
        call = item["type"].removesuffix("_output")
        raise bad_request(f"A {item['type']} answers call_id '{call_id}', but no {call} with that call_id comes "
                          f"before it: send the {call} item too, or continue the response that made the call with "
                          "'previous_response_id'.", param="input")  # fmt: skip
    return {"role": "tool", "tool_call_id": call_id, "name": names[call_id], "content": item["output"]}


def _one_system_prompt(instructions: str | None, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    texts = [instructions or ""] + [m["content"] for m in messages if m["role"] == "system"]
    system = "\n\n".join(t for t in texts if t)
    rest: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "system":
            continue
        if rest and message["role"] == rest[-1]["role"] == "user":
            rest[-1] = {**rest[-1], "content": "\n\n".join(t for t in (rest[-1]["content"], message["content"]) if t)}
        else:
            rest.append(message)
    if not rest:
        raise bad_request("'input' has nothing for the model to answer: add a user message.", param="input")
    return ([{"role": "system", "content": system}] if system else []) + rest
