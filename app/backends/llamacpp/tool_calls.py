"""Tool calls on llama.cpp: the model's tool-call format (Hermes/Qwen ``<tool_call>``, Llama 3 JSON, Mistral
``[TOOL_CALLS]``), chosen from its chat template as the reply parser chooses it; messages made ready for chat
templates; and, for a template that does not show tools, the tools written into the system prompt in that
format. Pure Python (no ``llama_cpp``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core.chat.tool_formats import ReplyFormat, reply_format_for

HERMES = str(ReplyFormat.HERMES)
LLAMA3_JSON = str(ReplyFormat.LLAMA3_JSON)
MISTRAL = str(ReplyFormat.MISTRAL)


@dataclass(frozen=True)
class ToolCallFormat:
    """How a model writes tool calls: ``open`` + the calls (JSON objects with ``name`` and ``arguments_key``,
    joined by ``separator``) + ``close``. ``parallel``: it may write several in one reply."""

    name: str
    open: str
    close: str
    separator: str
    arguments_key: str = "arguments"
    parallel: bool = True
    each_wrapped: bool = False  # open/close around every call (Hermes), else around the list (Mistral)

    def render(self, calls: list[tuple[str, Any]]) -> str:
        """``calls`` (name, arguments) as the model writes them."""
        objects = [json.dumps({"name": name, self.arguments_key: args}, ensure_ascii=False) for name, args in calls]
        if self.each_wrapped:
            return self.separator.join(self.open + text + self.close for text in objects)
        return self.open + self.separator.join(objects) + self.close

    def instructions(self, tools: list[dict[str, Any]]) -> str:
        """The system-prompt text that shows ``tools`` to a model whose template does not."""
        listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        example = self.render([("<function-name>", "<arguments-json-object>")]).replace('"<', "<").replace('>"', ">")
        several = " You may call several functions in one reply." if self.parallel else ""
        return (
            "# Tools\n\nYou may call one or more functions to help with the user's request. The functions are "
            f"listed as JSON within <tools></tools>:\n<tools>\n{listed}\n</tools>\n\n"
            f"To call a function, reply with exactly:\n{example}\n{several}".rstrip()
        )


FORMATS = {
    HERMES: ToolCallFormat(HERMES, "<tool_call>\n", "\n</tool_call>", "\n", each_wrapped=True),
    LLAMA3_JSON: ToolCallFormat(LLAMA3_JSON, "", "", "", arguments_key="parameters", parallel=False),
    MISTRAL: ToolCallFormat(MISTRAL, "[TOOL_CALLS][", "]", ", "),
}


def tool_call_format(chat_template: str | None, architecture: str | None = None) -> ToolCallFormat:
    """The format a model with this chat template (and architecture) writes tool calls in: the reply parser's
    (``reply_format_for``), so what the grammar forces is what the parser reads; Hermes for a model with no
    format of its own (the app then shows it the tools in Hermes' words, ``with_tool_instructions``)."""
    found = reply_format_for(chat_template, architecture).tools
    return FORMATS.get(str(found), FORMATS[HERMES])


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them (Hugging Face's convention): a tool call's ``arguments`` as an
    object rather than JSON text, and no ``None`` content (templates concatenate it)."""
    ready = []
    for message in messages:
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        if isinstance(message.get("tool_calls"), list):
            message["tool_calls"] = [_with_object_arguments(call) for call in message["tool_calls"]]
        ready.append(message)
    return ready


def _with_object_arguments(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    arguments = call["function"].get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return call
        if isinstance(parsed, dict):
            return {**call, "function": {**call["function"], "arguments": parsed}}
    return call


def with_tool_instructions(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], fmt: ToolCallFormat
) -> list[dict[str, Any]]:
    """For a template that shows no tools: the tools in the system prompt, and earlier calls written into the
    assistant's text in ``fmt`` (the template would drop them)."""
    text = fmt.instructions(tools)
    out = [_calls_as_text(m, fmt) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0] = {**out[0], "content": (out[0]["content"] + "\n\n" + text).lstrip()}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def _calls_as_text(message: dict[str, Any], fmt: ToolCallFormat) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list) or not calls:
        return message
    pairs = [
        (str(c["function"].get("name", "")), c["function"].get("arguments", {}))
        for c in calls
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    content = str(message.get("content") or "")
    rendered = fmt.render(pairs)
    return {k: v for k, v in message.items() if k != "tool_calls"} | {
        "content": f"{content}\n{rendered}" if content else rendered
    }
