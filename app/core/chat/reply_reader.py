"""One engine reply read as its pieces arrive: the one reader the chat, the API server and the batch runner share.
It turns any engine's stream of pieces into the answer's text (with its logprobs), the thinking, the tool calls and
the thinking's figures, and says what each piece added (``ReadEvent``) for a caller that shows or sends it at once.

Engines differ only in where things are: llama.cpp's raw text holds thinking tags and tool calls, found by the
reply parser in the model's format; vLLM and Ollama separate thinking themselves (``reasoning``) and parse calls
(``tool_calls``: OpenAI's streaming pieces), taken as they are.

Decided once, for every reader:

- A reply that is all thinking (cut off before its answer, or a model that never closed its thinking) keeps it as
  thinking and has an empty answer, as vLLM, llama.cpp's server and OpenAI's reasoning models answer; the finish
  reason says why. Nothing is shown twice, and the chat's "no answer to continue" stays true.
- A call's arguments are JSON text; arguments an engine gives as an object are written as JSON, as given.
- Calls are numbered 0, 1, … in the order the reply made them; a call given no id gets a fresh ``call_…`` one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_parser import ContentDelta, ContentRecast, ParsedEvent, ReplyParser, ThinkingDelta, ToolCall
from app.core.chat.tool_formats import ReplyFormat, random_call_ids


class ReplyPiece(Protocol):
    """One piece of an engine's reply (``app.backends.protocol.Delta`` is one)."""

    @property
    def text(self) -> str: ...

    @property
    def reasoning(self) -> str: ...

    @property
    def tool_calls(self) -> list[dict[str, Any]] | None: ...

    @property
    def logprobs(self) -> list[dict[str, Any]] | None: ...


@dataclass(frozen=True)
class TextOut:
    """Answer text, with the logprobs of the tokens up to it."""

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


ReadEvent = TextOut | ThinkingOut | CallStart | CallArgs | RecastOut


@dataclass(frozen=True)
class ReadCall:
    id: str
    name: str
    arguments: str  # JSON text ("{}" when the reply gave none)


@dataclass
class _Call:
    id: str
    name: str
    arguments: str = ""


class ReplyReader:
    """Reads one reply: ``feed(piece)`` and at the end ``finish()`` return what each added; ``content``,
    ``thinking`` and ``calls`` are the reply so far. ``parser`` None: the text is all answer (a raw completion)."""

    def __init__(self, parser: ReplyParser | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._parser = parser
        self._clock = clock
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[_Call] = []
        self._engine_calls: dict[int, int] = {}  # the engine's call index -> ours
        self._pending_logprobs: list[dict[str, Any]] = []
        self.logprobs: list[dict[str, Any]] = []  # the answer's, token by token
        self._new_id = random_call_ids(ReplyFormat.NONE)
        self._finished = False
        self._timing = _ThinkingTiming(clock)

    # --- reading ------------------------------------------------------------------------------------------------
    def feed(self, piece: ReplyPiece) -> list[ReadEvent]:
        """What one piece adds, in order: its separated thinking, what its text holds, the engine's call pieces."""
        self._pending_logprobs += piece.logprobs or []
        events: list[ReadEvent] = [self._thought(piece.reasoning)] if piece.reasoning else []
        if piece.text:
            events += self._parsed(self._parser.feed(piece.text)) if self._parser else [self._text(piece.text)]
        for call in piece.tool_calls or []:
            events += self._engine_call(call)
        self._timing.take(events)
        return events

    def finish(self) -> list[ReadEvent]:
        """The end of the reply: what the parser held back (a partial tag) is decided now. Again: nothing."""
        if self._finished:
            return []
        self._finished = True
        events = self._parsed(self._parser.finish()) if self._parser is not None else []
        if self._pending_logprobs:
            events.append(self._text(""))
        self._timing.take(events)
        self._timing.end()
        return events

    # --- the reply ------------------------------------------------------------------------------------------------
    @property
    def content(self) -> str:
        return "".join(self._content)

    @property
    def thinking(self) -> str:
        return "".join(self._thinking).strip()

    @property
    def calls(self) -> list[ReadCall]:
        return [ReadCall(c.id, c.name, c.arguments or "{}") for c in self._calls]

    @property
    def engine_called(self) -> bool:
        """Whether the engine parsed calls itself (its stream does not say when a call is whole)."""
        return bool(self._engine_calls)

    @property
    def thinking_tokens(self) -> int:
        return self._timing.thinking_pieces

    @property
    def thinking_ms(self) -> float | None:
        return self._timing.ms()

    def figures(self, stats: ReplyStats | None) -> ReplyStats | None:
        """The engine's figures for the reply with the thinking's own."""
        if stats is None:
            return None
        return replace(stats, thinking_ms=self.thinking_ms, thinking_tokens=self.thinking_tokens)

    # --- internals ------------------------------------------------------------------------------------------------
    def _parsed(self, events: list[ParsedEvent]) -> list[ReadEvent]:
        out: list[ReadEvent] = []
        for event in events:
            if isinstance(event, ContentDelta):
                out.append(self._text(event.text))
            elif isinstance(event, ThinkingDelta):
                out.append(self._thought(event.text))
            elif isinstance(event, ContentRecast):
                self._thinking, self._content = [event.thinking], []
                out.append(RecastOut(event.thinking))
            elif isinstance(event, ToolCall):
                out += self._new_call(event.id, event.name, event.arguments_json)
            # a ToolCallError stays content: the parser passed its text on already
        return out

    def _text(self, text: str) -> TextOut:
        self._content.append(text)
        logprobs, self._pending_logprobs = self._pending_logprobs or None, []
        self.logprobs += logprobs or []
        return TextOut(text, logprobs)

    def _thought(self, text: str) -> ThinkingOut:
        self._thinking.append(text)
        return ThinkingOut(text)

    def _new_call(self, call_id: str, name: str, arguments: str = "") -> list[ReadEvent]:
        index = len(self._calls)
        self._calls.append(_Call(call_id or self._new_id(index), name))
        out: list[ReadEvent] = [CallStart(index, self._calls[index].id, name)]
        return out + self._arguments(index, arguments)

    def _arguments(self, index: int, text: str) -> list[ReadEvent]:
        if not text:
            return []
        self._calls[index].arguments += text
        return [CallArgs(index, text)]

    def _engine_call(self, piece: dict[str, Any]) -> list[ReadEvent]:
        """One of an engine's call pieces (``{"index", "id"?, "function": {"name"?, "arguments"?}}``): the first
        of an index begins the call, later ones add to its arguments."""
        given, function = piece.get("index"), piece.get("function")
        key = given if isinstance(given, int) else len(self._engine_calls)
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # Ollama's own shape
            arguments = json.dumps(arguments, ensure_ascii=False)
        arguments = arguments if isinstance(arguments, str) else ""
        if key in self._engine_calls:
            index = self._engine_calls[key]
            if not self._calls[index].name and isinstance(function.get("name"), str):
                self._calls[index].name = function["name"]
            return self._arguments(index, arguments)
        self._engine_calls[key] = len(self._calls)
        call_id = piece.get("id")
        return self._new_call(call_id if isinstance(call_id, str) else "", str(function.get("name") or ""), arguments)


class _ThinkingTiming:
    """How long the thinking took, from its first piece to the answer's first (or the end), and the pieces it took
    (engines stream one token a piece); after a recast the pieces read as answer count as thinking."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.thinking_pieces = 0
        self._answer_pieces = 0
        self._first: float | None = None  # the first piece that said anything
        self._started: float | None = None
        self._ended: float | None = None

    def take(self, events: list[ReadEvent]) -> None:
        if events and self._first is None:
            self._first = self._clock()
        thought = answered = False
        for event in events:
            if isinstance(event, ThinkingOut):
                thought = True
            elif isinstance(event, RecastOut):
                self.thinking_pieces += self._answer_pieces
                self._answer_pieces = 0
                thought, answered = True, False
                self._started, self._ended = self._first, None
            elif isinstance(event, CallStart) or (isinstance(event, TextOut) and event.text):
                answered = True
        if thought and self._started is None:
            self._started = self._clock()
        if answered and self._started is not None and self._ended is None:
            self._ended = self._clock()
        if thought and not answered:
            self.thinking_pieces += 1
        elif answered:
            self._answer_pieces += 1

    def end(self) -> None:
        if self._started is not None and self._ended is None:
            self._ended = self._clock()

    def ms(self) -> float | None:
        if self._started is None:
            return None
        end = self._ended if self._ended is not None else self._clock()
        return (end - self._started) * 1000
