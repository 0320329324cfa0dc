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
- A call the reply makes again, word for word, is no new call: it is dropped, and ``repeating`` says the model
  has begun to loop (the API ends such a reply there).
- A call cut off by the token limit (``finish(cut=True)``) is not answer text: it is kept apart as ``cut_call``.
- The answer's logprobs are its own tokens': their texts join to exactly the answer (a leading space the answer
  dropped, thinking, tags and calls are no part of them).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_parser import (
    ContentDelta,
    ContentRecast,
    ParsedEvent,
    ReplyParser,
    ThinkingDelta,
    ToolCall,
    ToolCallError,
)
from app.core.chat.tool_formats import CALL_TAGS, ReplyFormat, random_call_ids


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


@dataclass(frozen=True)
class CutCall:
    """A call the token limit cut off: its name when the reply got that far, and its text as written."""

    id: str
    name: str
    text: str

    @property
    def arguments(self) -> str:
        """What the reply wrote of its arguments (incomplete JSON)."""
        found = _ARGUMENTS.search(self.text)
        return self.text[found.end() :] if found else ""


_CALL_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


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
        self._tokens = _TokenTexts()
        self.logprobs: list[dict[str, Any]] = []  # the answer's, token by token
        self._new_id = random_call_ids(ReplyFormat.NONE)
        self._finished = False
        self._timing = _ThinkingTiming(clock)
        self.repeating = False  # the reply made a call it had made already
        self.cut_call: CutCall | None = None

    # --- reading ------------------------------------------------------------------------------------------------
    def feed(self, piece: ReplyPiece) -> list[ReadEvent]:
        """What one piece adds, in order: its separated thinking, what its text holds, the engine's call pieces."""
        self._tokens.add(piece.logprobs)
        events: list[ReadEvent] = [self._thought(piece.reasoning)] if piece.reasoning else []
        if piece.text:
            events += self._parsed(self._parser.feed(piece.text)) if self._parser else [self._text(piece.text)]
        for call in piece.tool_calls or []:
            events += self._engine_call(call)
        self._timing.take(events)
        return events

    def finish(self, *, cut: bool = False) -> list[ReadEvent]:
        """The end of the reply: what the parser held back (a partial tag) is decided now; ``cut``: the token limit
        ended it, so a call it was writing is no text (``cut_call``). Again: nothing."""
        if self._finished:
            return []
        self._finished = True
        parsed = self._parser.finish() if self._parser is not None else []
        events = self._parsed(self._without_cut_call(parsed) if cut else parsed)
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
                if self._made_before(event):
                    self.repeating = True
                else:
                    out += self._new_call(event.id, event.name, event.arguments_json)
            # a ToolCallError stays content: the parser passed its text on already
        return out

    def _made_before(self, call: ToolCall) -> bool:
        same = [c for c in self._calls if c.name == call.name]
        return bool(same) and any(_same_json(c.arguments, call.arguments_json) for c in same)

    def _without_cut_call(self, events: list[ParsedEvent]) -> list[ParsedEvent]:
        """The reply's last events without the call the token limit cut (the parser gave it back as text, then
        the error, then its held whitespace; or, cut inside its opening tag, the text it held back); the text
        before it keeps none of the whitespace before the call."""
        at = next((i for i in range(len(events) - 1, -1, -1) if isinstance(events[i], ToolCallError)), None)
        if at is None:
            return self._without_cut_tag(events)
        if at == 0 or not isinstance(before := events[at - 1], ContentDelta):
            return events
        error = events[at]
        assert isinstance(error, ToolCallError)
        written = error.text.strip()
        if not before.text.endswith(written):
            return events
        name = _CALL_NAME.search(written)
        self.cut_call = CutCall(self._new_id(len(self._calls)), json.loads(f'"{name[1]}"') if name else "", written)
        kept = before.text[: len(before.text) - len(written)].rstrip()
        rest = [e for e in events[at + 1 :] if not isinstance(e, ContentDelta)]
        return [*events[: at - 1], *([ContentDelta(kept)] if kept else []), *rest]

    def _without_cut_tag(self, events: list[ParsedEvent]) -> list[ParsedEvent]:
        last = next((i for i in range(len(events) - 1, -1, -1) if isinstance(events[i], ContentDelta)), -1)
        held = events[last] if last >= 0 else None
        if not isinstance(held, ContentDelta) or not (written := held.text.strip()):
            return events
        if not any(tag.startswith(written) for tags in CALL_TAGS.values() for tag in tags):
            return events
        kept = held.text[: held.text.rindex(written)].rstrip()  # no cut_call: nothing of the call itself was written
        return [*events[:last], *([ContentDelta(kept)] if kept else []), *events[last + 1 :]]

    def _text(self, text: str) -> TextOut:
        self._content.append(text)
        logprobs = self._tokens.take(text)
        self.logprobs += logprobs or []
        return TextOut(text, logprobs)

    def _thought(self, text: str) -> ThinkingOut:
        self._thinking.append(text)
        self._tokens.take(text)  # the thinking's tokens are no part of the answer's
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


def _same_json(a: str, b: str) -> bool:
    try:
        return bool(json.loads(a or "{}") == json.loads(b or "{}"))
    except ValueError:
        return a == b


class _TokenTexts:
    """The engine's logprob entries, whose token texts join to the raw text it sent, matched to the pieces read out
    of that text: each piece takes the entries its text came from, cut to it; entries of text between pieces (a
    dropped space, a tag, a call) are dropped."""

    def __init__(self) -> None:
        self._entries: list[dict[str, Any]] = []
        self._used = 0  # characters of the first entry's token already taken or passed over

    def add(self, entries: list[dict[str, Any]] | None) -> None:
        self._entries += entries or []

    def take(self, text: str) -> list[dict[str, Any]] | None:
        """The entries of ``text`` (None when there are none). An engine whose tokens do not spell its text gets
        its entries as they came."""
        if not self._entries or not text:
            return None
        tokens = [str(e.get("token", "")) for e in self._entries]
        raw = "".join(tokens)
        start = raw.find(text, self._used)
        if start < 0:
            taken, self._entries, self._used = self._entries, [], 0
            return taken
        end, taken, at = start + len(text), [], 0
        for index, (entry, token) in enumerate(zip(self._entries, tokens, strict=True)):
            after = at + len(token)
            if (after > start and at < end) or (not token and start <= at < end):
                part = raw[max(at, start) : min(after, end)]
                taken.append(entry if part == token else {**entry, "token": part, "bytes": list(part.encode())})
            if after > end or (after == end and token):  # the rest of this token (if any) may come later
                keep = index if after > end else index + 1
                self._entries, self._used = self._entries[keep:], end - at if after > end else 0
                return taken
            at = after
        self._entries, self._used = [], 0
        return taken


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
