"""Chats as JSON: the app's own, versioned export format, and reading it back.

    {"format": "llm-workstation-chats", "version": 2, "exported_at": 1767225600.0,
     "chats": [{"title": …, "system_prompt": …, "updated_at": …, "pinned": …, "folder": …, "overflow": …,
                "forked_from": …, "forked_at": …, "tools": {"servers": {name: [tool, …] | null}, "always": […]},
                "messages": [{"role": …, "content": …, "reasoning": …, "status": …, "model": …, "backend": …,
                              "settings": {…}, "stats": {…} | null, "error": … | null, "attachments": [{…}],
                              "tool_calls": [{"id", "name", "arguments", "server", "tool", "approval", "reason",
                                              "result", "result_bytes", "is_error"}],
                              "version": 0, "versions": [[{message}, …], …]}]}]}

Version 2 added ``tools`` and ``tool_calls`` (version 1 files read as chats without them). Version 3 added a
message's other versions (``versions``: branches of messages, nested the same way; ``version``: the shown one's
slot; see ``app.core.chat.versions``); older files read as chats without them. Version 4 added a reply's
document sources (``sources``: [{"number", "path", "page", "text", "heading", "chunk_id", "start", "end"}]) and a
chat's attached documents (``documents``: [{"collection", "path"}]). A reader accepts every
version up to ``VERSION`` and refuses a newer one with a message saying so. Ids are not exported: an imported chat
gets new ones (and ``forked_from``, an id in another history, is dropped on import). An imported chat's "always
run" tools are dropped: the file may come from anyone, so its calls ask first again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from app.core.chat.conversation import (
    Attachment,
    Conversation,
    Message,
    MessageStatus,
    OverflowPolicy,
    ReplyStats,
    Role,
)
from app.core.chat.tool_use import ChatTools, ToolUse
from app.core.documents.citations import ChatDocument, Source
from app.core.errors import InvalidInputError

T = TypeVar("T")

FORMAT = "llm-workstation-chats"
VERSION = 4


class ChatFileError(InvalidInputError):
    """A chat file that cannot be read as what it claims to be; the message says what is wrong."""


def dumps(conversations: list[Conversation], exported_at: float | None = None) -> str:
    """The export document for ``conversations``, as indented JSON text."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": time.time() if exported_at is None else exported_at,
        "chats": [_chat(conversation) for conversation in conversations],
    }
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


def _chat(conversation: Conversation) -> dict[str, Any]:
    return {
        "title": conversation.title,
        "system_prompt": conversation.system_prompt,
        "updated_at": conversation.updated_at,
        "pinned": conversation.pinned,
        "folder": conversation.folder,
        "overflow": str(conversation.overflow),
        "forked_from": conversation.forked_from,
        "forked_at": conversation.forked_at,
        "tools": conversation.tools.to_dict(),
        "documents": [document.to_dict() for document in conversation.documents],
        "messages": [message_dict(message) for message in conversation.messages],
    }


def message_dict(message: Message) -> dict[str, Any]:
    """A message as the export writes it (its other versions nested the same way; no id)."""
    data: dict[str, Any] = {
        "role": str(message.role),
        "content": message.content,
        "reasoning": message.reasoning,
        "status": str(message.status),
        "model": message.model,
        "backend": message.backend,
        "settings": message.settings,
        "stats": message.stats.to_dict() if message.stats else None,
        "error": message.error,
        "attachments": [attachment.to_dict() for attachment in message.attachments],
        "tool_calls": [call.to_dict() for call in message.tool_calls],
    }
    if message.sources:
        data["sources"] = [source.to_dict() for source in message.sources]
    if message.versions:
        data["version"] = message.version
        data["versions"] = [[message_dict(m) for m in branch] for branch in message.versions]
    return data


def is_chat_document(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def read_document(data: Any, source: str = "the file") -> list[Conversation]:
    """The chats of a parsed export document; ``ChatFileError`` names what is wrong in ``source``."""
    if not is_chat_document(data):
        raise ChatFileError(f'{source} is not an LLM Workstation chat export (no "format": "{FORMAT}").')
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise ChatFileError(f"{source} has no valid format version.")
    if version > VERSION:
        raise ChatFileError(
            f"{source} was written by a newer version of LLM Workstation (chat format {version}; this version "
            f"reads up to {VERSION}). Update the app to import it."
        )
    chats = data.get("chats")
    if not isinstance(chats, list):
        raise ChatFileError(f"{source} holds no list of chats.")
    return [_read_chat(chat, f"{source}, chat {i + 1}") for i, chat in enumerate(chats)]


def _read_chat(data: Any, where: str) -> Conversation:
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ChatFileError(f"{where} is not a chat (an object with a list of messages).")
    return Conversation(
        title=_text(data.get("title"), where, "title") or "Imported chat",
        system_prompt=_text(data.get("system_prompt"), where, "system_prompt"),
        messages=[read_message(m, f"{where}, message {i + 1}") for i, m in enumerate(data["messages"])],
        updated_at=_number(data.get("updated_at")),
        pinned=bool(data.get("pinned")),
        folder=_text(data.get("folder"), where, "folder"),
        overflow=_enum(OverflowPolicy, data.get("overflow"), OverflowPolicy.DROP_OLDEST),
        tools=ChatTools(ChatTools.from_dict(data.get("tools")).servers),  # "always" is not imported
        documents=_items(data.get("documents"), ChatDocument.from_dict, f"{where}: a document"),
    )


def read_message(data: Any, where: str) -> Message:
    """A message from its export form (``message_dict``); ``ChatFileError`` says what is wrong at ``where``."""
    if not isinstance(data, dict):
        raise ChatFileError(f"{where} is not an object.")
    role = _enum(Role, data.get("role"), None)
    if role is None:
        raise ChatFileError(f"{where} has no valid role (user, assistant or system).")
    status = _enum(MessageStatus, data.get("status"), MessageStatus.COMPLETE)
    settings = data.get("settings")
    stats = data.get("stats")
    versions, version = read_versions(data.get("versions"), data.get("version"), where)
    return Message(
        role=role,
        content=_text(data.get("content"), where, "content"),
        status=MessageStatus.INTERRUPTED if status is MessageStatus.STREAMING else status,
        model=_optional_text(data.get("model")),
        backend=_optional_text(data.get("backend")),
        settings=settings if isinstance(settings, dict) else {},
        stats=ReplyStats.from_dict(stats) if isinstance(stats, dict) else None,
        error=_optional_text(data.get("error")),
        reasoning=_text(data.get("reasoning"), where, "reasoning"),
        attachments=_attachments(data.get("attachments"), where),
        tool_calls=_tool_calls(data.get("tool_calls"), where),
        versions=versions,
        version=version,
        sources=_items(data.get("sources"), Source.from_dict, f"{where}: a source"),
    )


def _items(items: Any, make: Callable[[Any], T], what: str) -> list[T]:
    """A list of objects read with ``make``; ``ChatFileError`` when one cannot be read."""
    if not isinstance(items, list):
        return []
    try:
        return [make(item) for item in items]
    except (TypeError, AttributeError) as exc:
        raise ChatFileError(f"{what} cannot be read ({exc}).") from None


def read_versions(items: Any, slot: Any, where: str) -> tuple[list[list[Message]], int]:
    """A message's other versions (branches of messages, as ``message_dict`` writes them) and the shown one's slot,
    clamped to them; ``ChatFileError`` says what is wrong at ``where``."""
    if not isinstance(items, list) or not items:
        return [], 0
    out = []
    for b, branch in enumerate(items):
        if not isinstance(branch, list) or not branch:
            raise ChatFileError(f"{where}, version {b + 1} is not a list of messages.")
        out.append([read_message(m, f"{where}, version {b + 1}, message {i + 1}") for i, m in enumerate(branch)])
    slot = slot if isinstance(slot, int) and not isinstance(slot, bool) else len(out)
    return out, min(max(slot, 0), len(out))


_CALL_TEXT = ("id", "name", "arguments", "server", "tool", "reason")


def _tool_calls(items: Any, where: str) -> list[ToolUse]:
    if not isinstance(items, list):
        return []
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not all(isinstance(item.get(k, ""), str) for k in _CALL_TEXT):
            raise ChatFileError(f"{where}, tool call {i + 1}: its id, name and arguments must be text.")
        if not item.get("id") or not item.get("name"):
            raise ChatFileError(f"{where}, tool call {i + 1} has no id or no name.")
        if not isinstance(item.get("result"), str | None) or not isinstance(item.get("result_bytes", 0), int):
            raise ChatFileError(f"{where}, tool call {i + 1}: its result must be text and its size a number.")
        out.append(ToolUse.from_dict({**item, "is_error": bool(item.get("is_error"))}))
    return out


def _attachments(items: Any, where: str) -> list[Attachment]:
    if not isinstance(items, list):
        return []
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise ChatFileError(f"{where} has an attachment without a path.")
        try:
            out.append(Attachment.from_dict(item))
        except TypeError as exc:
            raise ChatFileError(f"{where} has an attachment that cannot be read ({exc}).") from None
    return out


def _text(value: Any, where: str, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ChatFileError(f"{where}: {name} must be text, not {type(value).__name__}.")
    return value


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0.0


def _enum(kind: Any, value: Any, default: Any) -> Any:
    try:
        return kind(value)
    except ValueError:
        return default
