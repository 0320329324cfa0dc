"""Responses API bodies and stream events: the ``response`` object (status ``completed``, or ``incomplete`` with
``incomplete_details.reason: "max_output_tokens"``), its output items (``reasoning`` when the model thought, a
``message`` with ``output_text``, ``function_call`` items — with their ``namespace`` — and ``custom_tool_call`` items
for custom tools) and usage, and the stream's events in OpenAI's order, each with its ``sequence_number``:
``response.created``, ``response.in_progress``, per item ``response.output_item.added`` (+
``response.content_part.added``), its deltas, their ``.done`` events and ``response.output_item.done``, then
``response.completed`` / ``response.incomplete`` (or ``response.failed``). A custom tool's input comes in one
``response.custom_tool_call_input.delta`` when the call is complete (the engine writes it inside JSON)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_reader import CallArgs, CallStart, TextOut, ThinkingOut
from app.services.api.errors import ApiError
from app.services.api.replies import CollectedReply, Out
from app.services.api.responses_items import new_item_id
from app.services.api.responses_tools import ToolSet, custom_input


@dataclass
class ResponseHead:
    """What every body of one response shares: its id, time, model and the request's repeated fields."""

    model: str
    echo: dict[str, Any]
    logprobs: bool = False
    tools: ToolSet = field(default_factory=ToolSet)
    id: str = field(default_factory=lambda: new_item_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def body(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
             error: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "background": False, "error": error, "incomplete_details": incomplete, "model": self.model,
            "output": output, "usage": usage, **self.echo,
        }  # fmt: skip


def usage(stats: ReplyStats | None, reasoning_tokens: int) -> dict[str, Any]:
    prompt = stats.prompt_tokens if stats else 0
    output = stats.completion_tokens if stats else 0
    return {
        "input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, output)},
        "total_tokens": prompt + output,
    }  # fmt: skip


def status_of(finish_reason: str) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def error_body(error: ApiError) -> dict[str, Any]:
    code = "server_error" if error.status >= 500 else "invalid_prompt"
    return {"code": code, "message": error.message, "param": error.param}


# --- the whole response ----------------------------------------------------------------------------------------
def output_items(reply: CollectedReply, status: str, *, logprobs: bool, tools: ToolSet | None = None
                 ) -> list[dict[str, Any]]:  # fmt: skip
    items: list[dict[str, Any]] = []
    if reply.thinking:
        items.append(reasoning_item(new_item_id("rs"), reply.thinking, "completed"))
    if reply.text or not reply.calls:
        items.append(message_item(new_item_id("msg"), reply.text, status, reply.logprobs if logprobs else None))
    items += [call_item(c["id"], c["name"], c["arguments"], tools or ToolSet()) for c in reply.calls]
    return items


def call_item(call_id: str, engine_name: str, arguments: str, tools: ToolSet, item_id: str | None = None,
              status: str = "completed") -> dict[str, Any]:  # fmt: skip
    """The item for the model's call of ``engine_name``: a ``function_call``, or a ``custom_tool_call`` with the
    input string, named as the client named the tool (its namespace apart)."""
    called = tools.called(engine_name)
    where = {"namespace": called.namespace} if called.namespace else {}
    if called.kind == "custom":
        custom = {"id": item_id or new_item_id("ctc"), "type": "custom_tool_call", "status": status,
                  "call_id": call_id, "name": called.name, "input": custom_input(arguments)}  # fmt: skip
        return {**custom, **where}
    return {**function_call_item(item_id or new_item_id("fc"), call_id, called.name, arguments, status), **where}


def text_part(text: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def message_item(item_id: str, text: str | None, status: str, logprobs: list[dict[str, Any]] | None = None
                 ) -> dict[str, Any]:  # fmt: skip
    content = [] if text is None else [text_part(text, logprobs)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}  # fmt: skip


# --- the stream --------------------------------------------------------------------------------------------------
@dataclass
class _Open:
    """The output item being streamed: its kind, place, id and what it holds so far."""

    kind: str  # "message", "reasoning", "function_call" or "custom_tool_call"
    index: int
    id: str
    parts: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    call_id: str = ""
    name: str = ""


class ResponseEvents:
    """The events of one streamed response; ``output`` holds the items finished so far (what is stored)."""

    def __init__(self, head: ResponseHead) -> None:
        self.head = head
        self.output: list[dict[str, Any]] = []
        self._open: _Open | None = None
        self._sequence = 0

    def first(self) -> list[dict[str, Any]]:
        start = self.head.body("in_progress", [])
        return [self._event("response.created", response=start), self._event("response.in_progress", response=start)]

    def outs(self, outs: list[Out]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for out in outs:
            if isinstance(out, TextOut) and (out.text or out.logprobs):
                events += self._into("message")
                events.append(self._delta("response.output_text.delta", out.text, out.logprobs or []))
            elif isinstance(out, ThinkingOut) and out.text:
                events += self._into("reasoning")
                events.append(self._delta("response.reasoning_text.delta", out.text))
            elif isinstance(out, CallStart):
                custom = self.head.tools.called(out.name).kind == "custom"
                kind, prefix = ("custom_tool_call", "ctc") if custom else ("function_call", "fc")
                call = _Open(kind, len(self.output), new_item_id(prefix), call_id=out.id, name=out.name)
                events += self._close("completed") + self._begin(call)
            elif isinstance(out, CallArgs) and self._open is not None and self._open.kind == "custom_tool_call":
                self._open.parts.append(out.text)  # sent whole once complete: it is JSON until then
            elif isinstance(out, CallArgs) and self._open is not None and self._open.kind == "function_call":
                events.append(self._delta("response.function_call_arguments.delta", out.text))
            # RecastOut: what was streamed as text stays sent, as in chat completions' streams
        return events

    def last(self, finish_reason: str, stats: ReplyStats | None, reasoning_tokens: int) -> list[dict[str, Any]]:
        status = status_of(finish_reason)
        events = self._close(status)
        if not any(item["type"] in ("message", "function_call", "custom_tool_call") for item in self.output):
            events += self._into("message") + self._close(status)  # an empty answer is still an answer
        done = self.head.body(status, self.output, usage(stats, reasoning_tokens))
        return [*events, self._event(f"response.{status}", response=done)]

    def failed(self, error: ApiError) -> dict[str, Any]:
        body = self.head.body("failed", self.output, error=error_body(error))
        return self._event("response.failed", response=body)

    # --- items ---------------------------------------------------------------------------------------------------
    def _into(self, kind: str) -> list[dict[str, Any]]:
        if self._open is not None and self._open.kind == kind:
            return []
        prefix = {"message": "msg", "reasoning": "rs"}[kind]
        return self._close("completed") + self._begin(_Open(kind, len(self.output), new_item_id(prefix)))

    def _begin(self, item: _Open) -> list[dict[str, Any]]:
        self._open = item
        added = self._item(item, "in_progress", whole=False)
        events = [self._event("response.output_item.added", output_index=item.index, item=added)]
        if item.kind in ("message", "reasoning"):
            part = text_part("", None) if item.kind == "message" else {"type": "reasoning_text", "text": ""}
            events.append(self._on(item, "response.content_part.added", content_index=0, part=part))
        return events

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        text = "".join(item.parts)
        if item.kind == "function_call":
            called = self.head.tools.called(item.name)
            events = [self._on(item, "response.function_call_arguments.done", name=called.name, arguments=text)]
        elif item.kind == "custom_tool_call":
            given = custom_input(text)
            events = [self._on(item, "response.custom_tool_call_input.delta", delta=given)] if given else []
            events.append(self._on(item, "response.custom_tool_call_input.done", input=given))
        elif item.kind == "message":
            part = text_part(text, item.logprobs if self.head.logprobs else None)
            events = [self._on(item, "response.output_text.done", content_index=0, text=text, logprobs=item.logprobs),
                      self._on(item, "response.content_part.done", content_index=0, part=part)]  # fmt: skip
        else:
            part = {"type": "reasoning_text", "text": text}
            events = [self._on(item, "response.reasoning_text.done", content_index=0, text=text),
                      self._on(item, "response.content_part.done", content_index=0, part=part)]  # fmt: skip
        whole = self._item(item, status if item.kind == "message" else "completed", whole=True)
        self.output.append(whole)
        return [*events, self._event("response.output_item.done", output_index=item.index, item=whole)]

    def _item(self, item: _Open, status: str, *, whole: bool) -> dict[str, Any]:
        text = "".join(item.parts) if whole else None
        if item.kind in ("function_call", "custom_tool_call"):
            return call_item(item.call_id, item.name, text or "", self.head.tools, item.id, status)
        if item.kind == "reasoning":
            return reasoning_item(item.id, text, status)
        return message_item(item.id, text, status, item.logprobs if whole and self.head.logprobs else None)

    # --- events ----------------------------------------------------------------------------------------------------
    def _delta(self, kind: str, text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        item = self._open
        assert item is not None
        item.parts.append(text)
        if kind == "response.function_call_arguments.delta":
            return self._on(item, kind, delta=text)
        if logprobs is None:
            return self._on(item, kind, content_index=0, delta=text)
        item.logprobs += logprobs
        return self._on(item, kind, content_index=0, delta=text, logprobs=logprobs)

    def _on(self, item: _Open, kind: str, **fields: Any) -> dict[str, Any]:
        """An event about ``item``'s content (its one part, for a message or reasoning: ``content_index`` 0)."""
        return self._event(kind, item_id=item.id, output_index=item.index, **fields)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
