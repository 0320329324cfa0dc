"""A reply from the engine host turned into what both APIs render: text (with its logprobs), thinking, and tool
calls. llama.cpp's raw text goes through the one reply parser (``app.core.chat.reply_parser``) in the model's
format; vLLM and Ollama parse calls themselves and their pieces pass through. The server never runs a tool."""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from app.backends.protocol import Delta
from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_parser import ContentDelta, ContentRecast, ParsedEvent, ReplyParser, ThinkingDelta, ToolCall
from app.services.api.errors import ApiError
from app.services.engines.replies import ReplyStream


@dataclass(frozen=True)
class TextOut:
    text: str
    logprobs: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ThinkingOut:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class CallArgs:
    index: int
    text: str  # a piece of the arguments' JSON text


@dataclass(frozen=True)
class RecastOut:
    """The text given so far was thinking (a closing tag with no opening one followed it): ``thinking`` is all of
    it. A whole reply takes it; a stream cannot take back what it sent, and goes on."""

    thinking: str


Out = TextOut | ThinkingOut | CallStart | CallArgs | RecastOut


@dataclass
class CollectedReply:
    text: str = ""
    thinking: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments"}
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class ReplyRun:
    """``async for outs in run.steps()``: one list per engine delta (possibly empty, while the parser waits to see
    whether a tag begins). ``parser`` None: raw text (completions, or engines that parse calls themselves and
    send no thinking tags). ``want_logprobs``: a delta with text but no logprobs is an error, never ignored."""

    def __init__(
        self, stream: ReplyStream, parser: ReplyParser | None, *, engine: str, want_logprobs: bool = False,
        still_loaded: Callable[[], bool] | None = None,
    ) -> None:  # fmt: skip
        self.stream = stream
        self._still_loaded = still_loaded
        self._began = False
        self._parser = parser
        self._engine = engine
        self._want_logprobs = want_logprobs
        self._pending_logprobs: list[dict[str, Any]] = []
        self._calls: dict[int, str] = {}  # index -> id, for calls an engine parsed
        self.call_count = 0
        self._answered = False  # some answer text was given
        self._thinking: list[str] = []

    @property
    def stats(self) -> ReplyStats | None:
        return self.stream.stats

    @property
    def finish_reason(self) -> str:
        engine = (self.stats.finish_reason if self.stats else None) or "stop"
        if self.call_count:
            return "tool_calls"
        return "length" if engine == "length" else "stop"

    async def steps(self) -> AsyncGenerator[list[Out], None]:
        async for delta in self.stream:
            yield self._convert(delta)
        yield self._finish()

    async def close(self) -> None:
        await self.stream.aclose()

    def _convert(self, delta: Delta) -> list[Out]:
        if not self._began:
            self._began = True
            if self._still_loaded is not None and not self._still_loaded():
                self.stream.stop()
                raise ApiError(503, "The model was switched (in the window) while this request waited for its turn; "
                                    "send the request again.", code="model_switched")  # fmt: skip
        if self._want_logprobs and delta.text and delta.logprobs is None:
            raise ApiError(
                400, f"The {self._engine} engine gave no logprobs for this model. Ask without 'logprobs', or use a "
                "model and engine that report them.", param="logprobs",
            )  # fmt: skip
        self._pending_logprobs += delta.logprobs or []
        outs: list[Out] = [self._thought(delta.reasoning)] if delta.reasoning else []
        if self._parser is None:
            if delta.text:
                outs.append(self._text(delta.text))
        else:
            outs += self._parsed(self._parser.feed(delta.text) if delta.text else [])
        for piece in delta.tool_calls or []:
            outs += self._engine_call(piece)
        return outs

    def _finish(self) -> list[Out]:
        outs: list[Out] = self._parsed(self._parser.finish()) if self._parser is not None else []
        if self._thinking and not self._answered and not self.call_count:
            outs.append(self._text("".join(self._thinking).strip()))  # all thinking (cut off): content never empty
        if self._pending_logprobs:
            outs.append(self._text(""))
        return outs

    def _thought(self, text: str) -> ThinkingOut:
        self._thinking.append(text)
        return ThinkingOut(text)

    def _parsed(self, events: list[ParsedEvent]) -> list[Out]:
        outs: list[Out] = []
        for event in events:
            if isinstance(event, ContentDelta):
                outs.append(self._text(event.text))
            elif isinstance(event, ThinkingDelta):
                outs.append(self._thought(event.text))
            elif isinstance(event, ContentRecast):
                self._thinking, self._answered = [event.thinking], False
                outs.append(RecastOut(event.thinking))
            elif isinstance(event, ToolCall):
                index = self.call_count
                self.call_count += 1
                outs += [CallStart(index, event.id, event.name), CallArgs(index, event.arguments_json)]
            # a ToolCallError stays content (the parser passed its text on already)
        return outs

    def _text(self, text: str) -> TextOut:
        self._answered = self._answered or bool(text.strip())
        logprobs, self._pending_logprobs = self._pending_logprobs or None, []
        return TextOut(text, logprobs)

    def _engine_call(self, piece: dict[str, Any]) -> list[Out]:
        given_index, given_id, function = piece.get("index"), piece.get("id"), piece.get("function")
        index = given_index if isinstance(given_index, int) else len(self._calls)
        if not isinstance(function, dict):
            function = {}
        outs: list[Out] = []
        if index not in self._calls:
            call_id = given_id if isinstance(given_id, str) and given_id else new_call_id()
            self._calls[index] = call_id
            self.call_count += 1
            outs.append(CallStart(index, call_id, str(function.get("name") or "")))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            outs.append(CallArgs(index, arguments))
        return outs


async def collect(steps: AsyncIterator[list[Out]], first: Callable[[], None] | None = None) -> CollectedReply:
    """The whole reply (non-streaming requests); ``first`` is called when the first step arrives."""
    reply = CollectedReply()
    text, thinking = [], []
    calls: dict[int, dict[str, Any]] = {}
    async for outs in steps:
        if first is not None:
            first()
            first = None
        for out in outs:
            if isinstance(out, TextOut):
                text.append(out.text)
                reply.logprobs += out.logprobs or []
            elif isinstance(out, ThinkingOut):
                thinking.append(out.text)
            elif isinstance(out, RecastOut):
                text, thinking = [], [out.thinking]
            elif isinstance(out, CallStart):
                calls[out.index] = {"id": out.id, "name": out.name, "arguments": ""}
            elif out.index in calls:
                calls[out.index]["arguments"] += out.text
    reply.text, reply.thinking = "".join(text), "".join(thinking)
    reply.calls = [calls[i] for i in sorted(calls)]
    return reply


def new_call_id(prefix: str = "call_") -> str:
    return prefix + secrets.token_hex(12)  # 24 characters, as OpenAI's ids
