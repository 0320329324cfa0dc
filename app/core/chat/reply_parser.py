"""One reply parser: a model's output, streamed or whole, split into thinking, content and tool calls.

``ReplyParser.feed(text)`` takes text deltas as they arrive and returns events (``ThinkingDelta``,
``ContentDelta``, ``ToolCall``, ``ToolCallError``); ``finish()`` ends the reply; ``reply`` sums it up. Tags may
be split across deltas: only the shortest tail that could still become a tag is held back, and released as
soon as it cannot. A tool call is emitted once it is complete. Thinking is never scanned for calls. A call
written wrongly stays content, with a ``ToolCallError`` that says why; nothing here raises on a model's output.
Feeding a text in any chunks gives the same result as feeding it whole (``parse_reply``).

A closing tag with no opening one (the prompt opened the block, or the model skipped the tag) makes everything
before it thinking: ``ContentRecast`` tells a streaming consumer that the content it was given so far was thinking.
Thinking that never closes stays thinking (``thinking_unclosed``).

Whitespace: a channel's leading whitespace after a boundary (reply start, ``</think>``, a call) is dropped, and
so is its trailing whitespace before a boundary (held back meanwhile: at most ``MAX_HELD_SPACE`` characters).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from app.core.chat.tool_formats import (
    BARE_CALL_STARTS,
    CALL_TAGS,
    CallScanner,
    ReplyConfig,
    ReplyFormat,
    call_scanner,
    random_call_ids,
)

MAX_HELD_SPACE = 64


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments_json: str  # a JSON object, as OpenAI's ``function.arguments``
    index: int  # 0, 1, … in the order the model wrote them


@dataclass(frozen=True)
class ToolCallError:
    """Text that was meant as a tool call but is not one; it stays content."""

    reason: str
    text: str


@dataclass(frozen=True)
class ContentRecast:
    """A closing tag with no opening one ended the reply's first stretch: the content given so far was thinking.
    ``thinking`` is the whole thinking now (it replaces that content; later content follows as usual)."""

    thinking: str


ParsedEvent = ThinkingDelta | ContentDelta | ToolCall | ToolCallError | ContentRecast


@dataclass(frozen=True)
class ParsedReply:
    thinking: str = ""
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    errors: tuple[ToolCallError, ...] = ()
    thinking_unclosed: bool = False  # the reply ended inside its thinking (cut off, or it never closed)
    stray_think_close: bool = False  # a closing tag with no opening one: what came before it became thinking


class _Channel:
    """Thinking or content: what was emitted, and trailing whitespace held until it is known to be kept."""

    def __init__(self, event: Callable[[str], ThinkingDelta | ContentDelta]) -> None:
        self._event = event
        self._parts: list[str] = []
        self._space = ""
        self.started = False  # something other than whitespace since the last boundary

    def push(self, text: str, out: list[ParsedEvent]) -> None:
        if not self.started:
            text = text.lstrip()
            if not text:
                return
            self.started = True
        text = self._space + text
        body = text.rstrip()
        if len(text) - len(body) > MAX_HELD_SPACE:
            body = text[: len(text) - MAX_HELD_SPACE]
        self._space = text[len(body) :]
        self._emit(body, out)

    def boundary(self) -> None:
        """A tag or call ends this stretch: held whitespace is dropped, the next stretch starts afresh."""
        self._space, self.started = "", False

    def flush(self, out: list[ParsedEvent]) -> None:
        self._emit(self._space, out)
        self._space = ""

    def _emit(self, text: str, out: list[ParsedEvent]) -> None:
        if text:
            self._parts.append(text)
            out.append(self._event(text))

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def take(self) -> str:
        """Everything emitted and held, removed from this channel (its next stretch starts afresh)."""
        text = "".join(self._parts) + self._space
        self._parts, self._space, self.started = [], "", False
        return text

    def adopt(self, text: str) -> None:
        """``text`` becomes this channel's (already told to the consumer in another form)."""
        if text:
            self._parts.append(text)


class _State(Enum):
    CONTENT = "content"
    THINKING = "thinking"
    CALL = "call"


class ReplyParser:
    """Streaming parser for one reply. ``call_ids(index)`` names calls the model gave no id (random by default)."""

    def __init__(
        self, config: ReplyConfig | ReplyFormat = ReplyFormat.NONE, *, call_ids: Callable[[int], str] | None = None
    ) -> None:
        self._config = config if isinstance(config, ReplyConfig) else ReplyConfig(tools=config)
        self._call_ids = call_ids or random_call_ids(self._config.tools)
        think = self._config.think
        self._content_tags = CALL_TAGS[self._config.tools] + ((think.close,) if think else ())
        self._state = _State.THINKING if think and self._config.prompt_opens_think else _State.CONTENT
        self._fresh = self._state is _State.CONTENT  # nothing read yet: a thinking block may open
        self._think_seen = not self._fresh  # a block opened (here or in the prompt): a closing tag is no stray
        self._after_json_call = False  # Llama 3 separates parallel calls with ";"
        self._thinking, self._content = _Channel(ThinkingDelta), _Channel(ContentDelta)
        self._buf = ""
        self._raw = ""  # the call being read, from its opening tag on
        self._scanner: CallScanner | None = None
        self._calls: list[ToolCall] = []
        self._errors: list[ToolCallError] = []
        self._thinking_unclosed = self._stray_close = self._finished = False
        self._out: list[ParsedEvent] = []

    def feed(self, text: str) -> list[ParsedEvent]:
        if self._finished:
            raise RuntimeError("this reply has already finished; start a new parser for the next one")
        self._buf += text
        return _merged(self._run(final=False))

    def finish(self) -> list[ParsedEvent]:
        """End of the reply: whatever was held back is decided now. Calling it again returns nothing."""
        if self._finished:
            return []
        out = self._run(final=True)
        if self._state is _State.THINKING:
            self._thinking_unclosed = True
            self._thinking.boundary()
        self._content.flush(out)
        self._finished = True
        return _merged(out)

    @property
    def reply(self) -> ParsedReply:
        """What was parsed so far; the whole reply once ``finish()`` was called."""
        return ParsedReply(
            self._thinking.text,
            self._content.text,
            tuple(self._calls),
            tuple(self._errors),
            self._thinking_unclosed,
            self._stray_close,
        )

    def _run(self, final: bool) -> list[ParsedEvent]:
        self._out = []
        while self._step(final):
            pass
        return self._out

    def _step(self, final: bool) -> bool:
        """Read what can be decided; True when the state changed and there may be more to read."""
        if self._state is _State.THINKING:
            return self._step_thinking(final)
        if self._state is _State.CALL:
            return self._step_call(final)
        return self._step_content(final)

    def _step_thinking(self, final: bool) -> bool:
        assert self._config.think is not None
        close = self._config.think.close
        at = self._buf.find(close)
        if at < 0:
            self._pass_on(self._thinking, (close,), final)
            return False
        self._thinking.push(self._buf[:at], self._out)
        self._thinking.boundary()
        self._buf = self._buf[at + len(close) :]
        self._state = _State.CONTENT
        return True

    def _step_content(self, final: bool) -> bool:
        if not self._content.started:
            started = self._stretch_start(final)
            if started is not None:
                return started
        tag, at = _first_tag(self._buf, self._content_tags)
        if tag is None:
            self._pass_on(self._content, self._content_tags, final)
            return False
        self._to_content(self._buf[:at])
        self._buf = self._buf[at + len(tag) :]
        self._fresh = False
        if self._config.think and tag == self._config.think.close:
            self._stray_close = True
            self._recast()
        else:
            self._start_call(tag)
        return True

    def _recast(self) -> None:
        """A closing tag with no opening one: the content before it was thinking, unless the reply already had
        thinking or calls, or that content opens a tag itself (a model writing about tags)."""
        think = self._config.think
        assert think is not None
        if self._think_seen or self._calls or self._errors or think.open in self._content.text:
            return
        self._think_seen = True
        thinking = self._content.take().strip()
        self._thinking.adopt(thinking)
        self._out.append(ContentRecast(thinking))

    def _stretch_start(self, final: bool) -> bool | None:
        """At the start of content: skip whitespace, then open a thinking block or a bare JSON call if one starts
        here. True: it did (the state changed); False: more text is needed to tell; None: plain content."""
        buf = self._buf.lstrip()
        while self._after_json_call and buf.startswith(";"):
            buf = buf[1:].lstrip()
        self._buf = buf
        if not buf:
            return False
        think = self._config.think
        if self._fresh and think:
            if buf.startswith(think.open):
                self._buf, self._fresh, self._state = buf[len(think.open) :], False, _State.THINKING
                self._think_seen = True
                return True
            if not final and think.open.startswith(buf):
                return False
        if buf[0] not in BARE_CALL_STARTS.get(self._config.tools, ""):
            return None
        if any(buf.startswith(tag) for tag in self._content_tags):
            return None  # "[TOOL_CALLS]" starts with "[" too
        if not final and any(tag.startswith(buf) for tag in self._content_tags):
            return False
        self._start_call(None)
        return True

    def _start_call(self, tag: str | None) -> None:
        self._state, self._fresh = _State.CALL, False
        self._scanner = call_scanner(self._config.tools, tag)
        self._raw = tag or ""

    def _step_call(self, final: bool) -> bool:
        assert self._scanner is not None
        raw, self._raw = self._raw, ""
        raw += self._buf  # a local, so CPython grows the string in place: long calls stay linear
        self._raw, self._buf = raw, ""
        scan = self._scanner.advance(raw, final)
        if scan is None:
            return False
        self._raw, self._scanner, self._state = "", None, _State.CONTENT
        self._buf = raw[scan.end :]
        if scan.calls:
            self._content.boundary()
            self._after_json_call = self._config.tools is ReplyFormat.LLAMA3_JSON
            for call in scan.calls:
                index = len(self._calls)
                parsed = ToolCall(call.id or self._call_ids(index), call.name, call.arguments_json, index)
                self._calls.append(parsed)
                self._out.append(parsed)
        else:
            self._to_content(raw[: scan.end])
            if scan.error:
                error = ToolCallError(scan.error, raw[: scan.end])
                self._errors.append(error)
                self._out.append(error)
        return True

    def _to_content(self, text: str) -> None:
        self._content.push(text, self._out)
        if self._content.started:
            self._fresh = self._after_json_call = False

    def _pass_on(self, channel: _Channel, tags: tuple[str, ...], final: bool) -> None:
        """No tag in the buffer: pass it on, but for a tail that may still become one of ``tags``."""
        keep = 0 if final else _partial_tag_len(self._buf, tags)
        cut = len(self._buf) - keep
        if channel is self._content:
            self._to_content(self._buf[:cut])
        else:
            channel.push(self._buf[:cut], self._out)
        self._buf = self._buf[cut:]


def _first_tag(text: str, tags: tuple[str, ...]) -> tuple[str | None, int]:
    best: tuple[str | None, int] = (None, len(text))
    for tag in tags:
        at = text.find(tag)
        if at >= 0 and (at < best[1] or (at == best[1] and best[0] is not None and len(tag) > len(best[0]))):
            best = (tag, at)
    return best


def _partial_tag_len(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that is the start of a tag (the least that must wait)."""
    most = max((len(tag) for tag in tags), default=1) - 1
    tail = text[max(0, len(text) - most) :] if most else ""
    firsts = "".join(tag[0] for tag in tags)
    for start, char in enumerate(tail):
        if char in firsts and any(tag.startswith(tail[start:]) for tag in tags):
            return len(tail) - start
    return 0


def _merged(events: list[ParsedEvent]) -> list[ParsedEvent]:
    """Adjacent deltas of one kind as one."""
    out: list[ParsedEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, ThinkingDelta) and isinstance(last, ThinkingDelta):
            out[-1] = ThinkingDelta(last.text + event.text)
        elif isinstance(event, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + event.text)
        else:
            out.append(event)
    return out


def parse_reply(
    text: str, config: ReplyConfig | ReplyFormat = ReplyFormat.NONE, *, call_ids: Callable[[int], str] | None = None
) -> ParsedReply:
    """A whole reply at once: the same result as feeding it to a ``ReplyParser`` in any chunks."""
    parser = ReplyParser(config, call_ids=call_ids)
    parser.feed(text)
    parser.finish()
    return parser.reply
