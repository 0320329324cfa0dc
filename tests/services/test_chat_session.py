"""ChatSession against the real worker and a real SQLite history: what is saved, when, and in what state."""

from __future__ import annotations

import asyncio

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.chat.conversation import MessageStatus, Role
from app.core.params import LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.engines.host import EngineHost


class Recorder(ChatObserver):
    def __init__(self):
        self.deltas: list[str] = []
        self.failures: list[str] = []
        self.started = 0
        self.finished = 0

    def reply_started(self, message):
        self.started += 1

    def reply_delta(self, text):
        self.deltas.append(text)

    def reply_finished(self, message):
        self.finished += 1

    def failed(self, text):
        self.failures.append(text)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _session(tmp_path, model, sampling, n_ctx=512):
    store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
    host = EngineHost(LlamaCppBackend())
    await host.load(str(model), LoadParams(n_ctx=n_ctx))
    recorder = Recorder()
    return ChatSession(store, host, lambda: sampling, recorder), recorder


async def _close(session):
    await session.host.close()
    await session.store.aclose()


def test_send_regenerate_edit_are_saved(tmp_path, tiny_gguf):
    async def scenario():
        session, recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=12, temperature=0.0))
        try:
            await session.new(system_prompt="Be brief.")
            first = await session.send("hello there")
            assert "".join(recorder.deltas) == first.content
            assert session.conversation.title == "hello there"
            again = await session.regenerate()
            edited = await session.edit_and_resend(0, "a different question")
            saved = await session.store.load(session.conversation.id)
            return first, again, edited, saved
        finally:
            await _close(session)

    first, again, edited, saved = run(scenario())
    assert first.status is MessageStatus.COMPLETE and first.stats.completion_tokens > 0
    assert first.model == "tiny-test-model" and first.backend == "llamacpp" and first.settings["n_ctx"] == 512
    assert again.content == first.content  # greedy: the same reply again
    assert [m.role for m in saved.messages] == [Role.USER, Role.ASSISTANT]
    assert saved.messages[0].content == "a different question"
    assert saved.messages[1].content == edited.content and saved.messages[1].stats is not None
    assert saved.system_prompt == "Be brief."


async def _interrupt_mid_reply(tmp_path, model, interrupt):
    """Send, wait for three streamed pieces, call ``interrupt(session)``; return the reply, history, recorder."""
    session, recorder = await _session(tmp_path, model, SamplingParams(max_tokens=3000, temperature=0.0), n_ctx=8192)
    try:
        await session.new()
        task = asyncio.ensure_future(session.send("hello there"))
        while len(recorder.deltas) < 3:
            await asyncio.sleep(0.005)
        interrupt(session)
        reply = await task
        return reply, await session.store.load(session.conversation.id), recorder
    finally:
        await _close(session)


def test_stop_keeps_partial_reply_marked(tmp_path, long_context_gguf):
    reply, saved, _ = run(_interrupt_mid_reply(tmp_path, long_context_gguf, lambda session: session.stop()))
    assert reply.status is MessageStatus.STOPPED and reply.content
    assert saved.messages[-1].status is MessageStatus.STOPPED
    assert saved.messages[-1].content == reply.content


def test_worker_crash_keeps_partial_reply_and_reports(tmp_path, long_context_gguf):
    kill = lambda session: session.host.llamacpp.kill_worker()  # noqa: E731
    reply, saved, recorder = run(_interrupt_mid_reply(tmp_path, long_context_gguf, kill))
    assert reply.status is MessageStatus.FAILED and "stopped unexpectedly" in reply.error
    assert reply.content and saved.messages[-1].content == reply.content
    assert saved.messages[0].content == "hello there"
    assert recorder.failures and recorder.finished == 1


def test_prompt_too_long_fails_cleanly_and_keeps_user_message(tmp_path, tiny_gguf):
    async def scenario():
        session, recorder = await _session(tmp_path, tiny_gguf, SamplingParams(max_tokens=8), n_ctx=256)
        try:
            await session.new()
            reply = await session.send("word " * 400)
            saved = await session.store.load(session.conversation.id)
            return reply, saved, recorder
        finally:
            await _close(session)

    reply, saved, recorder = run(scenario())
    assert reply.status is MessageStatus.FAILED and "larger context" in reply.error
    assert saved.messages[0].content.startswith("word word")
    assert recorder.failures
