"""A reply from the engine host turned into what both APIs render: text (with its logprobs), thinking, and tool
calls, read by the one reply reader (``app.core.chat.reply_reader``) that the chat uses too — so the API and the
chat give the same text, thinking and calls for the same stream. The server never runs a tool."""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from app.backends.protocol import Delta, ReplyHandle
from app.core.chat.conversation import ReplyStats
from app.core.chat.reply_parser import ReplyParser
from app.core.chat.reply_reader import ReadEvent, ReplyReader
from app.services.api.errors import ApiError

Out = ReadEvent


@dataclass
class CollectedReply:
    text: str = ""
    thinking: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments"}
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class ReplyRun:
    """``async for outs in run.steps()`` over a reply (the host's ``ReplyStream``): one list per engine delta
    (possibly empty, while the parser waits to see whether a tag begins), then what the end decides. ``parser``
    None: raw text (completions). ``want_logprobs``: a delta with text but no logprobs is an error, never ignored."""

    def __init__(
        self, stream: ReplyHandle, parser: ReplyParser | None, *, engine: str, want_logprobs: bool = False
    ) -> None:
        self.stream = stream
        self.reader = ReplyReader(parser)
        self._engine = engine
        self._want_logprobs = want_logprobs
        self._ended = False  # asked the engine to end the reply early

    @property
    def stats(self) -> ReplyStats | None:
        return self.stream.stats

    @property
    def finish_reason(self) -> str:
        """``length`` when the token limit ended the reply (even after whole calls: a cut one is dropped),
        else ``tool_calls`` when it made calls, else ``stop``."""
        if self._cut:
            return "length"
        return "tool_calls" if self.reader.calls else "stop"

    @property
    def _cut(self) -> bool:
        return self.stats is not None and self.stats.finish_reason == "length"

    async def steps(self) -> AsyncGenerator[list[Out], None]:
        async for delta in self.stream:
            yield self._read(delta)
        yield self.reader.finish(cut=self._cut)

    async def close(self) -> None:
        await self.stream.aclose()

    def _read(self, delta: Delta) -> list[Out]:
        if self._want_logprobs and delta.text and delta.logprobs is None:
            raise ApiError(
                400, f"The {self._engine} engine gave no logprobs for this model. Ask without 'logprobs', or use a "
                "model and engine that report them.", param="logprobs",
            )  # fmt: skip
        outs = self.reader.feed(delta)
        if self.reader.repeating and not self._ended:  # a call it made already: the model loops; end it here
            self._ended = True
            self.stream.stop()
        return outs


async def collect(
    run: ReplyRun, steps: AsyncIterator[list[Out]], first: Callable[[], None] | None = None
) -> CollectedReply:
    """The whole reply (non-streaming requests), as the reader read it; ``first`` is called at the first step."""
    async for _outs in steps:
        if first is not None:
            first()
            first = None
    reader = run.reader
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reader.calls]
    return CollectedReply(reader.content, reader.thinking, calls, list(reader.logprobs))


def new_call_id(prefix: str = "call_") -> str:
    return prefix + secrets.token_hex(12)  # 24 characters, as OpenAI's ids
