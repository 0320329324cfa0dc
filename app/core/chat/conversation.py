"""The chat data model: messages, their status and the figures measured for each reply."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

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

    def as_prompt(self) -> dict[str, str]:
        return {"role": str(self.role), "content": self.content}


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

    def prompt_messages(self) -> list[dict[str, str]]:
        """The messages sent to a model: the system prompt, then every non-empty turn."""
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt.strip() else []
        out.extend(m.as_prompt() for m in self.messages if m.content or m.role is Role.USER)
        return out


def title_from(text: str, limit: int = 48) -> str:
    """A chat title made from the first user message."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
