"""Forking a chat: a new chat from one of its messages and those before it (or only the last few turns)."""

from __future__ import annotations

import dataclasses

from app.core.chat.conversation import Conversation, Message, MessageStatus, Role
from app.core.chat.tool_use import ChatTools
from app.core.errors import InvalidInputError


def fork_conversation(source: Conversation, at: int, last_turns: int | None = None) -> Conversation:
    """A new, unsaved chat with messages 1..``at`` of ``source`` (1-based, as people count), or only the last
    ``last_turns`` turns of them (a turn starts at a user message). It records ``source`` and ``at`` as its origin.
    """
    count = len(source.messages)
    if not 1 <= at <= count:
        where = f"1 to {count}" if count else "none: the chat is empty"
        raise InvalidInputError(f"Message {at} is not in the chat '{source.title}' (messages: {where}).")
    if last_turns is not None and last_turns < 1:
        raise InvalidInputError(f"Keep at least one turn (asked for {last_turns}).")
    kept = source.messages[:at]
    if last_turns is not None:
        kept = kept[_start_of_last_turns(kept, last_turns) :]
    return Conversation(
        title=fork_title(source.title),
        system_prompt=source.system_prompt,
        messages=[_copy(message) for message in kept],
        forked_from=source.id,
        forked_at=at,
        folder=source.folder,
        overflow=source.overflow,
        tools=ChatTools(dict(source.tools.servers)),  # the same servers; each tool asks again before it runs
        documents=list(source.documents),
    )


def fork_title(title: str) -> str:
    return title if title.endswith("(fork)") else f"{title} (fork)"


def _start_of_last_turns(messages: list[Message], turns: int) -> int:
    starts = [i for i, message in enumerate(messages) if message.role is Role.USER]
    return starts[-turns] if len(starts) >= turns else 0


def _copy(message: Message) -> Message:
    status = MessageStatus.INTERRUPTED if message.status is MessageStatus.STREAMING else message.status
    return dataclasses.replace(
        message,
        id=None,
        status=status,
        settings=dict(message.settings),
        stats=dataclasses.replace(message.stats) if message.stats else None,
        attachments=list(message.attachments),
        tool_calls=[dataclasses.replace(call) for call in message.tool_calls],
        sources=list(message.sources),
        versions=[],  # a fork is the path it was made from; the other versions stay in the source chat
        version=0,
    )
