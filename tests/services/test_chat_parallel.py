"""Chats on the parallel llama.cpp engine (a model whose "Parallel sequences" setting is N > 1), with the real worker,
the real parallel child and a real SQLite history: the model loads once, in the parallel engine; two chats generate
at the same time, each in its own slot; a third waits in the engine's queue and says so; Stop stops one; a crash of
the child ends the reply with the reason and keeps its text; replies only the single worker can give go there (it
loads its copy then); with the setting blank the chats run one at a time on the single worker, as before."""

from __future__ import annotations

import asyncio
import os
import signal
from types import SimpleNamespace

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.chat.conversation import MessageStatus
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.chat.workspace import ChatWorkspace
from app.services.engines.entries import EngineKind
from app.services.engines.events import ParallelSlotsChanged
from app.services.engines.host import EngineHost
from app.services.engines.parallel_replies import ParallelReplyStream
from app.services.engines.replies import ReplyStream
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)

LLAMA = EngineKind.LLAMACPP
# still generating while the test looks: the model never ends by itself, and its whole context is asked for
LONG = SamplingParams(max_tokens=8000, temperature=0.0)
WIDE = LoadParams(n_ctx=8192, n_parallel=2)  # each sequence's context


class Recorder(ChatObserver):
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.queued: list[int] = []
        self.failures: list[str] = []

    def reply_queued(self, replies_ahead: int) -> None:
        self.queued.append(replies_ahead)

    def reply_delta(self, text: str) -> None:
        self.deltas.append(text)

    def failed(self, text: str) -> None:
        self.failures.append(text)


class Chats:
    """One host and one history; ``session()`` makes a chat on them (as the workspace's tabs and background chats)."""

    def __init__(self, host: EngineHost, store: AsyncConversationStore) -> None:
        self.host, self.store = host, store
        self.events: list[object] = []
        host.subscribe(self.events.append)

    def session(self, sampling: SamplingParams = LONG) -> tuple[ChatSession, Recorder]:
        recorder = Recorder()
        return ChatSession(self.store, self.host, lambda: sampling, recorder), recorder


async def _chats(tmp_path, model, params: LoadParams) -> Chats:
    store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
    host = EngineHost(LlamaCppBackend())
    chats = Chats(host, store)
    await host.load(str(model), params)
    return chats


async def _close(chats: Chats) -> None:
    await chats.host.close()
    await chats.store.aclose()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 240))


def _workspace(chats: Chats, tmp_path) -> ChatWorkspace:
    """The window's chats on this host (the parts of the workstation the workspace uses here)."""
    workstation = SimpleNamespace(
        host=chats.host, store=chats.store, paths=SimpleNamespace(attachments_dir=tmp_path), mcp=None,
        spec_guard=SimpleNamespace(speed_up=lambda _stats: None),
    )  # fmt: skip
    return ChatWorkspace(workstation, lambda: LONG, lambda _session: Recorder())  # type: ignore[arg-type]


def _decoding_chats(host: EngineHost) -> int:
    return sum(1 for s in host.parallel.snapshot().slots if s.client == "chat")


def test_two_chats_generate_at_once_a_third_waits_visibly_and_stop_stops_one(tmp_path, long_context_gguf):
    async def scenario():
        chats = await _chats(tmp_path, long_context_gguf, WIDE)
        host = chats.host
        try:
            # one copy: loaded for the chats in the parallel engine, for 2 sequences; the single worker holds nothing
            assert host.llamacpp.model is None
            assert host.parallel.loaded is not None and host.parallel.loaded.slots == 2
            assert host.loaded(LLAMA).parallel == 2 and host.model_info(LLAMA).n_ctx == 8192
            assert host.concurrent(LLAMA)  # so the workspace lets chats generate side by side (park_generating)
            (first, one), (second, two), (third, three) = chats.session(), chats.session(), chats.session()
            tasks = [asyncio.ensure_future(first.send("hello there")), asyncio.ensure_future(second.send("hi"))]
            await until(lambda: _decoding_chats(host) == 2 and bool(one.deltas) and bool(two.deltas), 120)
            assert first.generating and second.generating  # both in flight together, each in its own slot
            workspace = _workspace(chats, tmp_path)
            workspace.session = first
            assert workspace.park_generating() and workspace.background == {first.conversation.id: first}
            assert any(isinstance(e, ParallelSlotsChanged) and sum(1 for s in e.snapshot.slots if s.client) == 2
                       for e in chats.events)  # fmt: skip
            tasks.append(asyncio.ensure_future(third.send("and me")))
            await until(lambda: three.queued == [1] and host.parallel.snapshot().waiting == 1, 60)
            assert not three.deltas  # it waits for a slot
            first.stop()
            stopped = await tasks[0]
            await until(lambda: bool(three.deltas) and _decoding_chats(host) == 2, 60)  # it got the freed slot
            for session in (second, third):
                session.stop()
            rest = [await task for task in tasks[1:]]
            saved = await chats.store.load(first.conversation.id)
            return stopped, rest, saved, one
        finally:
            await _close(chats)

    stopped, rest, saved, one = run(scenario())
    assert stopped.status is MessageStatus.STOPPED and stopped.content and stopped.content == "".join(one.deltas)
    assert stopped.stats is not None and stopped.stats.finish_reason == "stopped" and stopped.stats.completion_tokens
    assert saved.messages[-1].status is MessageStatus.STOPPED and saved.messages[-1].content == stopped.content
    assert all(r.status is MessageStatus.STOPPED and r.content for r in rest)


def test_a_parallel_reply_has_its_figures(tmp_path, long_context_gguf):
    async def scenario():
        chats = await _chats(tmp_path, long_context_gguf, LoadParams(n_ctx=2048, n_parallel=2))
        try:
            session, recorder = chats.session(SamplingParams(max_tokens=8, temperature=0.0))
            stream = chats.host.stream_chat(LLAMA, [{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2))
            assert isinstance(stream, ParallelReplyStream)
            await stream.aclose()
            reply = await session.send("hello there")
            return reply, recorder, chats.host.llamacpp.model
        finally:
            await _close(chats)

    reply, recorder, worker_model = run(scenario())
    assert reply.status is MessageStatus.COMPLETE and reply.content == "".join(recorder.deltas)
    stats = reply.stats
    assert stats is not None and stats.finish_reason == "length" and stats.completion_tokens == 8
    assert stats.prompt_tokens > 0 and stats.ttft_ms is not None and stats.decode_tokens_per_s
    assert reply.model == "tiny-8k" and reply.settings["n_ctx"] == 2048  # each sequence's context
    assert worker_model is None  # the token count and the reply ran in the parallel engine


def test_a_crash_of_the_parallel_engine_ends_the_reply_with_the_reason_and_keeps_its_text(tmp_path, long_context_gguf):
    async def scenario():
        chats = await _chats(tmp_path, long_context_gguf, WIDE)
        try:
            session, recorder = chats.session()
            task = asyncio.ensure_future(session.send("hello there"))
            await until(lambda: len(recorder.deltas) >= 3, 120)
            pid = chats.host.parallel.snapshot().pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            failed = await task
            again, _ = chats.session(SamplingParams(max_tokens=4, temperature=0.0))
            after = await again.send("still there?")  # the next reply starts the engine again
            return failed, await chats.store.load(session.conversation.id), recorder, after
        finally:
            await _close(chats)

    failed, saved, recorder, after = run(scenario())
    assert failed.status is MessageStatus.FAILED and "parallel llama.cpp engine" in failed.error
    assert "reply so far is kept" in failed.error and recorder.failures
    assert failed.content and saved.messages[-1].content == failed.content
    assert after.status is MessageStatus.COMPLETE and after.stats.completion_tokens == 4


def test_images_and_json_go_to_the_single_worker_which_loads_its_copy_then(tmp_path, long_context_gguf):
    async def scenario():
        chats = await _chats(tmp_path, long_context_gguf, LoadParams(n_ctx=2048, n_parallel=2))
        host = chats.host
        try:
            picture = {"type": "image_url", "image_url": {"url": "file:///x.png"}}
            image = [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, picture]}]
            to_worker = host.stream_chat(LLAMA, image, SamplingParams(max_tokens=2))
            assert isinstance(to_worker, ReplyStream)
            await to_worker.aclose()
            assert host.llamacpp.model is None  # nothing asked of it yet: no second copy
            json = GenerationOptions(response_format={"type": "json_object"})
            hello = [{"role": "user", "content": "hello"}]
            stream = host.stream_chat(LLAMA, hello, SamplingParams(max_tokens=6, temperature=0.0), json)
            assert isinstance(stream, ReplyStream)
            text = "".join([delta.text async for delta in stream])
            worker = host.llamacpp.model
            plain = host.stream_chat(LLAMA, hello, SamplingParams(max_tokens=2))
            await plain.aclose()
            return text, stream.stats, worker, plain, host.loaded(LLAMA)
        finally:
            await _close(chats)

    text, stats, worker, plain, loaded = run(scenario())
    assert stats is not None and stats.completion_tokens > 0 and text.lstrip().startswith(("{", "["))
    assert worker is not None and worker.name == "tiny-8k"  # loaded in the worker for that reply
    assert isinstance(plain, ParallelReplyStream) and loaded is not None and loaded.parallel == 2  # chats stay


def test_blank_setting_runs_chats_one_at_a_time_on_the_single_worker(tmp_path, long_context_gguf):
    async def scenario():
        chats = await _chats(tmp_path, long_context_gguf, LoadParams(n_ctx=8192))
        host = chats.host
        try:
            assert host.llamacpp.model is not None and host.parallel.loaded is None and not host.concurrent(LLAMA)
            (first, one), (second, two) = chats.session(), chats.session()
            tasks = [asyncio.ensure_future(first.send("hello there"))]
            await until(lambda: bool(one.deltas), 120)
            tasks.append(asyncio.ensure_future(second.send("hi")))
            await until(lambda: host.waiting(LLAMA) == 1, 60)  # in the worker's line, behind the first reply
            assert not two.deltas and first.generating
            first.stop()
            await until(lambda: bool(two.deltas), 60)
            assert isinstance(second._stream, ReplyStream)
            second.stop()
            replies = [await task for task in tasks]
            return replies, host.parallel.loaded
        finally:
            await _close(chats)

    replies, parallel = run(scenario())
    assert all(r.status is MessageStatus.STOPPED and r.content for r in replies)
    assert parallel is None  # the parallel engine never started
