"""Schema 7 (documents in chat): a history written by schema 6 opens with every chat and message (no documents, no
sources), and a chat's documents and a reply's sources round-trip; a damaged sources column reads as none."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from app.core.chat.conversation import Message, Role
from app.core.documents.citations import ChatDocument, Source
from app.services.chat.history import SCHEMA_VERSION, ConversationStore


def _as_schema_6(path: Path) -> None:
    """The file as schema 6 left it: without the columns schema 7 added."""
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("ALTER TABLE messages DROP COLUMN sources_json")
        raw.execute("ALTER TABLE conversations DROP COLUMN documents_json")
        raw.execute("PRAGMA user_version = 6")
        raw.commit()


def test_a_schema_6_history_opens_and_then_keeps_documents_and_sources(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    with ConversationStore(path) as store:
        chat = store.create("Old chat")
        assert chat.id is not None
        store.append_message(chat.id, Message(Role.USER, "hello"))
        store.append_message(chat.id, Message(Role.ASSISTANT, "hi"))
    _as_schema_6(path)
    source = Source(1, "/d/a.pdf", 2, "passage", "Intro", 9, 0, 7)
    with ConversationStore(path) as store:
        old = store.load(chat.id)
        assert [m.content for m in old.messages] == ["hello", "hi"]
        assert old.documents == [] and old.messages[1].sources == []
        store.set_documents(chat.id, [ChatDocument("notes"), ChatDocument("chat documents", "/d/a.pdf")])
        reply = old.messages[1]
        reply.sources = [source]
        store.update_message(reply)
    with ConversationStore(path) as store:
        again = store.load(chat.id)
    assert again.documents == [ChatDocument("notes"), ChatDocument("chat documents", "/d/a.pdf")]
    assert again.messages[1].sources == [source]
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 7
        raw.execute("UPDATE messages SET sources_json = '[{\"number\": 1}]' WHERE id = ?", (reply.id,))
        raw.commit()
    with ConversationStore(path) as store:
        assert store.load(chat.id).messages[1].sources == []  # damaged: shown without them
