"""Reading a ChatGPT data export's ``conversations.json``: each conversation's current branch becomes a chat.

A ChatGPT conversation is a tree: ``mapping`` holds nodes (``id``, ``message``, ``parent``, ``children``), and
``current_node`` is the last node of the branch the person last saw. That branch — ``current_node`` followed up
through ``parent`` — is the chat; every other child of a node on it (an edited prompt, a regenerated answer) is
an abandoned branch, counted and left out. Hidden messages (system context, custom instructions), tool output and
empty nodes are skipped; ``thoughts`` (a reasoning model's thinking) become the next reply's reasoning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.core.chat.chat_json import ChatFileError
from app.core.chat.conversation import Conversation, Message, Role

_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM}
_TEXT_TYPES = {"text", "multimodal_text", "code"}


@dataclass(frozen=True)
class ImportedChat:
    """One conversation read from the export, or why it was skipped."""

    conversation: Conversation | None
    abandoned_branches: int = 0
    problem: str = ""  # set when ``conversation`` is None


def is_chatgpt_export(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "mapping" in data[0]


def read_chatgpt(data: Any, source: str = "the file") -> Iterator[ImportedChat]:
    """Each conversation of a parsed ``conversations.json``, in file order; a damaged one is reported, not fatal."""
    if not isinstance(data, list):
        raise ChatFileError(f"{source} is not a ChatGPT conversations.json (it should be a list of conversations).")
    for i, item in enumerate(data):
        try:
            yield _conversation(item)
        except ChatFileError as exc:
            yield ImportedChat(None, problem=f"conversation {i + 1}: {exc}")


def _conversation(item: Any) -> ImportedChat:
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        raise ChatFileError("not a conversation (no mapping)")
    mapping: dict[str, Any] = item["mapping"]
    path = _current_branch(mapping, item.get("current_node"))
    messages: list[Message] = []
    thinking: list[str] = []
    for node in path:
        _add(messages, thinking, node.get("message"))
    abandoned = _abandoned(mapping, path)
    title = item.get("title")
    title = title if isinstance(title, str) and title else "ChatGPT chat"
    updated = item.get("update_time") or item.get("create_time")
    system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM)
    conversation = Conversation(
        title=title,
        system_prompt=system,
        messages=[m for m in messages if m.role is not Role.SYSTEM],
        updated_at=float(updated) if isinstance(updated, int | float) and updated > 0 else 0.0,
    )
    return ImportedChat(conversation, abandoned)


def _current_branch(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The nodes from the root down to ``current_node`` (a missing one: the last leaf in the file)."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [key for key, node in mapping.items() if isinstance(node, dict) and not node.get("children")]
        if not leaves:
            raise ChatFileError("no current_node and no last message")
        current = leaves[-1]
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    key: Any = current
    while isinstance(key, str) and key in mapping and key not in seen:
        seen.add(key)
        node = mapping[key]
        if not isinstance(node, dict):
            raise ChatFileError(f"node {key!r} is not an object")
        path.append(node)
        key = node.get("parent")
    path.reverse()
    return path


def _abandoned(mapping: dict[str, Any], path: list[dict[str, Any]]) -> int:
    """Children of nodes on the branch that are not on it and lead to a message: the branches left out."""
    on_path = {node.get("id") for node in path}
    count = 0
    for node in path:
        for child in node.get("children") or []:
            if child not in on_path and isinstance(mapping.get(child), dict):
                count += 1
    return count


def _add(messages: list[Message], thinking: list[str], message: Any) -> None:
    if not isinstance(message, dict):
        return
    author = _object(message.get("author"))
    role = _ROLES.get(str(author.get("role")))
    content = _object(message.get("content"))
    kind = content.get("content_type")
    metadata = _object(message.get("metadata"))
    if kind == "thoughts":
        thinking.extend(_thoughts(content))
        return
    if role is None or kind not in _TEXT_TYPES or metadata.get("is_visually_hidden_from_conversation"):
        return
    text = _text(content, kind)
    if not text.strip():
        return
    reply = role is Role.ASSISTANT
    model = metadata.get("model_slug") if reply and isinstance(metadata.get("model_slug"), str) else None
    reasoning = "\n\n".join(thinking) if reply else ""
    if reply:
        thinking.clear()
    if reply and messages and messages[-1].role is Role.ASSISTANT:  # one answer in parts (around a tool call)
        last = messages[-1]
        last.content += "\n\n" + text
        last.reasoning = "\n\n".join(part for part in (last.reasoning, reasoning) if part)
        return
    messages.append(Message(role, text, model=model, backend="chatgpt" if reply else None, reasoning=reasoning))


def _text(content: dict[str, Any], kind: str) -> str:
    if kind == "code":
        language, code = content.get("language"), content.get("text")
        language = language if isinstance(language, str) and language != "unknown" else ""
        return f"```{language}\n{code if isinstance(code, str) else ''}\n```"
    parts = content.get("parts")
    out = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and "image" in str(part.get("content_type", "")):
            out.append("[image]")
    return "\n\n".join(p for p in out if p)


def _thoughts(content: dict[str, Any]) -> list[str]:
    out = []
    thoughts = content.get("thoughts")
    for thought in thoughts if isinstance(thoughts, list) else []:
        if isinstance(thought, dict):
            text = thought.get("content") or thought.get("summary")
            if isinstance(text, str) and text.strip():
                out.append(text.strip())
    return out


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
