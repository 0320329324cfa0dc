"""A chat that outgrows the model's context, through the real llama.cpp worker and a real history: the chat's
policy decides what is sent, the reply says what was left out, and nothing is lost."""

from __future__ import annotations

from app.core.chat.conversation import MessageStatus, OverflowPolicy
from app.core.chat.overflow import Cut
from app.core.params import SamplingParams
from app.services.chat.context_fit import CUT_KEY, LEFT_OUT_KEY
from tests.services.test_chat_session import _close, _session, run

LONG = "tell me about the weather in the mountains " * 6  # ~50 tokens


def test_drop_oldest_sends_the_latest_turns_and_marks_the_reply(tmp_path, tiny_gguf):
    async def scenario():
        session, recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=8, temperature=0.0), 256)
        try:
            await session.new(system_prompt="Be brief.")
            replies = [await session.send(f"{i} {LONG}") for i in range(6)]
            saved = await session.store.load(session.conversation.id)
            return replies, saved, recorder
        finally:
            await _close(session)

    replies, saved, recorder = run(scenario())
    assert not recorder.failures and all(r.status is MessageStatus.COMPLETE for r in replies)
    cut_replies = [r for r in replies if r.settings.get(CUT_KEY)]
    assert cut_replies and not replies[0].settings.get(CUT_KEY)  # the first turns fit whole
    last = saved.messages[-1]
    left_out = Cut.from_dict(last.settings[LEFT_OUT_KEY])
    assert left_out is not None and left_out.start == 0 and left_out.count % 2 == 0  # whole turns, oldest first
    assert last.stats.prompt_tokens <= 256 - 8  # what was sent fits, with room for the reply
    assert len(saved.messages) == 12  # nothing is deleted from the history


def test_stop_policy_keeps_the_message_and_regenerate_works_after_the_policy_changes(tmp_path, tiny_gguf):
    async def scenario():
        session, recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=8, temperature=0.0), 256)
        try:
            await session.new()
            await session.send(f"first {LONG}")
            session.conversation.overflow = OverflowPolicy.STOP
            await session.store.set_overflow(session.conversation.id, OverflowPolicy.STOP)
            refused = [await session.send(f"{i} {LONG}") for i in range(4)][-1]
            session.conversation.overflow = OverflowPolicy.DROP_OLDEST
            again = await session.regenerate()
            saved = await session.store.load(session.conversation.id)
            return refused, again, saved, recorder
        finally:
            await _close(session)

    refused, again, saved, recorder = run(scenario())
    assert refused.status is MessageStatus.FAILED and "no longer fits" in refused.error
    assert any("no longer fits" in text for text in recorder.failures)
    assert again.status is MessageStatus.COMPLETE and Cut.from_dict(again.settings[LEFT_OUT_KEY]) is not None
    assert saved.messages[-2].content.startswith("3 tell me") and saved.overflow is OverflowPolicy.STOP
