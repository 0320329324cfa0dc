"""Delete with undo in the store: a chat marked deleted is kept whole but hidden from every list, count, folder and
search; ``restore`` brings it back as it was, ``purge`` and ``purge_deleted`` delete it for good. Real SQLite files."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Message, Role
from app.services.chat.history import SCHEMA_VERSION, ConversationStore, NotFoundError


@pytest.fixture
def store(tmp_path: Path):
    with ConversationStore(tmp_path / "conversations.sqlite3") as opened:
        yield opened


def _seed(store: ConversationStore) -> list[int]:
    chats = [
        Conversation(
            "Birds", messages=[Message(Role.USER, "a pelican"), Message(Role.ASSISTANT, "big bill")],
            pinned=True, folder="Zoo", updated_at=1_000.0,
        ),
        Conversation("Fish", messages=[Message(Role.USER, "a pelican ate it")], updated_at=2_000.0),
    ]  # fmt: skip
    return store.import_conversations(chats)


def test_a_marked_chat_is_hidden_everywhere_but_kept_whole(store) -> None:
    birds, fish = _seed(store)
    store.mark_deleted(birds)
    assert [c[0] for c in store.list_conversations()] == [fish] and store.count_conversations() == 1
    assert store.conversations_page(pinned=True).chats == [] and store.conversations_page().total == 1
    assert store.folders() == [] and store.summary(birds) is None
    assert [h.conversation_id for h in store.search("pelican")] == [fish]
    assert [row[0] for row in store.chats_with_counts()] == [fish]
    kept = store.load(birds)  # the data is all there, for an undo
    assert (kept.pinned, kept.folder, [m.content for m in kept.messages]) == (True, "Zoo", ["a pelican", "big bill"])
    assert store.purge(fish) is False  # a chat not marked is never purged
    store.restore(birds)
    assert [c[0] for c in store.list_conversations()] == [fish, birds] and store.folders() == ["Zoo"]
    assert store.conversations_page(pinned=True).chats[0].id == birds
    assert sorted(h.conversation_id for h in store.search("pelican")) == sorted([birds, fish])


def test_purge_deletes_a_marked_chat_for_good(store) -> None:
    birds, fish = _seed(store)
    store.mark_deleted(birds)
    assert store.purge(birds) is True and store.purge(birds) is False
    with pytest.raises(NotFoundError):
        store.load(birds)
    store.mark_deleted(fish)
    assert store.purge_deleted() == ["Fish"] and store.purge_deleted() == []
    assert store.count_conversations() == 0
    with closing(sqlite3.connect(store.path)) as raw:
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0  # the messages went with them


def test_a_history_from_before_soft_delete_opens_with_every_chat_listed(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with ConversationStore(path) as store:
        _seed(store)
    with closing(sqlite3.connect(path)) as raw:  # back to schema 5: no deleted_at column yet
        raw.execute("ALTER TABLE conversations DROP COLUMN deleted_at")
        raw.execute("PRAGMA user_version = 5")
        raw.commit()
    with ConversationStore(path) as store:
        assert [c[1] for c in store.list_conversations()] == ["Fish", "Birds"]
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 6
