"""The conversation history: an SQLite store (WAL mode) and an asyncio wrapper that keeps disk I/O off the GUI thread.

Every write commits at once. With WAL and ``synchronous=NORMAL`` a committed write survives the process being
killed (not a power cut), so a sent user message and the last saved part of a streaming reply are never lost.

Every message's text and thinking is in a full-text index (FTS5, schema 3) that triggers keep in step with every
write; ``search`` takes what a person types (operators and quotes are plain words) and returns snippets.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, ParamSpec, TypeVar

from app.core import errors, safe_json
from app.core.chat import chat_json
from app.core.chat.conversation import (
    Attachment,
    Conversation,
    Message,
    MessageStatus,
    OverflowPolicy,
    ReplyStats,
    Role,
)
from app.core.chat.fork import fork_conversation
from app.core.chat.search_query import fts_query
from app.core.chat.tool_use import ChatTools, ToolUse
from app.core.documents.citations import ChatDocument, Source
from app.services.paths import private_database

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


class ConversationStoreError(errors.AppError):
    """The history cannot be read or written; the message says what happened and what to do."""

    kind = errors.ErrorKind.UNAVAILABLE


class NotFoundError(ConversationStoreError, errors.NotFoundError):
    """No conversation or message with the given id (a LookupError)."""

    kind = errors.ErrorKind.NOT_FOUND


class ChatSummary(NamedTuple):
    """One row of the chat list: what it shows and how it is ordered (newest ``updated_at`` first)."""

    id: int
    title: str
    updated_at: float


class ChatInfo(NamedTuple):
    """A chat's row with its pin and folder."""

    id: int
    title: str
    updated_at: float
    pinned: bool
    folder: str


class SearchHit(NamedTuple):
    """One message that matches a search: its chat, where it is, and a snippet with the matches marked."""

    conversation_id: int
    title: str
    message_id: int
    message_index: int  # 0-based position in the chat (the transcript's row)
    role: str
    snippet: str  # matches between MARK_OPEN and MARK_CLOSE; see ``marked``

    def marked(self, open_mark: str = "**", close_mark: str = "**") -> str:
        """The snippet with each match between ``open_mark`` and ``close_mark``."""
        return self.snippet.replace(MARK_OPEN, open_mark).replace(MARK_CLOSE, close_mark)


MARK_OPEN, MARK_CLOSE = "\x02", "\x03"  # around matches in a snippet: characters no chat text holds


@dataclass(frozen=True)
class ConversationPage:
    """One page of the newest-first chat list; ``after`` is the cursor for the next page (None at the end)."""

    chats: list[ChatSummary]
    total: int  # conversations in the whole store
    after: tuple[float, int] | None


MAX_PAGE = 10_000  # rows one page call may ask for


def _check_page(limit: int, offset: int = 0) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise errors.InvalidInputError(f"A page holds 1 to {MAX_PAGE:,} rows (asked for {limit}).")
    if offset < 0:
        raise errors.InvalidInputError(f"A page starts at row 0 or later (asked for row {offset}).")


# --- schema -----------------------------------------------------------------------------------------------------


def _to_v1(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL,
            model TEXT,
            backend TEXT,
            settings_json TEXT NOT NULL DEFAULT '{}',
            stats_json TEXT,
            error TEXT,
            created_at REAL NOT NULL,
            UNIQUE (conversation_id, position)
        )"""
    )
    conn.execute("CREATE INDEX conversations_by_update ON conversations(updated_at)")


def _to_v2(conn: sqlite3.Connection) -> None:
    """Thinking kept apart from the answer, attachments (images), forks, pins, folders and the overflow policy."""
    conn.execute("ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE messages ADD COLUMN attachments_json TEXT")
    conn.execute("ALTER TABLE conversations ADD COLUMN forked_from INTEGER")
    conn.execute("ALTER TABLE conversations ADD COLUMN forked_at INTEGER")
    conn.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE conversations ADD COLUMN folder TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE conversations ADD COLUMN overflow TEXT NOT NULL DEFAULT 'drop_oldest'")


def _to_v3(conn: sqlite3.Connection) -> None:
    """Full-text search: an FTS5 index over the messages' text and thinking, kept in step by triggers; every
    existing message is indexed here (the store is opened off the GUI thread)."""
    conn.execute(
        """CREATE VIRTUAL TABLE messages_fts USING fts5(content, reasoning, content='messages', content_rowid='id',
           tokenize='unicode61 remove_diacritics 2', prefix='2 3')"""
    )
    conn.execute(
        """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
             INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
           END"""
    )
    conn.execute(
        """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
             INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
             VALUES ('delete', old.id, old.content, old.reasoning);
           END"""
    )
    conn.execute(
        """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, reasoning ON messages BEGIN
             INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
             VALUES ('delete', old.id, old.content, old.reasoning);
             INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
           END"""
    )
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    # the chat list: pinned chats first, then the rest newest first, optionally one folder's
    conn.execute("CREATE INDEX conversations_by_pin ON conversations(pinned, updated_at, id)")
    conn.execute("CREATE INDEX conversations_by_folder ON conversations(folder, pinned, updated_at, id)")


def _to_v4(conn: sqlite3.Connection) -> None:
    """Tools in chat: a reply's tool calls with their approvals and results, and each chat's tools (the MCP servers
    and tools it may use, those it always runs)."""
    conn.execute("ALTER TABLE messages ADD COLUMN tool_calls_json TEXT")
    conn.execute("ALTER TABLE conversations ADD COLUMN tools_json TEXT")


def _to_v5(conn: sqlite3.Connection) -> None:
    """Versions of a message (Regenerate and Edit keep what they replace; see ``app.core.chat.versions``): one JSON
    column on the path's message, ``{"version": slot, "branches": [[message, …], …]}``, each message in the chat
    export's form (``chat_json.message_dict``, nested versions included). A column rather than a table: the path
    stays the ``messages`` rows, so search, paging, forks and counts read only what shows, and a place's versions
    are read and written with the message that holds them (switching a version rewrites the tail's rows)."""
    conn.execute("ALTER TABLE messages ADD COLUMN versions_json TEXT")


def _to_v6(conn: sqlite3.Connection) -> None:
    """Delete with undo: a deleted chat is first only marked (``deleted_at``), hidden from every list, count and
    search, and purged for good when its undo time is over (or, after a crash, at the next start)."""
    conn.execute("ALTER TABLE conversations ADD COLUMN deleted_at REAL")


def _to_v7(conn: sqlite3.Connection) -> None:
    """Documents in chat: a reply's numbered sources (``sources_json``, a list of ``Source``) and the files, folders
    and collections a chat answers from (``documents_json``, a list of ``ChatDocument``). Older chats have neither."""
    _add_column(conn, "messages", "sources_json TEXT")
    _add_column(conn, "conversations", "documents_json TEXT")


def _add_column(conn: sqlite3.Connection, table: str, column: str) -> None:
    """``ALTER TABLE … ADD COLUMN`` unless the column is there (a copy of the file taken back a schema keeps it)."""
    name = column.split()[0]
    if name not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


# _MIGRATIONS[n] takes a database from schema version n to n + 1; append new steps, never edit old ones.
_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _to_v1, _to_v2, _to_v3, _to_v4, _to_v5, _to_v6, _to_v7,
)  # fmt: skip
SCHEMA_VERSION = len(_MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: Path | str = "the database") -> int:
    """Bring the schema up to ``SCHEMA_VERSION``, one committed step at a time; returns the version reached.

    The connection must be in autocommit mode (``isolation_level=None``). A database written by a newer
    version of the app raises ``ConversationStoreError`` and is left as it is.
    """
    while True:
        conn.execute("BEGIN IMMEDIATE")  # re-read the version under the write lock: another process may migrate too
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ConversationStoreError(
                    f"The conversation history at {path} was written by a newer version of LLM Workstation "
                    f"(schema {version}; this version reads up to {SCHEMA_VERSION}). Update the app, or move the "
                    "file aside to start a new history."
                )
            if version == SCHEMA_VERSION:
                conn.execute("COMMIT")
                return version
            _MIGRATIONS[version](conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


# --- errors -----------------------------------------------------------------------------------------------------

_DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


def _damaged_error(path: Path, detail: object) -> ConversationStoreError:
    return ConversationStoreError(
        f"The conversation history at {path} is damaged or is not an LLM Workstation database ({detail}). "
        "The file was left untouched: move it aside to start a new history "
        "(`sqlite3 FILE .recover` may rescue its contents)."
    )


def _store_error(path: Path, exc: sqlite3.Error) -> ConversationStoreError:
    if getattr(exc, "sqlite_errorname", None) in _DAMAGED:
        return _damaged_error(path, exc)
    return ConversationStoreError(f"Could not read or write the conversation history at {path}: {exc}")


@contextmanager
def _translated(path: Path) -> Iterator[None]:
    """Turn sqlite3 errors into ``ConversationStoreError``s that name the file."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _store_error(path, exc) from exc


# --- opening ----------------------------------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        private_database(path)  # owner-only, and so its -wal and -shm files
        conn = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise ConversationStoreError(
            f"Cannot open the conversation history at {path}: {exc}. Check that the folder exists and is "
            "writable, or move the file aside to start a new history."
        ) from exc
    conn.row_factory = sqlite3.Row
    return conn


def _check_and_configure(conn: sqlite3.Connection, path: Path) -> None:
    # Read-only check first: nothing is written to a file we cannot read.
    problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise _damaged_error(path, "; ".join(problems[:3]))
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        log.warning("SQLite could not use WAL mode for %s (got %r)", path, mode)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    migrate(conn, path)


def _open(path: Path) -> sqlite3.Connection:
    conn = _connect(path)
    try:
        with _translated(path):
            _check_and_configure(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


# --- rows -------------------------------------------------------------------------------------------------------


def _message_fields(message: Message) -> dict[str, Any]:
    return {
        "content": message.content,
        "status": str(message.status),
        "model": message.model,
        "backend": message.backend,
        "settings_json": json.dumps(message.settings, default=str),
        "stats_json": json.dumps(vars(message.stats)) if message.stats else None,  # its fields (asdict is slow)
        "error": message.error,
        "reasoning": message.reasoning,
        "attachments_json": json.dumps([a.to_dict() for a in message.attachments]) if message.attachments else None,
        "tool_calls_json": json.dumps([c.to_dict() for c in message.tool_calls]) if message.tool_calls else None,
        "versions_json": _versions_json(message) if message.versions else None,
        "sources_json": json.dumps([source.to_dict() for source in message.sources]) if message.sources else None,
    }


def _versions_json(message: Message) -> str:
    branches = [[chat_json.message_dict(m) for m in branch] for branch in message.versions]
    return json.dumps({"version": message.version, "branches": branches}, default=str)


def _versions(text: str, message_id: int) -> tuple[list[list[Message]], int]:
    """A message's other versions and its slot; damaged ones read as none (logged) so the chat still opens."""
    what = f"the versions of message {message_id}"
    try:
        data = safe_json.loads_object(text, what=what, max_bytes=None)
        return chat_json.read_versions(data.get("branches"), data.get("version"), what)
    except (safe_json.JsonError, chat_json.ChatFileError, TypeError, AttributeError) as exc:
        log.warning("History: %s are unreadable (%s); shown without them.", what, exc)
        return [], 0


_INSERT_MESSAGE = """INSERT INTO messages (conversation_id, position, role, content, status, model, backend,
                                          settings_json, stats_json, error, created_at, reasoning, attachments_json,
                                          tool_calls_json, versions_json, sources_json)
                      VALUES (:conversation_id, :position, :role, :content, :status, :model, :backend,
                              :settings_json, :stats_json, :error, :created_at, :reasoning, :attachments_json,
                              :tool_calls_json, :versions_json, :sources_json)"""


def _message_rows(conversation_id: int, messages: Iterable[Message], created_at: float) -> Iterator[dict[str, Any]]:
    for position, message in enumerate(messages):
        yield {
            "conversation_id": conversation_id,
            "position": position,
            "role": str(message.role),
            "created_at": created_at,
            **_message_fields(message),
        }


_MESSAGE_COLUMNS = (
    "id, role, content, status, model, backend, settings_json, stats_json, error, reasoning, attachments_json, "
    "tool_calls_json, versions_json, sources_json"
)
_ROLES = {str(role): role for role in Role}
_STATUSES = {str(status): status for status in MessageStatus}
_FAST_JSON_CHARS = 4096  # shorter JSON cannot nest deep enough to matter: parsed directly (opening a long chat)


def _message_from_row(row: sqlite3.Row | tuple[Any, ...]) -> Message:
    """A message from a row of ``_MESSAGE_COLUMNS`` (in that order): ~3,000 a chat open, so kept lean."""
    message_id, role, content, status, model, backend, settings_json, stats_json, error, reasoning, *rest = row
    attached, calls, versions, sources = rest
    others, slot = _versions(versions, message_id) if versions else ([], 0)
    return Message(
        role=_ROLES.get(role) or Role(role),
        content=content,
        status=_STATUSES.get(status) or MessageStatus(status),
        id=message_id,
        model=model,
        backend=backend,
        settings=_json_column(settings_json, "settings_json", message_id) or {},
        stats=ReplyStats.from_dict(_json_column(stats_json, "stats_json", message_id)),
        error=error,
        reasoning=reasoning,
        attachments=_attachments(attached, message_id) if attached else [],
        tool_calls=_tool_calls(calls, message_id) if calls else [],
        versions=others,
        version=slot,
        sources=_json_items(sources, f"the sources of message {message_id}", Source.from_dict) if sources else [],
    )


def _attachments(text: str, message_id: int) -> list[Attachment]:
    return _json_items(text, f"the attachments of message {message_id}", Attachment.from_dict)


def _tool_calls(text: str, message_id: int) -> list[ToolUse]:
    return _json_items(text, f"the tool calls of message {message_id}", ToolUse.from_dict)


def _json_items(text: str, what: str, make: Callable[[Any], T]) -> list[T]:
    """A JSON-list column read item by item; a damaged one reads as empty (logged) so the chat still opens."""
    try:
        return [make(item) for item in safe_json.loads(text, what=what, max_bytes=None)]
    except (safe_json.JsonError, TypeError, AttributeError) as exc:
        log.warning("History: %s are unreadable (%s); shown without them.", what, exc)
        return []


def _chat_tools(text: str | None) -> ChatTools:
    if not text:
        return ChatTools()
    try:
        return ChatTools.from_dict(safe_json.loads(text, what="a chat's tools", max_bytes=None))
    except safe_json.JsonError as exc:
        log.warning("History: %s; the chat offers no tools until they are chosen again.", exc)
        return ChatTools()


def _json_column(text: str | None, column: str, message_id: int) -> dict[str, Any] | None:
    """A JSON-object column; a damaged one reads as empty (logged) so the conversation still opens."""
    if not text:
        return None
    if text == "{}":
        return {}
    if len(text) <= _FAST_JSON_CHARS:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None  # the safe path below says what is wrong
        if isinstance(value, dict):
            return value
    try:  # no size bound: the text is already in memory; depth and syntax are what can go wrong
        return safe_json.loads_object(text, what=f"the {column} of message {message_id}", max_bytes=None)
    except safe_json.JsonError as exc:
        log.warning("History %s; the message is shown without it.", exc)
        return None


def _conversation_extras(conversation: Conversation) -> tuple[Any, ...]:
    """forked_from, forked_at, pinned, folder, overflow (schema 2), tools_json (schema 4), documents_json (7)."""
    return (
        conversation.forked_from,
        conversation.forked_at,
        int(conversation.pinned),
        conversation.folder,
        str(conversation.overflow),
        _tools_json(conversation.tools),
        _documents_json(conversation.documents),
    )


def _chat_documents(text: str | None) -> list[ChatDocument]:
    return _json_items(text, "a chat's documents", ChatDocument.from_dict) if text else []


def _documents_json(documents: list[ChatDocument]) -> str | None:
    return json.dumps([document.to_dict() for document in documents]) if documents else None


def _tools_json(tools: ChatTools) -> str | None:
    return json.dumps(tools.to_dict()) if tools.any or tools.always else None


def _overflow(text: str) -> OverflowPolicy:
    try:
        return OverflowPolicy(text)
    except ValueError:
        return OverflowPolicy.DROP_OLDEST


_SEARCH = """SELECT m.conversation_id, c.title, m.id, m.position, m.role,
                     snippet(messages_fts, -1, ?, ?, '…', 14)
              FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                   JOIN conversations c ON c.id = m.conversation_id
              WHERE messages_fts MATCH ? AND c.deleted_at IS NULL ORDER BY messages_fts.rowid DESC LIMIT ?"""
_LIVE = "deleted_at IS NULL"  # a chat not deleted (a deleted one waits for its purge, see ``mark_deleted``)


def _chat_filter(pinned: bool | None, folder: str | None) -> tuple[list[str], tuple[Any, ...]]:
    where: list[str] = [_LIVE]
    params: list[Any] = []
    if pinned is not None:
        where.append("pinned = ?")
        params.append(int(pinned))
    if folder is not None:
        where.append("folder = ?")
        params.append(" ".join(folder.split()))
    return where, tuple(params)


# --- the store --------------------------------------------------------------------------------------------------


class ConversationStore:
    """Conversations and their messages in one SQLite file; every write is committed before the call returns.

    Safe to call from any one thread at a time (a lock guards the connection), e.g. a single worker thread.
    Raises ``ConversationStoreError`` when the file is damaged or unreadable, ``NotFoundError`` for unknown ids.
    """

    def __init__(self, path: Path) -> None:
        """Open (or create) the history at ``path``; a damaged file raises ``ConversationStoreError``, untouched."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = _open(self.path)

    # -- plumbing

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ConversationStoreError(f"The conversation history at {self.path} is closed.")
        return self._conn

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock, _translated(self.path):
            yield self._live()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One transaction, committed on success and rolled back on any error."""
        with self._lock, _translated(self.path):
            conn = self._live()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @staticmethod
    def _stamp(conn: sqlite3.Connection) -> float:
        """Now, but always later than every stored ``updated_at``, so the newest-first order is strict."""
        latest = conn.execute("SELECT MAX(updated_at) FROM conversations").fetchone()[0]
        now = time.time()
        return now if latest is None or now > latest else latest + 1e-6

    @staticmethod
    def _require_conversation(conn: sqlite3.Connection, conversation_id: int) -> sqlite3.Row:
        row = conn.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"No conversation with id {conversation_id}.")
        return row

    def _touch(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        conn.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (self._stamp(conn), conversation_id))

    # -- conversations

    def create(self, title: str = "New chat", system_prompt: str = "") -> Conversation:
        """Store a new, empty conversation and return it with its id."""
        with self._writing() as conn:
            now = self._stamp(conn)
            cur = conn.execute(
                "INSERT INTO conversations (title, system_prompt, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now),
            )
        return Conversation(title=title, system_prompt=system_prompt, id=cur.lastrowid, updated_at=now)

    def list_conversations(self) -> list[tuple[int, str, float]]:
        """(id, title, updated_at) of every conversation, most recently active first."""
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT id, title, updated_at FROM conversations WHERE {_LIVE} ORDER BY updated_at DESC, id DESC"
            )
            return [(row["id"], row["title"], row["updated_at"]) for row in rows]

    def count_conversations(self) -> int:
        """How many conversations the store holds."""
        with self._reading() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM conversations WHERE {_LIVE}").fetchone()[0])

    def conversations_page(
        self,
        limit: int = 100,
        after: tuple[float, int] | None = None,
        *,
        pinned: bool | None = None,
        folder: str | None = None,
    ) -> ConversationPage:
        """Up to ``limit`` chats, newest first, starting after the cursor ``after`` (the previous page's).

        A cursor rather than an offset: chats created or deleted between two pages neither repeat nor vanish.
        ``pinned`` and ``folder`` (when not None) keep only the chats pinned (or not) and in that folder ("" for
        none); ``total`` counts the chats that pass them.
        """
        _check_page(limit)
        where, params = _chat_filter(pinned, folder)
        cursor = list(where)
        if after is not None:
            cursor.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
        clause = f" WHERE {' AND '.join(cursor)}" if cursor else ""
        count_clause = f" WHERE {' AND '.join(where)}"
        args = (*params, *((after[0], after[0], after[1]) if after is not None else ()))
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT id, title, updated_at FROM conversations{clause} ORDER BY updated_at DESC, id DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
            total = int(conn.execute(f"SELECT COUNT(*) FROM conversations{count_clause}", params).fetchone()[0])
        chats = [ChatSummary(r[0], r[1], r[2]) for r in rows[:limit]]
        more = len(rows) > limit
        return ConversationPage(chats, total, (chats[-1].updated_at, chats[-1].id) if more else None)

    def summary(self, conversation_id: int) -> ChatInfo | None:
        """A chat's list row (title, time, pin, folder) without its messages; None when there is no such chat (or
        it is deleted)."""
        with self._reading() as conn:
            row = conn.execute(
                f"SELECT id, title, updated_at, pinned, folder FROM conversations WHERE id = ? AND {_LIVE}",
                (conversation_id,),
            ).fetchone()
        return ChatInfo(row[0], row[1], row[2], bool(row[3]), row[4]) if row else None

    def folders(self) -> list[str]:
        """The folder names in use, sorted (case-insensitively)."""
        with self._reading() as conn:
            rows = conn.execute(f"SELECT DISTINCT folder FROM conversations WHERE folder != '' AND {_LIVE}").fetchall()
        return sorted((row[0] for row in rows), key=str.casefold)

    def chats_with_counts(self) -> list[tuple[int, str, float, int]]:
        """(id, title, updated_at, messages) of every chat, most recently active first."""
        with self._reading() as conn:
            rows = conn.execute(
                """SELECT c.id, c.title, c.updated_at,
                          (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id)
                   FROM conversations c WHERE c.deleted_at IS NULL ORDER BY c.updated_at DESC, c.id DESC"""
            ).fetchall()
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Messages whose text or thinking holds every word of ``text`` (newest first), with a snippet.

        Anything may be typed: FTS operators and quotes are plain words (see ``app.core.chat.search_query``).
        """
        _check_page(limit)
        query = fts_query(text)
        if query is None:
            return []
        with self._reading() as conn:
            rows = conn.execute(_SEARCH, (MARK_OPEN, MARK_CLOSE, query, limit)).fetchall()
        return [SearchHit(*row) for row in rows]

    def fork(self, conversation_id: int, at: int, last_turns: int | None = None) -> Conversation:
        """A new chat holding message ``at`` (1-based) and those before it, or only the last ``last_turns`` turns
        of them; it records where it came from. Returns the new chat (with its messages)."""
        source = self.load(conversation_id)
        fork = fork_conversation(source, at, last_turns)
        [fork.id] = self.import_conversations([fork])
        return self.load(fork.id)

    def count_messages(self, conversation_id: int) -> int:
        """How many messages a conversation holds (``NotFoundError`` for an unknown id)."""
        with self._reading() as conn:
            self._require_conversation(conn, conversation_id)
            row = conn.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (conversation_id,))
            return int(row.fetchone()[0])

    def messages_page(self, conversation_id: int, offset: int, limit: int) -> list[Message]:
        """Messages ``offset`` .. ``offset + limit - 1`` of a conversation, in order (fewer at its end)."""
        _check_page(limit, offset)
        with self._reading() as conn:
            self._require_conversation(conn, conversation_id)
            rows = conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY position LIMIT ? OFFSET ?",
                (conversation_id, limit, offset),
            ).fetchall()
        return [_message_from_row(row) for row in rows]

    def import_conversations(self, conversations: Iterable[Conversation]) -> list[int]:
        """Store whole conversations with their messages in one transaction (an import, a benchmark's history).

        A conversation's ``updated_at`` is kept when set (else now); returns the new ids, in order. The
        objects are not changed. Nothing is stored if any of them fails.
        """
        ids: list[int] = []
        with self._writing() as conn:
            for conversation in conversations:
                stamp = conversation.updated_at or self._stamp(conn)
                cur = conn.execute(
                    """INSERT INTO conversations (title, system_prompt, created_at, updated_at, forked_from, forked_at,
                                                  pinned, folder, overflow, tools_json, documents_json)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (conversation.title, conversation.system_prompt, stamp, stamp, *_conversation_extras(conversation)),
                )
                assert cur.lastrowid is not None
                ids.append(cur.lastrowid)
                conn.executemany(_INSERT_MESSAGE, _message_rows(cur.lastrowid, conversation.messages, stamp))
        return ids

    def load(self, conversation_id: int) -> Conversation:
        """A conversation with all its messages in order (ids set, stats parsed)."""
        with self._reading() as conn:
            head = self._require_conversation(conn, conversation_id)
            rows = conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY position",
                (conversation_id,),
            ).fetchall()
        return Conversation(
            title=head["title"],
            system_prompt=head["system_prompt"],
            messages=[_message_from_row(row) for row in rows],
            id=head["id"],
            updated_at=head["updated_at"],
            forked_from=head["forked_from"],
            forked_at=head["forked_at"],
            pinned=bool(head["pinned"]),
            folder=head["folder"],
            overflow=_overflow(head["overflow"]),
            tools=_chat_tools(head["tools_json"]),
            documents=_chat_documents(head["documents_json"]),
        )

    def rename(self, conversation_id: int, title: str) -> None:
        """Change a conversation's title (its place in the newest-first list stays); spaces and line breaks are
        collapsed, and an empty title raises ``InvalidInputError``."""
        title = " ".join(title.split())
        if not title:
            raise errors.InvalidInputError("A chat needs a name: type at least one character.")
        with self._writing() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, text: str) -> None:
        """Change a conversation's system prompt; counts as activity (moves it to the top)."""
        with self._writing() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?", (text, conversation_id))
            self._touch(conn, conversation_id)

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        """Pin a conversation (pinned chats are listed first) or unpin it; not counted as activity."""
        self._set_column(conversation_id, "pinned", int(pinned))

    def set_folder(self, conversation_id: int, folder: str) -> None:
        """Put a conversation in a folder ("" takes it out of any); not counted as activity."""
        self._set_column(conversation_id, "folder", " ".join(folder.split()))

    def set_overflow(self, conversation_id: int, policy: OverflowPolicy) -> None:
        """What the chat does when its history outgrows the model's context."""
        self._set_column(conversation_id, "overflow", str(OverflowPolicy(policy)))

    def set_tools(self, conversation_id: int, tools: ChatTools) -> None:
        """The MCP tools the chat may use, and those it runs without asking."""
        self._set_column(conversation_id, "tools_json", _tools_json(tools))

    def set_documents(self, conversation_id: int, documents: list[ChatDocument]) -> None:
        """The files, folders and collections the chat answers from."""
        self._set_column(conversation_id, "documents_json", _documents_json(documents))

    def _set_column(self, conversation_id: int, column: str, value: Any) -> None:
        with self._writing() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute(f"UPDATE conversations SET {column} = ? WHERE id = ?", (value, conversation_id))

    def delete(self, conversation_id: int) -> None:
        """Delete a conversation and all its messages; an unknown id is ignored."""
        with self._writing() as conn:
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- delete with undo: mark, then restore or purge

    def mark_deleted(self, conversation_id: int) -> None:
        """Hide a conversation from every list, count and search, keeping all of it (messages, pin, folder) until
        ``restore`` brings it back or ``purge`` deletes it; not counted as activity."""
        self._set_column(conversation_id, "deleted_at", time.time())

    def restore(self, conversation_id: int) -> None:
        """Undo ``mark_deleted``: the chat is back where it was, with everything it held."""
        self._set_column(conversation_id, "deleted_at", None)

    def purge(self, conversation_id: int) -> bool:
        """Delete for good a conversation marked deleted (one not marked is left alone); True when it went."""
        with self._writing() as conn:
            cur = conn.execute(f"DELETE FROM conversations WHERE id = ? AND NOT {_LIVE}", (conversation_id,))
            return cur.rowcount > 0

    def purge_deleted(self) -> list[str]:
        """Delete for good every conversation still marked deleted (the app stopped before their undo time was
        over); returns their titles."""
        with self._writing() as conn:
            rows = conn.execute(f"SELECT id, title FROM conversations WHERE NOT {_LIVE} ORDER BY id").fetchall()
            conn.executemany("DELETE FROM conversations WHERE id = ?", [(row[0],) for row in rows])
        return [row[1] for row in rows]

    # -- messages

    def append_message(self, conversation_id: int, message: Message) -> Message:
        """Add ``message`` after the conversation's last one, commit, and set ``message.id``; returns ``message``."""
        if message.id is not None:
            raise ValueError(f"Message is already stored (id {message.id}); use update_message.")
        with self._writing() as conn:
            self._require_conversation(conn, conversation_id)
            position = conn.execute(
                "SELECT COALESCE(MAX(position), -1) + 1 FROM messages WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()[0]
            cur = conn.execute(
                _INSERT_MESSAGE,
                {
                    "conversation_id": conversation_id,
                    "position": position,
                    "role": str(message.role),
                    "created_at": time.time(),
                    **_message_fields(message),
                },
            )
            self._touch(conn, conversation_id)
        message.id = cur.lastrowid
        return message

    def update_message(self, message: Message) -> None:
        """Save a stored message's content, reasoning, attachments, status, stats, error, model, backend and settings
        (role is fixed)."""
        if message.id is None:
            raise ValueError("Message has no id: append_message it first.")
        with self._writing() as conn:
            cur = conn.execute(
                """UPDATE messages SET content = :content, status = :status, model = :model, backend = :backend,
                                       settings_json = :settings_json, stats_json = :stats_json, error = :error,
                                       reasoning = :reasoning, attachments_json = :attachments_json,
                                       tool_calls_json = :tool_calls_json, versions_json = :versions_json,
                                       sources_json = :sources_json
                   WHERE id = :id""",
                {"id": message.id, **_message_fields(message)},
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"No message with id {message.id}.")
            row = conn.execute("SELECT conversation_id FROM messages WHERE id = ?", (message.id,)).fetchone()
            self._touch(conn, row[0])

    def truncate_after(self, conversation_id: int, message_id: int, inclusive: bool) -> int:
        """Delete the messages after ``message_id`` (and it too when ``inclusive``); returns how many went.

        ``inclusive=True`` suits "edit an earlier message and resend"; ``False`` keeps the message, e.g. the
        user turn before a reply being regenerated.
        """
        with self._writing() as conn:
            row = conn.execute(
                "SELECT position FROM messages WHERE id = ? AND conversation_id = ?", (message_id, conversation_id)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"No message with id {message_id} in conversation {conversation_id}.")
            op = ">=" if inclusive else ">"
            cur = conn.execute(
                f"DELETE FROM messages WHERE conversation_id = ? AND position {op} ?", (conversation_id, row[0])
            )
            self._touch(conn, conversation_id)
            return cur.rowcount

    def replace_tail(self, conversation_id: int, index: int, messages: list[Message]) -> list[int]:
        """Make ``messages`` the conversation's messages from position ``index`` on (those there go), in one
        transaction (switching a message's version swaps the tail after it); returns the new rows' ids."""
        with self._writing() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (conversation_id, index))
            ids: list[int] = []
            for position, message in enumerate(messages, start=index):
                row = {"conversation_id": conversation_id, "position": position, "role": str(message.role),
                       "created_at": time.time(), **_message_fields(message)}  # fmt: skip
                cur = conn.execute(_INSERT_MESSAGE, row)
                assert cur.lastrowid is not None
                ids.append(cur.lastrowid)
            self._touch(conn, conversation_id)
        return ids

    def recover_interrupted(self) -> int:
        """At start-up: mark every reply still STREAMING (the app died mid-reply) INTERRUPTED; returns how many."""
        with self._writing() as conn:
            cur = conn.execute(
                "UPDATE messages SET status = ? WHERE status = ?",
                (str(MessageStatus.INTERRUPTED), str(MessageStatus.STREAMING)),
            )
            return cur.rowcount

    # -- lifetime

    def close(self) -> None:
        """Close the database; later calls raise ``ConversationStoreError``. Safe to call twice."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ConversationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- asyncio wrapper --------------------------------------------------------------------------------------------


def _new_executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="conversation-store")


class AsyncConversationStore:
    """``ConversationStore`` for asyncio code: every call runs on one dedicated worker thread, in call order.

    Messages are copied on the caller's thread when a call starts (at once when awaited directly), so the
    caller may keep changing a streaming reply while an earlier version of it is being saved.
    """

    def __init__(self, store: ConversationStore, executor: ThreadPoolExecutor | None = None) -> None:
        """Wrap ``store``; ``executor`` (one worker) is owned and shut down by ``aclose``."""
        self.store = store
        self._executor = executor or _new_executor()
        self._closed = False

    @classmethod
    async def open(cls, path: Path) -> AsyncConversationStore:
        """Open the store at ``path`` on the worker thread (opening checks the file, which is disk I/O)."""
        executor = _new_executor()
        try:
            store = await asyncio.get_running_loop().run_in_executor(executor, ConversationStore, path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(store, executor)

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise ConversationStoreError(f"The conversation history at {self.store.path} is closed.")
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def create(self, title: str = "New chat", system_prompt: str = "") -> Conversation:
        """See ``ConversationStore.create``."""
        return await self._call(self.store.create, title, system_prompt)

    async def list_conversations(self) -> list[tuple[int, str, float]]:
        """See ``ConversationStore.list_conversations``."""
        return await self._call(self.store.list_conversations)

    async def count_conversations(self) -> int:
        """See ``ConversationStore.count_conversations``."""
        return await self._call(self.store.count_conversations)

    async def conversations_page(
        self,
        limit: int = 100,
        after: tuple[float, int] | None = None,
        *,
        pinned: bool | None = None,
        folder: str | None = None,
    ) -> ConversationPage:
        """See ``ConversationStore.conversations_page``."""
        return await self._call(self.store.conversations_page, limit, after, pinned=pinned, folder=folder)

    async def summary(self, conversation_id: int) -> ChatInfo | None:
        """See ``ConversationStore.summary``."""
        return await self._call(self.store.summary, conversation_id)

    async def folders(self) -> list[str]:
        """See ``ConversationStore.folders``."""
        return await self._call(self.store.folders)

    async def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """See ``ConversationStore.search``."""
        return await self._call(self.store.search, text, limit)

    async def fork(self, conversation_id: int, at: int, last_turns: int | None = None) -> Conversation:
        """See ``ConversationStore.fork``."""
        return await self._call(self.store.fork, conversation_id, at, last_turns)

    async def count_messages(self, conversation_id: int) -> int:
        """See ``ConversationStore.count_messages``."""
        return await self._call(self.store.count_messages, conversation_id)

    async def messages_page(self, conversation_id: int, offset: int, limit: int) -> list[Message]:
        """See ``ConversationStore.messages_page``."""
        return await self._call(self.store.messages_page, conversation_id, offset, limit)

    async def import_conversations(self, conversations: list[Conversation]) -> list[int]:
        """See ``ConversationStore.import_conversations``; the list is copied when the call starts."""
        return await self._call(self.store.import_conversations, copy.deepcopy(conversations))

    async def load(self, conversation_id: int) -> Conversation:
        """See ``ConversationStore.load``."""
        return await self._call(self.store.load, conversation_id)

    async def rename(self, conversation_id: int, title: str) -> None:
        """See ``ConversationStore.rename``."""
        await self._call(self.store.rename, conversation_id, title)

    async def set_system_prompt(self, conversation_id: int, text: str) -> None:
        """See ``ConversationStore.set_system_prompt``."""
        await self._call(self.store.set_system_prompt, conversation_id, text)

    async def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        """See ``ConversationStore.set_pinned``."""
        await self._call(self.store.set_pinned, conversation_id, pinned)

    async def set_folder(self, conversation_id: int, folder: str) -> None:
        """See ``ConversationStore.set_folder``."""
        await self._call(self.store.set_folder, conversation_id, folder)

    async def set_overflow(self, conversation_id: int, policy: OverflowPolicy) -> None:
        """See ``ConversationStore.set_overflow``."""
        await self._call(self.store.set_overflow, conversation_id, policy)

    async def set_documents(self, conversation_id: int, documents: list[ChatDocument]) -> None:
        await self._call(self.store.set_documents, conversation_id, documents)

    async def set_tools(self, conversation_id: int, tools: ChatTools) -> None:
        """See ``ConversationStore.set_tools``; the setting is copied when the call starts."""
        await self._call(self.store.set_tools, conversation_id, copy.deepcopy(tools))

    async def delete(self, conversation_id: int) -> None:
        """See ``ConversationStore.delete``."""
        await self._call(self.store.delete, conversation_id)

    async def mark_deleted(self, conversation_id: int) -> None:
        """See ``ConversationStore.mark_deleted``."""
        await self._call(self.store.mark_deleted, conversation_id)

    async def restore(self, conversation_id: int) -> None:
        """See ``ConversationStore.restore``."""
        await self._call(self.store.restore, conversation_id)

    async def purge(self, conversation_id: int) -> bool:
        """See ``ConversationStore.purge``."""
        return await self._call(self.store.purge, conversation_id)

    async def purge_deleted(self) -> list[str]:
        """See ``ConversationStore.purge_deleted``."""
        return await self._call(self.store.purge_deleted)

    async def append_message(self, conversation_id: int, message: Message) -> Message:
        """See ``ConversationStore.append_message``; sets ``message.id`` on the caller's object."""
        stored = await self._call(self.store.append_message, conversation_id, copy.deepcopy(message))
        message.id = stored.id
        return message

    async def update_message(self, message: Message) -> None:
        """See ``ConversationStore.update_message``; saves the message as it is at the moment of the call."""
        await self._call(self.store.update_message, copy.deepcopy(message))

    async def truncate_after(self, conversation_id: int, message_id: int, inclusive: bool) -> int:
        """See ``ConversationStore.truncate_after``."""
        return await self._call(self.store.truncate_after, conversation_id, message_id, inclusive)

    async def replace_tail(self, conversation_id: int, index: int, messages: list[Message]) -> list[int]:
        """See ``ConversationStore.replace_tail``; the messages are copied when the call starts."""
        return await self._call(self.store.replace_tail, conversation_id, index, copy.deepcopy(messages))

    async def recover_interrupted(self) -> int:
        """See ``ConversationStore.recover_interrupted``."""
        return await self._call(self.store.recover_interrupted)

    async def aclose(self) -> None:
        """Close the store after every call already made has run, then release the worker thread."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        finally:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncConversationStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
