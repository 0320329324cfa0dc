"""New chats are drafts until their first message; a reply cut at the token limit is continued in place.

Real worker, real SQLite history (as tests/services/test_chat_session.py)."""

from __future__ import annotations

from app.core.chat.conversation import MessageStatus, Role
from app.core.params import SamplingParams
from tests.services.test_chat_session import _close, _session, run


def test_a_new_chat_is_stored_with_its_first_message_only(tmp_path, tiny_gguf):
    async def scenario():
        session, _recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=4, temperature=0.0))
        try:
            await session.new("Be brief.", [("user", "seed question"), ("assistant", "seed answer")], title="p")
            await session.set_system_prompt("Be very brief.")
            before = await session.store.list_conversations()
            draft = session.is_draft
            await session.new()  # another draft: the first one is dropped, never stored
            await session.send("hello")
            after = await session.store.list_conversations()
            saved = await session.store.load(session.conversation.id)
            return before, draft, after, saved
        finally:
            await _close(session)

    before, draft, after, saved = run(scenario())
    assert before == [] and draft
    assert [title for _id, title, _at in after] == ["hello"]
    assert [m.content for m in saved.messages][:1] == ["hello"] and len(saved.messages) == 2


def test_a_seeded_draft_is_stored_with_its_seed_messages(tmp_path, tiny_gguf):
    async def scenario():
        session, _recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=4, temperature=0.0))
        try:
            await session.new("Be brief.", [("user", "Hi"), ("assistant", "Hello.")], title="terse (preset)")
            await session.send("and now?")
            return await session.store.load(session.conversation.id)
        finally:
            await _close(session)

    saved = run(scenario())
    assert saved.title == "terse (preset)" and saved.system_prompt == "Be brief."
    assert [m.content for m in saved.messages[:3]] == ["Hi", "Hello.", "and now?"]


def test_continue_appends_to_the_same_reply_inside_its_turn(tmp_path, long_context_gguf):
    limit = SamplingParams(max_tokens=8, temperature=0.0)

    async def scenario():
        session, recorder = await _session(tmp_path, long_context_gguf, limit, n_ctx=1024)
        try:
            first = await session.send("tell me a long story")
            cut = (first.content, first.stats)
            continued = await session.continue_reply()
            saved = await session.store.load(session.conversation.id)
            return cut, continued, saved, recorder
        finally:
            await _close(session)

    (cut_text, cut_stats), continued, saved, recorder = run(scenario())
    assert cut_stats.finish_reason == "length" and cut_stats.completion_tokens == 8
    assert continued.content.startswith(cut_text) and len(continued.content) > len(cut_text)
    assert continued.status is MessageStatus.COMPLETE and continued.stats.completion_tokens == 16
    assert [m.role for m in saved.messages] == [Role.USER, Role.ASSISTANT]  # the same message, not a new one
    assert saved.messages[1].content == continued.content
    # The prompt ends inside the reply's turn: it grew by the reply's own tokens, not by a closing and a new turn
    # (ChatML would add <|im_end|>, a newline, <|im_start|>, "assistant" and a newline).
    grown = continued.stats.prompt_tokens - cut_stats.prompt_tokens
    assert 6 <= grown <= 9, grown
    assert recorder.started == 2 and recorder.finished == 2


def test_nothing_to_continue_does_nothing(tmp_path, tiny_gguf):
    async def scenario():
        session, recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=4, temperature=0.0))
        try:
            await session.new()
            return await session.continue_reply(), recorder
        finally:
            await _close(session)

    result, recorder = run(scenario())
    assert result is None and recorder.started == 0
