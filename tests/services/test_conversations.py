"""The conversation store: real SQLite files in tmp_path, including a process killed mid-reply."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Message, MessageStatus, ReplyStats, Role
from app.services.chat.history import (
    SCHEMA_VERSION,
    AsyncConversationStore,
    ConversationPage,
    ConversationStore,
    ConversationStoreError,
    NotFoundError,
    migrate,
)

ROOT = Path(__file__).resolve().parents[2]
WRITER = ROOT / "tests" / "support" / "conversation_writer.py"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history" / "conversations.sqlite3"


@pytest.fixture
def store(db: Path):
    with ConversationStore(db) as opened:
        yield opened


def _chat(store: ConversationStore, *texts: str) -> tuple[int, list[Message]]:
    """A conversation alternating user and assistant messages with the given texts."""
    conversation = store.create()
    assert conversation.id is not None
    roles = [Role.USER, Role.ASSISTANT]
    messages = [store.append_message(conversation.id, Message(roles[i % 2], t)) for i, t in enumerate(texts)]
    return conversation.id, messages


def _contents(store: ConversationStore, conversation_id: int) -> list[str]:
    return [m.content for m in store.load(conversation_id).messages]


# --- round trips and ordering ---------------------------------------------------------------------------------


def test_round_trip_keeps_every_field(store: ConversationStore, db: Path) -> None:
    conversation = store.create("Physics", system_prompt="Be brief.")
    assert conversation.id is not None
    user = store.append_message(conversation.id, Message(Role.USER, "What is a boson?"))
    stats = ReplyStats(
        prompt_tokens=12,
        completion_tokens=30,
        ttft_ms=85.5,
        decode_tokens_per_s=41.2,
        total_ms=800.0,
        finish_reason="stop",
    )
    reply = Message(
        Role.ASSISTANT,
        "A particle with integer spin.",
        model="gemma-3-270m",
        backend="llama.cpp",
        settings={"temperature": 0.7, "stop": ["</s>"]},
        stats=stats,
    )
    store.append_message(conversation.id, reply)
    failed = Message(Role.ASSISTANT, "Half a rep", MessageStatus.FAILED, error="engine crashed")
    store.append_message(conversation.id, failed)
    assert user.id is not None and reply.id is not None and len({user.id, reply.id, failed.id}) == 3
    store.close()

    with ConversationStore(db) as reopened:
        loaded = reopened.load(conversation.id)
    assert (loaded.id, loaded.title, loaded.system_prompt) == (conversation.id, "Physics", "Be brief.")
    assert loaded.updated_at >= conversation.updated_at
    assert loaded.messages == [user, reply, failed]
    assert loaded.messages[1].stats == stats
    assert loaded.messages[0].stats is None
    assert loaded.messages[2].status is MessageStatus.FAILED and loaded.messages[2].error == "engine crashed"


@pytest.mark.parametrize(
    ("settings_json", "stats_json"),
    [("[" * 100_000, '{"a":' * 100_000), ("{broken", "[1, 2]"), ('"text"', "{broken")],
)
def test_damaged_settings_or_stats_never_stop_a_chat_from_opening(
    store: ConversationStore, db: Path, caplog: pytest.LogCaptureFixture, settings_json: str, stats_json: str
) -> None:
    stats = ReplyStats(prompt_tokens=3, completion_tokens=4, finish_reason="stop")
    conversation_id, (_user, reply) = _chat(store, "hello", "hi there")
    good = store.append_message(conversation_id, Message(Role.ASSISTANT, "kept", settings={"top_k": 5}, stats=stats))
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        update = "UPDATE messages SET settings_json = ?, stats_json = ? WHERE id = ?"
        raw.execute(update, (settings_json, stats_json, reply.id))
    loaded = store.load(conversation_id).messages
    assert [m.content for m in loaded] == ["hello", "hi there", "kept"]  # every message, its text intact
    assert (loaded[1].settings, loaded[1].stats) == ({}, None)  # the damaged columns read as empty
    assert (loaded[2].settings, loaded[2].stats) == ({"top_k": 5}, stats) and good.id == loaded[2].id
    assert f"settings_json of message {reply.id}" in caplog.text and f"stats_json of message {reply.id}" in caplog.text
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:  # reading changed nothing on disk
        row = raw.execute("SELECT settings_json, stats_json FROM messages WHERE id = ?", (reply.id,)).fetchone()
    assert row == (settings_json, stats_json)


def test_messages_keep_their_order(store: ConversationStore) -> None:
    texts = [f"turn {i}" for i in range(12)]
    conversation_id, _ = _chat(store, *texts)
    assert _contents(store, conversation_id) == texts


def test_list_is_newest_first_and_activity_moves_a_chat_up(store: ConversationStore) -> None:
    first, second, _third = (store.create(title) for title in ("first", "second", "third"))
    assert [row[1] for row in store.list_conversations()] == ["third", "second", "first"]

    assert first.id is not None and second.id is not None
    store.append_message(first.id, Message(Role.USER, "hello again"))
    assert [row[1] for row in store.list_conversations()] == ["first", "third", "second"]

    store.rename(second.id, "renamed")  # a rename is not activity: it stays where it is
    rows = store.list_conversations()
    assert [row[1] for row in rows] == ["first", "third", "renamed"]
    assert rows[0][0] == first.id and isinstance(rows[0][2], float)
    assert rows[0][2] > rows[1][2] > rows[2][2]

    store.set_system_prompt(second.id, "You are a pirate.")
    assert store.list_conversations()[0][0] == second.id
    assert store.load(second.id).system_prompt == "You are a pirate."


def test_update_message_saves_streaming_progress_and_final_state(store: ConversationStore, db: Path) -> None:
    conversation_id, _ = _chat(store, "Count to three")
    reply = store.append_message(conversation_id, Message(Role.ASSISTANT, "", MessageStatus.STREAMING))
    reply.content = "one, two"
    store.update_message(reply)
    assert store.load(conversation_id).messages[1].content == "one, two"

    reply.content, reply.status = "one, two, three", MessageStatus.COMPLETE
    reply.stats, reply.model, reply.backend = ReplyStats(completion_tokens=5), "m", "vllm"
    reply.settings = {"top_p": 0.9}
    store.update_message(reply)
    store.close()
    with ConversationStore(db) as reopened:
        assert reopened.load(conversation_id).messages[1] == reply


# --- truncation, deletion, recovery ---------------------------------------------------------------------------


def test_truncate_after_keeps_or_drops_the_given_message(store: ConversationStore) -> None:
    conversation_id, messages = _chat(store, "u1", "a1", "u2", "a2", "u3", "a3")
    other_id, _ = _chat(store, "other u", "other a")
    assert messages[2].id is not None and messages[3].id is not None

    # Regenerate: keep the user turn, drop the reply and everything after it.
    assert store.truncate_after(conversation_id, messages[2].id, inclusive=False) == 3
    assert _contents(store, conversation_id) == ["u1", "a1", "u2"]

    # Edit an earlier user message and resend: it goes too, and new messages follow on.
    assert messages[1].id is not None
    assert store.truncate_after(conversation_id, messages[1].id, inclusive=True) == 2
    assert _contents(store, conversation_id) == ["u1"]
    store.append_message(conversation_id, Message(Role.ASSISTANT, "a1 again"))
    assert _contents(store, conversation_id) == ["u1", "a1 again"]

    assert _contents(store, other_id) == ["other u", "other a"]
    with pytest.raises(NotFoundError):  # a message of another conversation
        store.truncate_after(other_id, messages[0].id or 0, inclusive=True)
    with pytest.raises(NotFoundError):  # a message already removed
        store.truncate_after(conversation_id, messages[3].id, inclusive=False)


def test_delete_cascades_to_messages(store: ConversationStore, db: Path) -> None:
    doomed, _ = _chat(store, "a", "b", "c")
    kept, _ = _chat(store, "d")
    store.delete(doomed)
    store.delete(doomed)  # deleting twice is harmless
    assert [row[0] for row in store.list_conversations()] == [kept]
    with pytest.raises(NotFoundError):
        store.load(doomed)
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        assert raw.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (doomed,)).fetchone()[0] == 0
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1


def test_recover_interrupted_marks_only_streaming_replies(store: ConversationStore) -> None:
    conversation_id, _ = _chat(store, "q1", "done")
    for status in (MessageStatus.STREAMING, MessageStatus.STOPPED, MessageStatus.STREAMING):
        store.append_message(conversation_id, Message(Role.ASSISTANT, "partial", status))
    assert store.recover_interrupted() == 2
    statuses = [m.status for m in store.load(conversation_id).messages]
    assert statuses == [
        MessageStatus.COMPLETE,
        MessageStatus.COMPLETE,
        MessageStatus.INTERRUPTED,
        MessageStatus.STOPPED,
        MessageStatus.INTERRUPTED,
    ]
    assert store.recover_interrupted() == 0


def test_unknown_ids_and_misuse_raise_clear_errors(store: ConversationStore) -> None:
    with pytest.raises(NotFoundError):
        store.load(999)
    with pytest.raises(NotFoundError):
        store.rename(999, "x")
    with pytest.raises(NotFoundError):
        store.append_message(999, Message(Role.USER, "lost"))
    with pytest.raises(NotFoundError):
        store.update_message(Message(Role.USER, "ghost", id=999))
    with pytest.raises(ValueError, match="append_message"):
        store.update_message(Message(Role.USER, "never stored"))
    conversation_id, messages = _chat(store, "once")
    with pytest.raises(ValueError, match="already stored"):
        store.append_message(conversation_id, messages[0])
    store.close()
    store.close()
    with pytest.raises(ConversationStoreError, match="closed"):
        store.list_conversations()


# --- pages -----------------------------------------------------------------------------------------------------


def _imported(store: ConversationStore, count: int, messages: int = 0) -> list[int]:
    """``count`` chats, one a minute apart (the last newest), each with ``messages`` alternating turns."""
    roles = [Role.USER, Role.ASSISTANT]
    return store.import_conversations(
        Conversation(
            f"chat {i}",
            messages=[Message(roles[j % 2], f"{i}.{j}") for j in range(messages)],
            updated_at=1_700_000_000.0 + 60 * i,
        )
        for i in range(count)
    )


def test_conversation_pages_cover_every_chat_once_newest_first(store: ConversationStore) -> None:
    ids = _imported(store, 25)
    seen: list[int] = []
    page = store.conversations_page(10)
    while True:
        assert page.total == 25 and len(page.chats) <= 10
        seen += [chat.id for chat in page.chats]
        if page.after is None:
            break
        page = store.conversations_page(10, page.after)
    assert seen == ids[::-1]
    assert store.count_conversations() == 25
    first = store.conversations_page(10)
    assert first.chats[0] == (ids[-1], "chat 24", 1_700_000_000.0 + 60 * 24)  # (id, title, updated_at)
    assert store.conversations_page(25).after is None  # exactly one page: no cursor to a next one


def test_a_chat_touched_between_pages_neither_repeats_nor_hides_the_rest(store: ConversationStore) -> None:
    ids = _imported(store, 6)
    page = store.conversations_page(3)
    store.append_message(ids[0], Message(Role.USER, "the oldest chat is active again"))  # moves to the top
    store.delete(ids[1])
    rest = store.conversations_page(3, page.after)
    assert [c.id for c in page.chats] == ids[5:2:-1]
    assert [c.id for c in rest.chats] == [ids[2]] and rest.total == 5 and rest.after is None


def test_ties_on_the_update_time_are_ordered_by_id(store: ConversationStore) -> None:
    ids = store.import_conversations(Conversation(f"same {i}", updated_at=1_700_000_000.0) for i in range(5))
    first = store.conversations_page(2)
    second = store.conversations_page(2, first.after)
    third = store.conversations_page(2, second.after)
    assert [c.id for page in (first, second, third) for c in page.chats] == ids[::-1]


def test_message_pages_read_a_chat_in_order(store: ConversationStore) -> None:
    (chat,) = _imported(store, 1, messages=25)
    assert store.count_messages(chat) == 25
    pages = [store.messages_page(chat, offset, 10) for offset in (0, 10, 20)]
    assert [len(page) for page in pages] == [10, 10, 5]
    texts = [m.content for page in pages for m in page]
    assert texts == [f"0.{j}" for j in range(25)] == [m.content for m in store.load(chat).messages]
    assert store.messages_page(chat, 25, 10) == []
    assert all(m.id is not None for page in pages for m in page)


@pytest.mark.parametrize(("offset", "limit"), [(0, 0), (0, -5), (0, 10_001), (-1, 10)])
def test_bad_page_requests_say_what_is_allowed(store: ConversationStore, offset: int, limit: int) -> None:
    (chat,) = _imported(store, 1, messages=3)
    with pytest.raises(ValueError, match="A page"):
        store.messages_page(chat, offset, limit)
    if offset == 0:
        with pytest.raises(ValueError, match="A page holds 1 to 10,000 rows"):
            store.conversations_page(limit)


def test_unknown_chats_in_page_calls_raise_not_found(store: ConversationStore) -> None:
    with pytest.raises(NotFoundError, match="No conversation with id 99"):
        store.messages_page(99, 0, 10)
    with pytest.raises(NotFoundError):
        store.count_messages(99)
    assert store.conversations_page(10) == ConversationPage([], 0, None)


def test_import_keeps_times_messages_and_figures(store: ConversationStore, db: Path) -> None:
    stats = ReplyStats(prompt_tokens=5, completion_tokens=7, finish_reason="length")
    conversation = Conversation(
        "imported",
        system_prompt="Be brief.",
        messages=[Message(Role.USER, "q"), Message(Role.ASSISTANT, "a", model="m", stats=stats)],
        updated_at=1_600_000_000.0,
    )
    (chat,) = store.import_conversations([conversation])
    assert conversation.id is None and conversation.messages[0].id is None  # the objects are not changed
    loaded = store.load(chat)
    assert (loaded.title, loaded.system_prompt, loaded.updated_at) == ("imported", "Be brief.", 1_600_000_000.0)
    assert [(m.role, m.content) for m in loaded.messages] == [(Role.USER, "q"), (Role.ASSISTANT, "a")]
    assert loaded.messages[1].stats == stats and loaded.messages[1].model == "m"
    store.append_message(chat, Message(Role.USER, "next"))  # positions continue after the imported ones
    assert [m.content for m in store.load(chat).messages] == ["q", "a", "next"]


def test_an_import_that_fails_stores_nothing(store: ConversationStore) -> None:
    def conversations():
        yield Conversation("first", messages=[Message(Role.USER, "kept?")])
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        store.import_conversations(conversations())
    assert store.count_conversations() == 0 and store.conversations_page(10).chats == []


def test_async_pages(db: Path) -> None:
    async def scenario() -> None:
        async with await AsyncConversationStore.open(db) as wrapped:
            (chat,) = await wrapped.import_conversations([Conversation("a", messages=[Message(Role.USER, "x")])])
            page = await wrapped.conversations_page(5)
            assert [c.id for c in page.chats] == [chat] and await wrapped.count_conversations() == 1
            assert [m.content for m in await wrapped.messages_page(chat, 0, 5)] == ["x"]
            assert await wrapped.count_messages(chat) == 1

    asyncio.run(scenario())


def test_concurrent_threads_are_serialised(store: ConversationStore) -> None:
    conversation_id, _ = _chat(store)

    def writer(n: int) -> None:
        for i in range(25):
            store.append_message(conversation_id, Message(Role.USER, f"{n}-{i}"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    contents = _contents(store, conversation_id)
    assert sorted(contents) == sorted(f"{n}-{i}" for n in range(4) for i in range(25))


# --- the file: WAL, schema, damage ----------------------------------------------------------------------------


def test_wal_mode_and_schema_version(store: ConversationStore, db: Path) -> None:
    _chat(store, "hello")
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 1
        assert migrate(raw) == SCHEMA_VERSION  # already current: nothing to do


def test_corrupt_file_raises_and_is_left_untouched(db: Path) -> None:
    db.parent.mkdir(parents=True)
    garbage = b"definitely not an sqlite database\n" * 200
    db.write_bytes(garbage)
    with pytest.raises(ConversationStoreError, match="move it aside") as caught:
        ConversationStore(db)
    assert str(db) in str(caught.value)
    assert db.read_bytes() == garbage
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]


def test_damaged_pages_raise_and_the_file_is_left_untouched(db: Path) -> None:
    with ConversationStore(db) as store:
        for i in range(20):
            _chat(store, f"question {i} " * 200, f"answer {i} " * 200)
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[page : len(data)] = bytes(range(256)) * ((len(data) - page) // 256) + b"\x00" * ((len(data) - page) % 256)
    db.write_bytes(bytes(data))
    with pytest.raises(ConversationStoreError, match="damaged"):
        ConversationStore(db)
    assert db.read_bytes() == bytes(data)


def test_newer_schema_is_refused_and_left_untouched(db: Path) -> None:
    ConversationStore(db).close()
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = db.read_bytes()
    with pytest.raises(ConversationStoreError, match="newer version"):
        ConversationStore(db)
    assert db.read_bytes() == before


def test_unopenable_path_raises(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(ConversationStoreError, match=str(folder.name)):
        ConversationStore(folder)


# --- asyncio wrapper ------------------------------------------------------------------------------------------


class _ThreadRecordingStore(ConversationStore):
    """A real store that notes which thread each read runs on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.threads: set[int] = set()
        self.gate = threading.Event()  # list_conversations waits for it, holding up the worker
        self.gate.set()

    def list_conversations(self) -> list[tuple[int, str, float]]:
        self.threads.add(threading.get_ident())
        assert self.gate.wait(timeout=10)
        return super().list_conversations()

    def load(self, conversation_id: int):
        self.threads.add(threading.get_ident())
        return super().load(conversation_id)


def test_async_wrapper_runs_every_call_on_one_worker_thread(db: Path) -> None:
    store = _ThreadRecordingStore(db)

    async def scenario() -> None:
        wrapped = AsyncConversationStore(store)
        conversation = await wrapped.create("async", "sys")
        assert conversation.id is not None
        user = Message(Role.USER, "hi")
        assert await wrapped.append_message(conversation.id, user) is user and user.id is not None
        reply = await wrapped.append_message(conversation.id, Message(Role.ASSISTANT, "", MessageStatus.STREAMING))
        # Hold the worker up, queue a save, then change the message before the save runs: the save
        # must keep the text the message held when the call started.
        store.gate.clear()
        busy = asyncio.ensure_future(wrapped.list_conversations())
        reply.content = "partial"
        saving = asyncio.ensure_future(wrapped.update_message(reply))
        await asyncio.sleep(0)  # one turn of the loop: the call has started and copied the message
        reply.content = "changed after the call"
        store.gate.set()
        await asyncio.gather(busy, saving)
        assert (await wrapped.load(conversation.id)).messages[1].content == "partial"
        assert await wrapped.recover_interrupted() == 1
        await wrapped.rename(conversation.id, "renamed")
        await wrapped.set_system_prompt(conversation.id, "new")
        assert user.id is not None
        assert await wrapped.truncate_after(conversation.id, user.id, inclusive=False) == 1
        assert [row[1] for row in await wrapped.list_conversations()] == ["renamed"]
        await wrapped.delete(conversation.id)
        assert await wrapped.list_conversations() == []
        await wrapped.aclose()
        await wrapped.aclose()
        with pytest.raises(ConversationStoreError, match="closed"):
            await wrapped.list_conversations()

    asyncio.run(scenario())
    assert len(store.threads) == 1
    assert threading.get_ident() not in store.threads
    with pytest.raises(ConversationStoreError, match="closed"):
        store.list_conversations()


def test_async_open_reports_a_damaged_file(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"garbage" * 100)

    async def scenario() -> None:
        with pytest.raises(ConversationStoreError, match="move it aside"):
            await AsyncConversationStore.open(db)
        async with await AsyncConversationStore.open(db.with_name("fresh.sqlite3")) as fresh:
            assert await fresh.list_conversations() == []

    asyncio.run(scenario())


# --- a process killed mid-reply -------------------------------------------------------------------------------


def test_committed_messages_survive_the_process_being_killed(db: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(db)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        assert proc.stdout.readline().strip() == "streaming"  # three partial replies saved, and it goes on
        assert proc.poll() is None, "the writer finished before it could be killed"
    finally:
        proc.kill()  # SIGKILL on POSIX: no clean-up, no checkpoint
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    if sys.platform != "win32":
        assert proc.returncode == -9
    assert db.with_name(db.name + "-wal").exists()  # it died with the WAL still open

    with ConversationStore(db) as store:
        ((conversation_id, title, _),) = store.list_conversations()
        assert title == "Killed mid-reply"
        user, reply = store.load(conversation_id).messages
        assert (user.role, user.content, user.status) == (Role.USER, "Tell me a long story.", MessageStatus.COMPLETE)
        assert reply.role is Role.ASSISTANT and reply.status is MessageStatus.STREAMING
        assert reply.content.startswith("word1 word2 ")
        assert store.recover_interrupted() == 1
        assert store.load(conversation_id).messages[1].status is MessageStatus.INTERRUPTED
        assert store.load(conversation_id).messages[1].content == reply.content
