"""A chat reply read into its message as it streams, by the one reply reader (``app.core.chat.reply_reader``) the
API server uses too: its thinking apart from its answer, its tool calls, told to the chat's observer piece by
piece and kept on the message with its figures."""

from __future__ import annotations

from typing import Protocol

from app.backends.protocol import Delta
from app.core.chat.conversation import Message, ReplyStats
from app.core.chat.reply_parser import ReplyParser
from app.core.chat.reply_reader import ReadEvent, RecastOut, ReplyReader, TextOut, ThinkingOut
from app.core.chat.tool_formats import ReplyConfig, ReplyFormat
from app.core.params import GenerationOptions
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.reply_formats import reply_parser


class ReplyListener(Protocol):
    """What the reply tells as it is read (a ``ChatObserver`` is one)."""

    def reply_delta(self, text: str) -> None: ...

    def reply_thinking(self, text: str) -> None: ...

    def reply_recast(self, thinking: str) -> None: ...


class MessageReply:
    """Reads one reply's pieces for ``reply`` (``apply()`` writes what was read so far onto it). A continued reply
    goes on with its answer: its text is all answer, after what it had."""

    def __init__(self, reply: Message, observer: ReplyListener, *, continuing: bool = False) -> None:
        self.reply = reply
        self._observer = observer
        self._before = reply.content if continuing else ""
        self._reasoning_before = reply.reasoning if continuing else ""
        self._continuing = continuing
        self.reader = ReplyReader(ReplyParser(ReplyConfig(ReplyFormat.NONE, think=None)))

    async def start(self, host: EngineHost, engine: EngineKind, options: GenerationOptions | None) -> None:
        """Read with the parser for the loaded model's replies (its thinking tags, its tool-call format)."""
        if not self._continuing:
            self.reader = ReplyReader(await reply_parser(engine, host.loaded(engine), options or GenerationOptions()))

    def feed(self, delta: Delta) -> None:
        self._tell(self.reader.feed(delta))

    def finish(self, *, cut: bool = False) -> None:
        """The end of the reply; ``cut``: the token limit ended it (a call it was writing is a cut call, not text)."""
        self._tell(self.reader.finish(cut=cut))

    @property
    def calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments JSON) of each tool call the reply made, in the order it made them; last the call
        the token limit cut, if any (never run: its arguments are incomplete, so none are given)."""
        calls = [(c.id, c.name, c.arguments) for c in self.reader.calls]
        if (cut := self.reader.cut_call) is not None:
            calls.append((cut.id, cut.name, "{}"))
        return calls

    @property
    def engine_called(self) -> bool:
        return self.reader.engine_called

    @property
    def last_call_cut(self) -> bool:
        """Whether the last call may be incomplete: the token limit cut it (or the engine streamed it then)."""
        return self.reader.cut_call is not None or self.reader.engine_called

    @property
    def content(self) -> str:
        return self._before + self.reader.content

    @property
    def thinking(self) -> str:
        return self._reasoning_before or self.reader.thinking

    def apply(self) -> None:
        self.reply.content, self.reply.reasoning = self.content, self.thinking

    def stats(self, stats: ReplyStats | None) -> ReplyStats | None:
        """The engine's figures with the thinking's own (a continued reply keeps its first part's)."""
        return stats if self._continuing else self.reader.figures(stats)

    def _tell(self, events: list[ReadEvent]) -> None:
        for event in events:
            if isinstance(event, ThinkingOut):
                self._observer.reply_thinking(event.text)
            elif isinstance(event, TextOut) and event.text:
                self._observer.reply_delta(event.text)
            elif isinstance(event, RecastOut):
                self._observer.reply_recast(event.thinking)
