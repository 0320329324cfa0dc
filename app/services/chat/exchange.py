"""Chats in and out of the history: export one as Markdown, JSON or HTML, import our JSON or a ChatGPT export.

Formats are pure code in ``app.core.chat`` (``export_markdown``, ``export_html``, ``chat_json``,
``chatgpt_import``); here are the files, the attachments folder and the store. An import stores its chats in
batches, each committed: a kill midway keeps every batch already stored, and the chats that were there before.
Large files are allowed (a ChatGPT export can be hundreds of MB): see ``MAX_IMPORT_BYTES``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from app.core import safe_json
from app.core.chat import chat_json, chatgpt_import
from app.core.chat.chat_json import ChatFileError
from app.core.chat.conversation import Attachment, Conversation
from app.core.chat.export_html import to_html
from app.core.chat.export_markdown import to_markdown
from app.core.user_files import MiB, UserFileError, read_user_bytes
from app.services.chat.history import AsyncConversationStore, ConversationStore

# The general JSON bound (16 MiB) is for settings and replies; a ChatGPT data export holds every conversation
# a person ever had and is commonly hundreds of MB, so an import reads up to this much.
MAX_IMPORT_BYTES = 2048 * MiB
MAX_IMAGE_BYTES = 32 * MiB  # an attachment larger than this is not embedded in an HTML export
BATCH = 50  # conversations stored per transaction during an import

Progress = Callable[[int, int], None]  # (conversations stored so far, conversations in the file)


class ExportFormat(StrEnum):
    MARKDOWN = "md"
    JSON = "json"
    HTML = "html"

    @property
    def suffix(self) -> str:
        return f".{self.value}"


class ImportFormat(StrEnum):
    AUTO = "auto"
    JSON = "json"
    CHATGPT = "chatgpt"


# --- export -----------------------------------------------------------------------------------------------------


def export_chat(store: ConversationStore, chat_id: int, fmt: ExportFormat, attachments: Path | None = None) -> str:
    """Chat ``chat_id`` as the text of an export file (``NotFoundError`` for an unknown id)."""
    conversation = store.load(chat_id)
    origin = store.summary(conversation.forked_from) if conversation.forked_from is not None else None
    origin_title = origin.title if origin else None
    fmt = ExportFormat(fmt)
    if fmt is ExportFormat.JSON:
        return chat_json.dumps([conversation])
    if fmt is ExportFormat.MARKDOWN:
        return to_markdown(conversation, origin_title, _image_link(attachments))
    return to_html(conversation, origin_title, _image_reader(attachments))


def write_export(
    store: ConversationStore, chat_id: int, fmt: ExportFormat, target: Path, attachments: Path | None = None
) -> Path:
    """Export a chat into ``target`` (written whole or not at all); returns ``target``."""
    text = export_chat(store, chat_id, fmt, attachments)
    target = Path(target)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _inside(attachments: Path, attachment: Attachment) -> Path | None:
    """The attachment's file, if it lies inside the attachments folder and exists."""
    root = attachments.resolve()
    path = (root / attachment.path).resolve()
    return path if path.is_relative_to(root) and path.is_file() else None


def _image_link(attachments: Path | None) -> Callable[[Attachment], str | None] | None:
    if attachments is None:
        return None

    def link(attachment: Attachment) -> str | None:
        path = _inside(attachments, attachment)
        return path.as_uri() if path else None

    return link


def _image_reader(attachments: Path | None) -> Callable[[Attachment], bytes | None] | None:
    if attachments is None:
        return None

    def read(attachment: Attachment) -> bytes | None:
        path = _inside(attachments, attachment)
        if path is None:
            return None
        try:
            return read_user_bytes(path, max_bytes=MAX_IMAGE_BYTES)
        except (OSError, UserFileError):
            return None

    return read


# --- import -----------------------------------------------------------------------------------------------------


@dataclass
class ImportSummary:
    """What an import did."""

    format: ImportFormat
    chat_ids: list[int] = field(default_factory=list)
    messages: int = 0
    abandoned_branches: int = 0
    skipped: list[str] = field(default_factory=list)  # conversations that could not be read, and why

    def text(self) -> str:
        chats = len(self.chat_ids)
        lines = [f"Imported {chats} chat{'' if chats == 1 else 's'} ({self.messages:,} messages)."]
        if self.format is ImportFormat.CHATGPT:
            branches = self.abandoned_branches
            lines.append(
                f"{branches} abandoned branch{'' if branches == 1 else 'es'} (edited prompts, regenerated answers) "
                "left out: each chat holds the branch last shown in ChatGPT."
            )
        if self.skipped:
            lines.append(f"{len(self.skipped)} conversation(s) could not be read and were skipped: "
                         + "; ".join(self.skipped[:3]) + (" …" if len(self.skipped) > 3 else ""))  # fmt: skip
        return " ".join(lines)


def read_chat_file(path: Path) -> object:
    """The parsed JSON of a chat file (up to ``MAX_IMPORT_BYTES``); ``ChatFileError`` when it cannot be read."""
    name = f"The file {path}"
    try:
        data = read_user_bytes(path, max_bytes=MAX_IMPORT_BYTES, what=name)
        return safe_json.loads(data, what=name, max_bytes=None)  # bounded above, on purpose (see MAX_IMPORT_BYTES)
    except FileNotFoundError:
        raise ChatFileError(f"{name} does not exist. Check the path.") from None
    except (OSError, safe_json.JsonError, UserFileError) as exc:
        raise ChatFileError(f"{_sentence(exc)} Choose an LLM Workstation chat export (.json) or ChatGPT's "
                            "conversations.json.") from None  # fmt: skip


def detect_format(data: object, path: Path) -> ImportFormat:
    if chat_json.is_chat_document(data):
        return ImportFormat.JSON
    if chatgpt_import.is_chatgpt_export(data):
        return ImportFormat.CHATGPT
    raise ChatFileError(
        f"The file {path} is neither an LLM Workstation chat export nor a ChatGPT conversations.json. Export "
        "chats from LLM Workstation as JSON, or use the conversations.json in ChatGPT's data export."
    )


def import_file(
    store: ConversationStore,
    path: Path,
    fmt: ImportFormat = ImportFormat.AUTO,
    progress: Progress | None = None,
    batch: int = BATCH,
) -> ImportSummary:
    """Read a chat file and store its chats, ``batch`` per committed transaction; ``progress`` after each."""
    path = Path(path)
    data = read_chat_file(path)
    fmt = detect_format(data, path) if ImportFormat(fmt) is ImportFormat.AUTO else ImportFormat(fmt)
    summary = ImportSummary(fmt)
    total = len(data) if isinstance(data, list) else len(data.get("chats") or []) if isinstance(data, dict) else 0
    if progress:
        progress(0, total)
    pending: list[Conversation] = []
    done = 0
    for conversation in _conversations(data, fmt, path, summary):
        pending.append(conversation)
        if len(pending) >= batch:
            done += _store(store, pending, summary)
            if progress:
                progress(done, total)
    if pending:
        done += _store(store, pending, summary)
    if progress:
        progress(total, total)
    return summary


def _conversations(data: object, fmt: ImportFormat, path: Path, summary: ImportSummary) -> Iterator[Conversation]:
    source = f"The file {path}"
    if fmt is ImportFormat.JSON:
        yield from chat_json.read_document(data, source)
        return
    for item in chatgpt_import.read_chatgpt(data, source):
        if item.conversation is None:
            summary.skipped.append(item.problem)
            continue
        summary.abandoned_branches += item.abandoned_branches
        if item.conversation.messages:
            yield item.conversation


def _store(store: ConversationStore, pending: list[Conversation], summary: ImportSummary) -> int:
    summary.chat_ids += store.import_conversations(pending)
    summary.messages += sum(len(c.messages) for c in pending)
    count = len(pending)
    pending.clear()
    return count


async def import_file_async(
    store: AsyncConversationStore, path: Path, fmt: ImportFormat = ImportFormat.AUTO, progress: Progress | None = None
) -> ImportSummary:
    """``import_file`` on a worker thread of its own (parsing a big file takes a while; the store's worker stays
    free between batches); ``progress`` is called on the event loop's thread."""
    loop = asyncio.get_running_loop()

    def report(done: int, total: int) -> None:
        if progress is not None:
            loop.call_soon_threadsafe(progress, done, total)

    return await loop.run_in_executor(None, import_file, store.store, path, fmt, report)


async def write_export_async(
    store: AsyncConversationStore, chat_id: int, fmt: ExportFormat, target: Path, attachments: Path | None = None
) -> Path:
    """``write_export`` off the event loop's thread."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, write_export, store.store, chat_id, fmt, target, attachments)


def _sentence(exc: Exception) -> str:
    text = str(exc).rstrip()
    return text if text.endswith(".") else f"{text}."
