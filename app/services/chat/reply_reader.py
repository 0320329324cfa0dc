"""A chat reply read as it streams: its thinking apart from its answer (tags in the text, or thinking the engine
separated itself), told to the chat's observer piece by piece, and kept on the reply with its own figures.

Also what a chat's thinking choice becomes for the loaded model: only the switches its template (or engine)
offers are sent, so a model without them is asked nothing it would refuse."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from app.backends.protocol import Delta
from app.core.chat.conversation import Message, ReplyStats
from app.core.chat.reply_parser import (
    ContentDelta,
    ContentRecast,
    ParsedEvent,
    ReplyParser,
    ThinkingDelta,
    ToolCall,
)
from app.core.chat.thinking import ThinkingChoice
from app.core.chat.thinking_split import ReplySplit
from app.core.chat.tool_formats import ReplyConfig, ReplyFormat, random_call_ids
from app.core.chat.tool_use import CallPieces
from app.core.params import GenerationOptions
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.reply_formats import reply_parser, thinking_controls_for


class ReplyListener(Protocol):
    """What the reader tells as it reads (a ``ChatObserver`` is one)."""

    def reply_delta(self, text: str) -> None: ...

    def reply_thinking(self, text: str) -> None: ...

    def reply_recast(self, thinking: str) -> None: ...


async def thinking_options(host: EngineHost, engine: EngineKind, choice: ThinkingChoice) -> GenerationOptions | None:
    """The request options for ``choice`` on the model loaded on ``engine``; None when nothing is to be asked."""
    if not choice.chosen:
        return None
    controls = await thinking_controls_for(engine, host.loaded(engine))
    enabled = choice.enabled if controls.toggle else None
    effort = choice.effort if controls.effort else None
    if enabled is None and effort is None:
        return None
    return GenerationOptions(enable_thinking=enabled, reasoning_effort=effort)


class ReplyReader:
    """Reads one reply's pieces into ``reply`` (``apply()`` writes what was read so far onto it). A continued reply
    goes on with its answer: its text is all answer, after what it had."""

    def __init__(self, reply: Message, observer: ReplyListener, *, continuing: bool = False) -> None:
        self.reply = reply
        self._observer = observer
        self._before = reply.content if continuing else ""
        self._reasoning_before = reply.reasoning if continuing else ""
        self._continuing = continuing
        self._split = ReplySplit(ReplyParser(ReplyConfig(ReplyFormat.NONE, think=None)))
        self._parsed_calls: list[ToolCall] = []  # calls the parser found in the text (llama.cpp; never in thinking)
        self._engine_calls = CallPieces()  # calls the engine parsed itself (vLLM, Ollama)

    async def start(self, host: EngineHost, engine: EngineKind, options: GenerationOptions | None) -> None:
        """Read with the parser for the loaded model's replies (its thinking tags)."""
        if not self._continuing:
            parser = await reply_parser(engine, host.loaded(engine), options or GenerationOptions())
            self._split = ReplySplit(parser)

    def feed(self, delta: Delta) -> None:
        self._tell(self._split.feed(delta.text, delta.reasoning))
        for piece in delta.tool_calls or []:
            self._engine_calls.add(piece)

    @property
    def calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments JSON) of each tool call the reply made, in the order it made them."""
        parsed = [(c.id, c.name, c.arguments_json) for c in self._parsed_calls]
        return parsed + self._engine_calls.calls(random_call_ids(ReplyFormat.NONE))

    @property
    def engine_called(self) -> bool:
        """Whether the engine parsed calls itself (its stream does not say when a call is whole)."""
        return bool(self._engine_calls)

    def finish(self) -> None:
        self._tell(self._split.finish())

    @property
    def content(self) -> str:
        return self._before + self._split.content

    @property
    def thinking(self) -> str:
        return self._reasoning_before or self._split.thinking

    def apply(self) -> None:
        self.reply.content, self.reply.reasoning = self.content, self.thinking

    def stats(self, stats: ReplyStats | None) -> ReplyStats | None:
        """The engine's figures with the thinking's own."""
        if stats is None or self._continuing:
            return stats
        return replace(stats, thinking_ms=self._split.thinking_ms, thinking_tokens=self._split.thinking_tokens)

    def _tell(self, events: list[ParsedEvent]) -> None:
        for event in events:
            if isinstance(event, ThinkingDelta):
                self._observer.reply_thinking(event.text)
            elif isinstance(event, ContentDelta):
                self._observer.reply_delta(event.text)
            elif isinstance(event, ContentRecast):
                self._observer.reply_recast(event.thinking)
            elif isinstance(event, ToolCall):
                self._parsed_calls.append(event)
