"""Search (FTS5), forks, pins and folders in the real store; migration 3 on a database written by schema 2."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Message, MessageStatus, Role
from app.core.errors import InvalidInputError
from app.services.chat.history import SCHEMA_VERSION, ConversationStore, NotFoundError

# Schema 2 as the previous version wrote it: the v1 DDL, then v2's columns (raw SQL, not today's code).
V2_SCHEMA = [
    """CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
       system_prompt TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, updated_at REAL NOT NULL)""",
    """CREATE TABLE messages (id INTEGER PRIMARY KEY,
       conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
       position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
       model TEXT, backend TEXT, settings_json TEXT NOT NULL DEFAULT '{}', stats_json TEXT, error TEXT,
       created_at REAL NOT NULL, UNIQUE (conversation_id, position))""",
    "CREATE INDEX conversations_by_update ON conversations(updated_at)",
    "ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE messages ADD COLUMN attachments_json TEXT",
    "ALTER TABLE conversations ADD COLUMN forked_from INTEGER",
    "ALTER TABLE conversations ADD COLUMN forked_at INTEGER",
    "ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE conversations ADD COLUMN folder TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE conversations ADD COLUMN overflow TEXT NOT NULL DEFAULT 'drop_oldest'",
]


def _write_v2(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statement in V2_SCHEMA:
            raw.execute(statement)
        raw.execute(
            "INSERT INTO conversations (id, title, system_prompt, created_at, updated_at, pinned, folder) "
            "VALUES (1, 'Rust lifetimes', '', 100.0, 200.0, 1, 'Work')"
        )
        raw.execute("INSERT INTO conversations (id, title, created_at, updated_at) VALUES (2, 'Soup', 100.0, 300.0)")
        rows = [
            (1, 1, 0, "user", "Why does the borrow checker complain?", ""),
            (2, 1, 1, "assistant", "Because the reference outlives its owner.", "Think about scopes and lifetimes."),
            (3, 2, 0, "user", "A recipe for tomato soup please", ""),
        ]
        for mid, cid, pos, role, content, reasoning in rows:
            raw.execute(
                "INSERT INTO messages (id, conversation_id, position, role, content, status, settings_json, "
                "created_at, reasoning, attachments_json) VALUES (?, ?, ?, ?, ?, 'complete', '{}', 100.0, ?, ?)",
                (mid, cid, pos, role, content, reasoning, json.dumps([]) if mid == 3 else None),
            )
        raw.execute("PRAGMA user_version = 2")


@pytest.fixture
def store(tmp_path: Path):
    with ConversationStore(tmp_path / "conversations.sqlite3") as opened:
        yield opened


def _chat(store: ConversationStore, title: str, *texts: str) -> int:
    roles = (Role.USER, Role.ASSISTANT)
    messages = [Message(roles[i % 2], text) for i, text in enumerate(texts)]
    [chat_id] = store.import_conversations([Conversation(title, messages=messages)])
    return chat_id


# --- migration 3 --------------------------------------------------------------------------------------------


def test_migration_3_indexes_a_schema_2_history_and_keeps_everything(tmp_path: Path) -> None:
    db = tmp_path / "history" / "conversations.sqlite3"
    _write_v2(db)
    with ConversationStore(db) as store:
        [hit] = store.search("borrow checker")
        assert (hit.conversation_id, hit.title, hit.message_id, hit.message_index, hit.role) == (
            1, "Rust lifetimes", 1, 0, "user",
        )  # fmt: skip
        [thinking] = store.search("scopes")  # the thinking is searched too
        assert thinking.message_id == 2 and "[scopes]" in thinking.marked("[", "]")
        assert [h.conversation_id for h in store.search("tomato")] == [2]
        chat = store.load(1)
        assert chat.pinned and chat.folder == "Work" and chat.messages[1].reasoning.startswith("Think")
    with closing(sqlite3.connect(db)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 3
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert raw.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')").rowcount != 0


def test_the_index_follows_every_write(store: ConversationStore) -> None:
    chat = store.create("Live")
    assert chat.id is not None
    reply = store.append_message(chat.id, Message(Role.ASSISTANT, "", MessageStatus.STREAMING))
    for part in ("The quick", "The quick brown", "The quick brown fox"):
        reply.content = part
        store.update_message(reply)
    assert [h.message_id for h in store.search("fox")] == [reply.id]
    reply.content, reply.reasoning = "Something else", "pondering foxes"
    store.update_message(reply)
    assert store.search("brown") == [] and [h.message_id for h in store.search("foxes")] == [reply.id]
    store.truncate_after(chat.id, reply.id or 0, inclusive=True)
    assert store.search("foxes") == []
    other = _chat(store, "Other", "foxes again")
    store.delete(other)
    assert store.search("foxes") == []


# --- search -------------------------------------------------------------------------------------------------


def test_search_marks_the_match_and_points_at_the_message(store: ConversationStore) -> None:
    first = _chat(store, "Lists", "How do I sort a list in Python?", "Use sorted(values).")
    second = _chat(store, "Trees", "Balance a binary tree", "Rotate the nodes; then sort the keys.")
    hits = store.search("sort")
    # newest first; the last word is also a prefix, as typed ("sort" finds "sorted")
    assert [(h.conversation_id, h.message_index) for h in hits] == [(second, 1), (first, 1), (first, 0)]
    assert hits[2].marked("<b>", "</b>") == "How do I <b>sort</b> a list in Python?"
    assert hits[0].title == "Trees"
    assert [h.message_index for h in store.search("sorted values")] == [1]  # every word must match
    assert store.search("sor")[0].conversation_id == second
    assert store.search("so") == []  # two letters: only the word itself


@pytest.mark.parametrize(
    "typed",
    ['"unbalanced', "NOT sort", "sort OR", "NEAR(sort list)", "content:sort", "*", "^sort", '"', "(", "a AND", "-sort"],
)
def test_operators_and_quotes_are_plain_words_never_an_error(store: ConversationStore, typed: str) -> None:
    _chat(store, "Lists", "How do I sort a list? NOT with bubble sort or near anything")
    store.search(typed)  # never raises


def test_an_operator_word_is_searched_for_as_a_word(store: ConversationStore) -> None:
    plain = _chat(store, "Plain", "hello there")
    negated = _chat(store, "Negated", "not hello, goodbye")
    assert [h.conversation_id for h in store.search("NOT hello")] == [negated]
    assert {h.conversation_id for h in store.search('"hello')} == {plain, negated}
    assert store.search("hello OR goodbye") == []  # "or" is a word neither message holds


# --- forks ----------------------------------------------------------------------------------------------------


def test_fork_whole_and_last_turns_record_the_origin(store: ConversationStore) -> None:
    origin = _chat(store, "Plan", "Step one?", "Do A.", "Step two?", "Do B.", "Step three?", "Do C.")
    fork = store.fork(origin, 4)
    assert fork.id not in (None, origin) and fork.title == "Plan (fork)"
    assert [m.content for m in fork.messages] == ["Step one?", "Do A.", "Step two?", "Do B."]
    assert (fork.forked_from, fork.forked_at) == (origin, 4)
    short = store.fork(origin, 5, last_turns=1)
    assert [m.content for m in short.messages] == ["Step three?"] and short.forked_at == 5
    assert len(store.load(origin).messages) == 6  # the origin is untouched
    assert store.search("Step two")[0].conversation_id == fork.id  # the fork is searchable at once
    with pytest.raises(InvalidInputError):
        store.fork(origin, 7)
    with pytest.raises(NotFoundError):
        store.fork(999, 1)


# --- pins and folders -------------------------------------------------------------------------------------------


def test_pages_filter_by_pin_and_folder(store: ConversationStore) -> None:
    ids = [_chat(store, f"Chat {i}", f"text {i}") for i in range(5)]
    store.set_pinned(ids[1], True)
    store.set_folder(ids[2], "Work")
    store.set_folder(ids[3], "work  stuff")
    pinned = store.conversations_page(10, pinned=True)
    assert [c.id for c in pinned.chats] == [ids[1]] and pinned.total == 1
    rest = store.conversations_page(2, pinned=False)
    assert [c.id for c in rest.chats] == [ids[4], ids[3]] and rest.total == 4 and rest.after is not None
    more = store.conversations_page(2, rest.after, pinned=False)
    assert [c.id for c in more.chats] == [ids[2], ids[0]] and more.after is None
    work = store.conversations_page(10, folder="Work")
    assert [c.id for c in work.chats] == [ids[2]]
    assert store.folders() == ["Work", "work stuff"]
    info = store.summary(ids[3])
    assert info is not None and (info.title, info.folder, info.pinned) == ("Chat 3", "work stuff", False)
    assert store.summary(12345) is None
    assert [row[3] for row in store.chats_with_counts()] == [1, 1, 1, 1, 1]
