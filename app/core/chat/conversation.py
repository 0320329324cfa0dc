"""The chat data model: messages, their status and the figures measured for each reply."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from app.core.chat.tool_use import ChatTools, ToolUse, calls_for_prompt, tool_prompt_messages
from app.core.documents.citations import ChatDocument, Source
from app.core.units import format_tokens_per_s


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class MessageStatus(StrEnum):
    COMPLETE = "complete"
    STREAMING = "streaming"  # being generated; found again after a crash it becomes INTERRUPTED
    STOPPED = "stopped"  # the user pressed Stop: partial reply kept
    FAILED = "failed"  # the engine failed mid-reply: partial reply kept
    INTERRUPTED = "interrupted"  # the app died mid-reply: partial reply kept

    @property
    def is_partial(self) -> bool:
        return self in (MessageStatus.STOPPED, MessageStatus.FAILED, MessageStatus.INTERRUPTED)


@dataclass
class ReplyStats:
    """Figures for one generated reply, measured where the app sees the tokens."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: float | None = None
    decode_tokens_per_s: float | None = None
    total_ms: float | None = None
    finish_reason: str | None = None
    thinking_ms: float | None = None  # from the first thinking token to the answer's first (or the end)
    thinking_tokens: int = 0
    stop_sequence: str | None = None  # the stop string that ended the reply, when one did
    spec_mode: str | None = None  # speculative decoding used for the reply ("ngram", "draft"); None: none
    spec_drafted: int = 0  # draft tokens proposed
    spec_accepted: int = 0  # draft tokens the model accepted (acceptance = accepted / drafted)
    # a speculative reply's decode tok/s over the median of this model's replies without it (None: no such reply yet)
    spec_speedup: float | None = None
    cached_prompt_tokens: int = 0  # prompt tokens the engine found in its cache (a kept prefix), not computed again

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ReplyStats | None:
        if not data:
            return None
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary(self) -> str:
        parts = [f"{self.completion_tokens} tokens"]
        if self.decode_tokens_per_s:
            parts.append(format_tokens_per_s(self.decode_tokens_per_s))
        if self.ttft_ms is not None:
            parts.append(f"first token {self.ttft_ms:.0f} ms")
        parts.append(f"prompt {self.prompt_tokens} tokens")
        if self.cached_prompt_tokens:
            parts[-1] += f" ({self.cached_prompt_tokens} reused)"
        if self.thinking_ms is not None:
            parts.append(f"thought {self.thinking_ms / 1000:.1f} s ({self.thinking_tokens} tokens)")
        return " · ".join(parts)


@dataclass(frozen=True)
class Attachment:
    """A file sent with a message (today: an image), kept in the app's attachments folder under ``path``."""

    kind: str  # "image"
    path: str  # relative to the attachments folder (content-addressed, e.g. "ab/ab12….png")
    mime: str
    name: str = ""  # the name the user's file had
    width: int = 0
    height: int = 0
    size: int = 0  # bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attachment:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Message:
    role: Role
    content: str
    status: MessageStatus = MessageStatus.COMPLETE
    id: int | None = None
    model: str | None = None
    backend: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    stats: ReplyStats | None = None
    error: str | None = None
    reasoning: str = ""  # the model's thinking, kept apart from ``content`` (which never holds <think> tags)
    attachments: list[Attachment] = field(default_factory=list)
    tool_calls: list[ToolUse] = field(default_factory=list)  # a reply's tool calls, in order, with their results
    # the other versions of this place (regenerated replies, edited questions), each with the messages that came
    # after it, and the slot of this one among them: see app.core.chat.versions
    versions: list[list[Message]] = field(default_factory=list, repr=False)
    version: int = 0
    sources: list[Source] = field(default_factory=list)  # a reply's numbered document sources ([1], [2]…)

    def as_prompts(self, attachments_dir: str = "") -> list[dict[str, Any]]:
        """The message as a model is sent it (``as_prompt``), followed by one ``tool`` message per tool call."""
        if not self.tool_calls:
            return [self.as_prompt(attachments_dir)]
        return [self.as_prompt(attachments_dir), *tool_prompt_messages(self.tool_calls)]

    @property
    def sent(self) -> bool:
        """Whether the message is sent to a model (an empty reply that called no tool is not)."""
        return bool(self.content or self.role is Role.USER or self.tool_calls)

    def as_prompt(self, attachments_dir: str = "") -> dict[str, Any]:
        """The message as a model is sent it: the answer as ``content``; a reply's thinking apart, as
        ``reasoning_content``, which only a chat template that reads it shows the model again. With
        ``attachments_dir`` (absolute), its images follow the text as OpenAI content parts (``file:`` URLs)."""
        prompt: dict[str, Any] = {"role": str(self.role), "content": self.content}
        images = [a for a in self.attachments if a.kind == "image"] if attachments_dir else []
        if images:
            text = [{"type": "text", "text": self.content}] if self.content else []
            urls = [Path(attachments_dir, a.path).as_uri() for a in images]
            prompt["content"] = text + [{"type": "image_url", "image_url": {"url": url}} for url in urls]
        if self.reasoning and self.role is Role.ASSISTANT:
            prompt["reasoning_content"] = self.reasoning
        if self.tool_calls:
            prompt["tool_calls"] = calls_for_prompt(self.tool_calls)
        return prompt


class OverflowPolicy(StrEnum):
    """What a chat does when its history no longer fits the model's context."""

    DROP_OLDEST = "drop_oldest"  # the default: drop the oldest turns, keep the system prompt
    TRUNCATE_MIDDLE = "truncate_middle"  # keep the first and the latest turns, drop those between
    STOP = "stop"  # refuse to send; the user decides


@dataclass
class Conversation:
    title: str = "New chat"
    system_prompt: str = ""
    messages: list[Message] = field(default_factory=list)
    id: int | None = None
    updated_at: float = 0.0
    forked_from: int | None = None  # the chat this one was forked from (it may since have been deleted)
    forked_at: int | None = None  # the 1-based index, in that chat, of the last message the fork copied
    pinned: bool = False
    folder: str = ""  # "" = no folder
    overflow: OverflowPolicy = OverflowPolicy.DROP_OLDEST
    tools: ChatTools = field(default_factory=ChatTools)  # the MCP tools this chat may use, and those it always runs
    documents: list[ChatDocument] = field(default_factory=list)  # files, folders, collections the chat answers from
    attachments_dir: str = field(default="", repr=False, compare=False)  # where its images are (set by the app)

    def prompt_messages(self) -> list[dict[str, Any]]:
        """The messages sent to a model: the system prompt, then every non-empty turn (images as content parts)."""
        out: list[dict[str, Any]] = []
        if self.system_prompt.strip():
            out.append({"role": "system", "content": self.system_prompt})
        for message in self.messages:
            if message.sent:
                out.extend(message.as_prompts(self.attachments_dir))
        return out


def title_from(text: str, limit: int = 48) -> str:
    """A chat title made from the first user message."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
