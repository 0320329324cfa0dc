"""Anthropic Messages responses and stream events, in Anthropic's order: ``message_start``, then per content block
``content_block_start`` / ``content_block_delta``… / ``content_block_stop``, then ``message_delta`` (stop reason and
usage) and ``message_stop``; ``ping`` early on. Thinking blocks appear only when the request enabled thinking. A
reply ended by one of the request's ``stop_sequences`` says so (``stop_reason: "stop_sequence"`` and the string); one
ended by a stop string of the model's preset ends its turn, as the client sees it."""

from __future__ import annotations

from typing import Any

from app.core import safe_json
from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_reader import CallArgs, CallStart, TextOut, ThinkingOut
from app.services.api.replies import CollectedReply, Out, new_call_id

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}

Event = tuple[str, dict[str, Any]]  # (event name, data)


def stop_reason(finish_reason: str) -> str:
    return STOP_REASONS.get(finish_reason, "end_turn")


def stop_fields(finish_reason: str, stats: ReplyStats | None, stops: tuple[str, ...]) -> dict[str, Any]:
    """``stop_reason`` and ``stop_sequence``: the matched string when it is one the request asked to stop at."""
    matched = stats.stop_sequence if stats is not None and finish_reason == "stop" else None
    if matched is not None and matched in stops:
        return {"stop_reason": "stop_sequence", "stop_sequence": matched}
    return {"stop_reason": stop_reason(finish_reason), "stop_sequence": None}


def usage(stats: ReplyStats | None) -> dict[str, int]:
    if stats is None:
        return {"input_tokens": 0, "output_tokens": 0}
    return {"input_tokens": stats.prompt_tokens, "output_tokens": stats.completion_tokens}


def tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = safe_json.loads(arguments or "{}", what="the tool call's arguments")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message_body(model: str, reply: CollectedReply, finish_reason: str, stats: ReplyStats | None,
                 *, thinking: bool, stops: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    content: list[dict[str, Any]] = []
    if thinking and reply.thinking:
        content.append({"type": "thinking", "thinking": reply.thinking, "signature": ""})
    if reply.text or not reply.calls:
        content.append({"type": "text", "text": reply.text})
    content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": tool_input(c["arguments"])}
                for c in reply.calls]  # fmt: skip
    return {
        "id": new_call_id("msg_"), "type": "message", "role": "assistant", "model": model, "content": content,
        **stop_fields(finish_reason, stats, stops), "usage": usage(stats),
    }  # fmt: skip


class MessageEvents:
    """The events of one streamed message; blocks open and close as the reply's kind of output changes. ``stops``:
    the request's ``stop_sequences``."""

    def __init__(self, model: str, *, thinking: bool, stops: tuple[str, ...] = ()) -> None:
        self.id = new_call_id("msg_")
        self.model = model
        self.thinking = thinking
        self.stops = stops
        self._open: tuple[str, int] | None = None  # (block kind, its index); kind "tool:N" for call N
        self._blocks = 0
        self._tool_blocks: dict[int, int] = {}  # call index -> block index
        self.sent_text = False

    def first(self, input_tokens: int = 0) -> list[Event]:
        """``message_start`` (with the prompt's size, when it is known before the reply) and a ``ping``."""
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }  # fmt: skip
        return [("message_start", {"type": "message_start", "message": message}), ("ping", {"type": "ping"})]

    def outs(self, outs: list[Out]) -> list[Event]:
        events: list[Event] = []
        for out in outs:
            if isinstance(out, TextOut) and out.text:
                events += self._block("text", {"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": out.text}))
                self.sent_text = True
            elif isinstance(out, ThinkingOut) and self.thinking and out.text:
                events += self._block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                events.append(self._delta({"type": "thinking_delta", "thinking": out.text}))
            elif isinstance(out, CallStart):
                events += self._close()
                self._tool_blocks[out.index] = self._blocks
                events += self._block(f"tool:{out.index}", {"type": "tool_use", "id": out.id, "name": out.name,
                                                            "input": {}})  # fmt: skip
            elif isinstance(out, CallArgs) and out.text and out.index in self._tool_blocks:
                delta = {"type": "input_json_delta", "partial_json": out.text}
                block = self._tool_blocks[out.index]
                events.append(("content_block_delta", {"type": "content_block_delta", "index": block, "delta": delta}))
        return events

    def last(self, finish_reason: str, stats: ReplyStats | None) -> list[Event]:
        events = []
        if self._blocks == 0:  # an empty reply still has one (empty) text block
            events += self._block("text", {"type": "text", "text": ""})
        events += self._close()
        delta = stop_fields(finish_reason, stats, self.stops)
        events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage(stats)}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def _block(self, kind: str, start: dict[str, Any]) -> list[Event]:
        if self._open is not None and self._open[0] == kind:
            return []
        events = self._close()
        self._open = (kind, self._blocks)
        self._blocks += 1
        events.append(("content_block_start", {"type": "content_block_start", "index": self._open[1],
                                               "content_block": start}))  # fmt: skip
        return events

    def _delta(self, delta: dict[str, Any]) -> Event:
        assert self._open is not None
        return ("content_block_delta", {"type": "content_block_delta", "index": self._open[1], "delta": delta})

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        index = self._open[1]
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]
