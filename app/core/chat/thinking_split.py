"""One reply's thinking and answer, split as its pieces arrive (the reply parser reads the tags), with the thinking's
duration and size. Apart from ``thinking`` (template switches) so that what runs at start-up does not load the
parser."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.core.chat.reply_parser import ContentDelta, ContentRecast, ParsedEvent, ReplyParser, ThinkingDelta, ToolCall


class ReplySplit:
    """One reply's thinking and answer from an engine's pieces: ``text`` read by the reply parser (thinking tags,
    tool calls), ``reasoning`` (thinking the engine separated itself: vLLM's ``reasoning_content``, Ollama's
    ``thinking``) taken as it is. Also measures the thinking: from its first piece to the answer's first (or the
    end), and the pieces it took (engines stream one token a piece)."""

    def __init__(self, parser: ReplyParser, clock: Callable[[], float] = time.monotonic) -> None:
        self._parser = parser
        self._clock = clock
        self._thinking: list[str] = []
        self._content: list[str] = []
        self._content_pieces = 0  # pieces that carried answer text (a recast makes them thinking)
        self._thinking_pieces = 0
        self._first: float | None = None  # the first piece that said anything
        self._started: float | None = None
        self._ended: float | None = None

    def feed(self, text: str, reasoning: str = "") -> list[ParsedEvent]:
        """The events of one piece, in order: its separated thinking first, then what its text holds."""
        events: list[ParsedEvent] = [ThinkingDelta(reasoning)] if reasoning else []
        if text:
            events += self._parser.feed(text)
        self._take(events)
        return events

    def finish(self) -> list[ParsedEvent]:
        events = self._parser.finish()
        self._take(events)
        if self._started is not None and self._ended is None:
            self._ended = self._clock()
        return events

    @property
    def thinking(self) -> str:
        return "".join(self._thinking).strip()

    @property
    def content(self) -> str:
        return "".join(self._content)

    @property
    def thinking_tokens(self) -> int:
        return self._thinking_pieces

    @property
    def thinking_ms(self) -> float | None:
        if self._started is None:
            return None
        end = self._ended if self._ended is not None else self._clock()
        return (end - self._started) * 1000

    def _take(self, events: list[ParsedEvent]) -> None:
        if events and self._first is None:
            self._first = self._clock()
        thought = answered = False
        for event in events:
            if isinstance(event, ThinkingDelta):
                self._thinking.append(event.text)
                thought = True
            elif isinstance(event, ContentRecast):
                self._thinking, self._content = [event.thinking], []
                self._thinking_pieces += self._content_pieces
                self._content_pieces = 0
                thought, answered = True, False
                self._started, self._ended = self._first, None
            elif isinstance(event, ContentDelta | ToolCall):
                if isinstance(event, ContentDelta):
                    self._content.append(event.text)
                answered = True
        if thought and self._started is None:
            self._started = self._clock()
        if answered and self._started is not None and self._ended is None:
            self._ended = self._clock()
        if thought and not answered:
            self._thinking_pieces += 1
        elif answered:
            self._content_pieces += 1
