"""Regenerate and Edit keep what they replace as versions; a stopped reply continues in place.

Real worker on tiny GGUFs, real SQLite history (as tests/services/test_chat_session.py), real exports.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing

from app.core.chat import chat_json
from app.core.chat.conversation import Message, MessageStatus, Role
from app.core.chat.versions import version_count
from app.core.params import SamplingParams
from app.services.chat.exchange import ExportFormat, export_chat, import_file
from app.services.chat.history import SCHEMA_VERSION, ConversationStore
from tests.services.test_chat_session import _close, _session, run
from tests.services.test_history_tools_migration import V3_SCHEMA
from tests.support.waiting import until


class Sampling:
    """The session's sampling, changed between replies so that each version has a text of its own."""

    def __init__(self, max_tokens: int) -> None:
        self.params = SamplingParams(max_tokens=max_tokens, temperature=0.0)

    def __call__(self) -> SamplingParams:
        return self.params

    def tokens(self, max_tokens: int) -> None:
        self.params = SamplingParams(max_tokens=max_tokens, temperature=0.0)


def _record_prompts(session) -> list[list[dict]]:
    """The prompts the engine host is asked to answer (the real host still answers them)."""
    prompts: list[list[dict]] = []
    real = session.host.stream_chat

    def stream_chat(kind, messages, sampling, options=None):
        prompts.append(messages)
        return real(kind, messages, sampling, options)

    session.host.stream_chat = stream_chat
    return prompts


def _assistant_texts(prompt: list[dict]) -> list[str]:
    return [m["content"] for m in prompt if m["role"] == "assistant"]


def test_regenerate_twice_then_browse_back_the_shown_version_counts_and_is_kept(tmp_path, long_context_gguf):
    sampling = Sampling(3)

    async def scenario():
        session, _recorder = await _session(tmp_path, long_context_gguf, SamplingParams(), n_ctx=1024)
        session._sampling = sampling
        prompts = _record_prompts(session)
        try:
            first = await session.send("tell me a story")
            sampling.tokens(6)
            second = await session.regenerate()
            sampling.tokens(9)
            third = await session.regenerate()
            texts = [first.content, second.content, third.content]
            shown_last = (session.conversation.messages[1].version, version_count(session.conversation.messages[1]))
            await session.show_version(1, 0)
            browsed = session.conversation.messages[1]
            sampling.tokens(3)
            await session.send("and then?")
            saved = await session.store.load(session.conversation.id)
            return texts, shown_last, browsed, prompts[-1], saved
        finally:
            await _close(session)

    texts, shown_last, browsed, next_prompt, saved = run(scenario())
    assert len(set(texts)) == 3, texts  # each version has its own text
    assert shown_last == (2, 3)  # the newest shows: 3/3
    assert browsed.content == texts[0] and (browsed.version, version_count(browsed)) == (0, 3)
    assert [[m.content for m in branch] for branch in browsed.versions] == [[texts[1]], [texts[2]]]
    # what the model is sent next is the version shown, not the newest
    assert _assistant_texts(next_prompt) == [texts[0]]
    # saved: the path with the shown version, the others held by it
    assert [m.content for m in saved.messages[:3]] == ["tell me a story", texts[0], "and then?"]
    assert saved.messages[1].version == 0 and [b[0].content for b in saved.messages[1].versions] == texts[1:]


def test_versions_survive_reopening_the_store_and_every_export(tmp_path, long_context_gguf):
    sampling = Sampling(3)

    async def scenario():
        session, _recorder = await _session(tmp_path, long_context_gguf, SamplingParams(), n_ctx=1024)
        session._sampling = sampling
        try:
            await session.send("a question")
            sampling.tokens(6)
            await session.regenerate()
            return session.conversation.id, [m.content for m in session.conversation.messages]
        finally:
            await _close(session)

    chat_id, path = run(scenario())
    with ConversationStore(tmp_path / "chats.sqlite3") as store:  # opened again, from the file
        reopened = store.load(chat_id)
        markdown = export_chat(store, chat_id, ExportFormat.MARKDOWN)
        page = export_chat(store, chat_id, ExportFormat.HTML)
        document = export_chat(store, chat_id, ExportFormat.JSON)
    reply = reopened.messages[1]
    old = reply.versions[0][0]
    assert [m.content for m in reopened.messages] == path
    assert (reply.version, version_count(reply)) == (1, 2) and old.role is Role.ASSISTANT
    assert old.content and old.content != reply.content and old.stats is not None
    for text in (markdown, page):
        assert "Version 2 of 2" in text and "Other versions (1)" in text and "Version 1 of 2" in text
    assert old.content.strip() in markdown
    assert "<details><summary>Other versions (1)</summary>" in markdown
    assert '<details class="versions"><summary>Other versions (1)</summary>' in page
    [exported] = json.loads(document)["chats"]
    assert exported["messages"][1]["version"] == 1
    assert exported["messages"][1]["versions"][0][0]["content"] == old.content

    export = tmp_path / "chat.json"
    export.write_text(document, encoding="utf-8")
    with ConversationStore(tmp_path / "imported.sqlite3") as store:
        import_file(store, export)
        [(imported_id, _title, _at)] = store.list_conversations()
        imported = store.load(imported_id)
    assert imported.messages[1].version == 1
    assert imported.messages[1].versions[0][0].content == old.content
    assert chat_json.dumps([imported], exported_at=0) == chat_json.dumps([reopened], exported_at=0).replace(
        f'"updated_at": {reopened.updated_at}', f'"updated_at": {imported.updated_at}'
    )


def test_editing_a_message_keeps_the_old_branch_and_switching_brings_its_tail_back(tmp_path, long_context_gguf):
    sampling = Sampling(3)

    async def scenario():
        session, _recorder = await _session(tmp_path, long_context_gguf, SamplingParams(), n_ctx=1024)
        session._sampling = sampling
        try:
            await session.send("first question")
            await session.send("second question")
            before = [m.content for m in session.conversation.messages]
            sampling.tokens(5)
            await session.edit_and_resend(0, "an edited question")
            edited = [m.content for m in session.conversation.messages]
            head = session.conversation.messages[0]
            counts = (head.version, version_count(head))
            await session.show_version(0, 0)
            back = [m.content for m in session.conversation.messages]
            saved_back = [m.content for m in (await session.store.load(session.conversation.id)).messages]
            await session.show_version(0, 1)
            again = [m.content for m in session.conversation.messages]
            saved = await session.store.load(session.conversation.id)
            return before, edited, counts, back, saved_back, again, saved
        finally:
            await _close(session)

    before, edited, counts, back, saved_back, again, saved = run(scenario())
    assert len(before) == 4 and len(edited) == 2 and edited[0] == "an edited question"
    assert counts == (1, 2)  # ‹ 2/2 ›: the edit is the newest version
    assert back == before and saved_back == before  # the whole old branch, shown and saved
    assert again == edited
    assert [m.content for m in saved.messages] == edited
    assert [m.content for m in saved.messages[0].versions[0]] == before
    assert all(m.id is not None for m in saved.messages)


def test_continue_after_stop_appends_to_the_same_reply(tmp_path, long_context_gguf):
    async def scenario():
        session, recorder = await _session(
            tmp_path, long_context_gguf, SamplingParams(max_tokens=3000, temperature=0.0), n_ctx=8192
        )
        try:
            task = asyncio.ensure_future(session.send("hello there"))
            await until(lambda: len(recorder.deltas) >= 3)
            session.stop()
            stopped = await task
            cut = (stopped.content, stopped.status, stopped.id)
            session._sampling = lambda: SamplingParams(max_tokens=6, temperature=0.0)
            continued = await session.continue_reply()
            saved = await session.store.load(session.conversation.id)
            return cut, continued, saved
        finally:
            await _close(session)

    (cut_text, cut_status, cut_id), continued, saved = run(scenario())
    assert cut_status is MessageStatus.STOPPED and cut_text
    assert continued.id == cut_id and continued.content.startswith(cut_text) and len(continued.content) > len(cut_text)
    assert continued.status is MessageStatus.COMPLETE
    assert [m.role for m in saved.messages] == [Role.USER, Role.ASSISTANT]
    assert saved.messages[1].content == continued.content and saved.messages[1].id == cut_id


def test_a_history_from_before_versions_opens_and_its_messages_gain_versions(tmp_path):
    """A schema 3 history (written by raw SQL, as tests/services/test_history_tools_migration.py does) migrates
    through every step; its messages have no versions and can be given some."""
    path = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statement in V3_SCHEMA:
            raw.execute(statement)
        raw.execute("INSERT INTO conversations VALUES (1, 'Old chat', '', 100.0, 200.0, NULL, NULL, 0, '', "
                    "'stop')")  # fmt: skip
        raw.execute("INSERT INTO messages VALUES (1, 1, 0, 'user', 'hello', 'complete', NULL, NULL, '{}', NULL, "
                    "NULL, 100.0, '', NULL)")  # fmt: skip
        raw.execute("PRAGMA user_version = 3")
    with ConversationStore(path) as store:
        head = store.load(1).messages[0]
        assert head.versions == [] and head.version == 0
        head.versions, head.version = [[Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hey")]], 1
        store.update_message(head)
    with ConversationStore(path) as store:
        saved = store.load(1).messages[0]
        with closing(sqlite3.connect(path)) as raw:
            assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 5
    assert saved.content == "hello" and saved.version == 1
    assert [m.content for m in saved.versions[0]] == ["hi", "hey"]
