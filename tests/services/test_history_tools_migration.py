"""Schema 4 (tools in chat): a history written by schema 3 opens with every message, and a reply's tool calls
(approvals, results) and a chat's tools round-trip. The v3 database is written with raw SQL, as schema 3 wrote it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Message, Role
from app.core.chat.tool_use import Approval, ChatTools, ToolUse
from app.services.chat.history import SCHEMA_VERSION, ConversationStore

V3_SCHEMA = [
    """CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
       system_prompt TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, updated_at REAL NOT NULL,
       forked_from INTEGER, forked_at INTEGER, pinned INTEGER NOT NULL DEFAULT 0, folder TEXT NOT NULL DEFAULT '',
       overflow TEXT NOT NULL DEFAULT 'drop_oldest')""",
    """CREATE TABLE messages (id INTEGER PRIMARY KEY,
       conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
       position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
       model TEXT, backend TEXT, settings_json TEXT NOT NULL DEFAULT '{}', stats_json TEXT, error TEXT,
       created_at REAL NOT NULL, reasoning TEXT NOT NULL DEFAULT '', attachments_json TEXT,
       UNIQUE (conversation_id, position))""",
    "CREATE INDEX conversations_by_update ON conversations(updated_at)",
    """CREATE VIRTUAL TABLE messages_fts USING fts5(content, reasoning, content='messages', content_rowid='id',
       tokenize='unicode61 remove_diacritics 2', prefix='2 3')""",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
         INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
       END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, reasoning ON messages BEGIN
         INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
         VALUES ('delete', old.id, old.content, old.reasoning);
         INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
       END""",
    "CREATE INDEX conversations_by_pin ON conversations(pinned, updated_at, id)",
]


@pytest.fixture
def v3_db(tmp_path: Path) -> Path:
    path = tmp_path / "history" / "conversations.sqlite3"
    path.parent.mkdir(parents=True)
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statement in V3_SCHEMA:
            raw.execute(statement)
        raw.execute("INSERT INTO conversations VALUES (1, 'Old chat', '', 100.0, 200.0, NULL, NULL, 1, 'Work', "
                    "'stop')")  # fmt: skip
        raw.execute("INSERT INTO messages VALUES (1, 1, 0, 'user', 'hello', 'complete', NULL, NULL, '{}', NULL, "
                    "NULL, 100.0, '', NULL)")  # fmt: skip
        raw.execute("INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'hi there', 'complete', 'tiny', 'llamacpp', "
                    "'{}', NULL, NULL, 101.0, 'mm', NULL)")  # fmt: skip
        raw.execute("PRAGMA user_version = 3")
    return path


def test_a_v3_history_opens_with_its_messages_and_no_tools(v3_db: Path) -> None:
    with ConversationStore(v3_db) as store:
        chat = store.load(1)
        assert store.search("there")[0].message_id == 2  # the search index still answers
    assert SCHEMA_VERSION >= 4
    assert [(m.role, m.content, m.tool_calls) for m in chat.messages] == [
        (Role.USER, "hello", []), (Role.ASSISTANT, "hi there", [])]  # fmt: skip
    assert chat.messages[1].reasoning == "mm" and chat.pinned and chat.folder == "Work"
    assert chat.tools == ChatTools()


def test_after_migrating_tool_calls_and_chat_tools_round_trip(v3_db: Path) -> None:
    calls = [
        ToolUse("c1", "add", '{"a": 1}', "test", "add", Approval.ALWAYS, result="3", result_bytes=1),
        ToolUse("c2", "crash", "{}", "test", "crash", Approval.DENIED, reason="not now", result="Denied: not now"),
    ]
    tools = ChatTools({"test": ["add", "crash"], "builtin": None}, always=["test/add"])
    with ConversationStore(v3_db) as store:
        reply = store.append_message(1, Message(Role.ASSISTANT, "", tool_calls=calls))
        store.set_tools(1, tools)
        reply.tool_calls[1].result_bytes = 15
        store.update_message(reply)
        [copied] = store.import_conversations([Conversation("Copy", messages=[reply], tools=tools)])
        chat, copy = store.load(1), store.load(copied)
    assert chat.messages[-1].tool_calls == calls and calls[1].result_bytes == 15
    assert chat.tools == tools and copy.tools == tools and copy.messages[0].tool_calls == calls
    assert chat.prompt_messages()[-2:] == [
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "name": "crash", "content": "Denied: not now"},
    ]


def test_a_damaged_tool_calls_column_reads_as_none_and_the_chat_still_opens(v3_db: Path) -> None:
    with ConversationStore(v3_db) as store:
        pass
    with closing(sqlite3.connect(v3_db)) as raw, raw:
        raw.execute("UPDATE messages SET tool_calls_json = '[{\"id\": ' WHERE id = 2")
        raw.execute("UPDATE conversations SET tools_json = 'nonsense' WHERE id = 1")
    with ConversationStore(v3_db) as store:
        chat = store.load(1)
    assert chat.messages[1].content == "hi there" and chat.messages[1].tool_calls == []
    assert chat.tools == ChatTools()


def test_a_fork_keeps_the_calls_and_the_servers_but_asks_again(v3_db: Path) -> None:
    call = ToolUse("c1", "add", "{}", "test", "add", Approval.ALWAYS, result="3", result_bytes=1)
    with ConversationStore(v3_db) as store:
        store.append_message(1, Message(Role.ASSISTANT, "", tool_calls=[call]))
        store.set_tools(1, ChatTools({"test": None}, always=["test/add"]))
        fork = store.fork(1, 3)
    assert fork.messages[-1].tool_calls == [call]
    assert fork.tools == ChatTools({"test": None})
