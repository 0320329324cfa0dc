"""Every history schema change is a migration: a database written by the previous version opens, keeps every
message, and gains the new columns with their defaults. The v1 database is written with the v1 DDL and rows as
the previous version wrote them (raw SQL, not through today's code)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.core.chat.conversation import Attachment, Conversation, Message, OverflowPolicy, Role
from app.services.chat.history import SCHEMA_VERSION, ConversationStore

V1_SCHEMA = [
    """CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
       system_prompt TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, updated_at REAL NOT NULL)""",
    """CREATE TABLE messages (id INTEGER PRIMARY KEY,
       conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
       position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
       model TEXT, backend TEXT, settings_json TEXT NOT NULL DEFAULT '{}', stats_json TEXT, error TEXT,
       created_at REAL NOT NULL, UNIQUE (conversation_id, position))""",
    "CREATE INDEX conversations_by_update ON conversations(updated_at)",
]


def _write_v1(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statement in V1_SCHEMA:
            raw.execute(statement)
        raw.execute("INSERT INTO conversations VALUES (1, 'Old chat', 'Be brief.', 100.0, 200.0)")
        stats = json.dumps({"prompt_tokens": 5, "completion_tokens": 7, "ttft_ms": 12.5})
        raw.execute(
            "INSERT INTO messages VALUES (1, 1, 0, 'user', 'hello', 'complete', NULL, NULL, '{}', NULL, NULL, 100.0)"
        )
        raw.execute(
            "INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'hi there', 'complete', 'tiny', 'llama.cpp', "
            "'{\"temperature\": 0.2}', ?, NULL, 101.0)",
            (stats,),
        )
        raw.execute("PRAGMA user_version = 1")


@pytest.fixture
def v1_db(tmp_path: Path) -> Path:
    path = tmp_path / "history" / "conversations.sqlite3"
    _write_v1(path)
    return path


def test_a_v1_history_opens_with_every_message_and_the_new_defaults(v1_db: Path) -> None:
    with ConversationStore(v1_db) as store:
        chat = store.load(1)
    assert (chat.title, chat.system_prompt, chat.updated_at) == ("Old chat", "Be brief.", 200.0)
    assert [(m.role, m.content) for m in chat.messages] == [(Role.USER, "hello"), (Role.ASSISTANT, "hi there")]
    reply = chat.messages[1]
    assert reply.settings == {"temperature": 0.2} and reply.stats and reply.stats.completion_tokens == 7
    assert reply.reasoning == "" and reply.attachments == []
    assert (chat.forked_from, chat.forked_at, chat.pinned, chat.folder) == (None, None, False, "")
    assert chat.overflow is OverflowPolicy.DROP_OLDEST
    with closing(sqlite3.connect(v1_db)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_after_migrating_the_new_fields_round_trip(v1_db: Path) -> None:
    picture = Attachment("image", "ab/ab12.png", "image/png", name="chart é.png", width=640, height=480, size=1234)
    with ConversationStore(v1_db) as store:
        store.append_message(1, Message(Role.USER, "what is this?", attachments=[picture]))
        store.append_message(1, Message(Role.ASSISTANT, "A chart.", reasoning="The user sent a picture…"))
        store.set_pinned(1, True)
        store.set_folder(1, "  Work   notes ")
        store.set_overflow(1, OverflowPolicy.TRUNCATE_MIDDLE)
        [fork_id] = store.import_conversations(
            [Conversation("Fork", messages=[Message(Role.USER, "hello")], forked_from=1, forked_at=1)]
        )
    with ConversationStore(v1_db) as store:
        chat, fork = store.load(1), store.load(fork_id)
    assert chat.messages[2].attachments == [picture] and chat.messages[3].reasoning == "The user sent a picture…"
    assert chat.messages[3].content == "A chart."
    assert (chat.pinned, chat.folder, chat.overflow) == (True, "Work notes", OverflowPolicy.TRUNCATE_MIDDLE)
    assert (fork.forked_from, fork.forked_at) == (1, 1)


def test_a_damaged_attachments_column_reads_as_none_and_the_chat_still_opens(v1_db: Path) -> None:
    with ConversationStore(v1_db) as store:
        store.load(1)  # migrates
    with closing(sqlite3.connect(v1_db, isolation_level=None)) as raw:
        raw.execute("UPDATE messages SET attachments_json = '[[[[' WHERE id = 1")
    with ConversationStore(v1_db) as store:
        chat = store.load(1)
    assert chat.messages[0].content == "hello" and chat.messages[0].attachments == []
