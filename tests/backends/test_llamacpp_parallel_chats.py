"""The parallel llama.cpp engine (``parallel_chats`` + its child ``parallel_server``) on real llama-cpp-python and
tiny generated GGUFs: replies overlap (seen in the engine's own slot report), requests beyond N wait visibly and
take the slot a finished one frees, a cancelled reply frees its slot at once, stops / max_tokens / a full context
end a reply as the single worker's would, a prompt's cached prefix is not computed again, the chat template renders
as the worker renders it, and a crashed child fails the replies in flight with the reason."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.llamacpp.parallel_chats import ParallelChats
from app.backends.protocol import GenerationError, RequestRefusedError
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run the coroutine test in its own loop, with a deadline (pytest sees the test's own arguments)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 240))

    return run


GREEDY = SamplingParams(temperature=0.0, max_tokens=2000)
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello there"}]


async def _started(chats: ParallelChats, slots: int, n_ctx: int, model) -> ParallelChats:
    await chats.start(str(model), LoadParams(n_ctx=n_ctx, n_threads=1), slots)
    return chats


async def _text(reply) -> str:
    return "".join([delta.text async for delta in reply])


def _decoding(chats: ParallelChats) -> set[int]:
    return {s.request for s in chats.report.slots if s.request is not None and s.state == "decoding"}


@sync
async def test_two_replies_decode_at_once_and_a_cancel_frees_the_slot(long_context_gguf):
    chats = await _started(ParallelChats(), 2, 4096, long_context_gguf)
    try:
        first, second = chats.stream_chat(CHAT, GREEDY), chats.stream_chat(CHAT, GREEDY)
        await until(lambda: _decoding(chats) == {first.id, second.id}, 60)  # both in the same batch
        first.stop()
        assert await _text(first) is not None and first.stats is not None
        assert first.stats.finish_reason == "stopped"
        await until(lambda: first.id not in {s.request for s in chats.report.slots}, 30)
        assert second.id in _decoding(chats)  # the other one goes on
        await second.aclose()
    finally:
        await chats.close()


@sync
async def test_a_request_beyond_n_waits_visibly_and_takes_the_freed_slot(long_context_gguf):
    chats = await _started(ParallelChats(), 1, 4096, long_context_gguf)
    try:
        running, waiting = chats.stream_chat(CHAT, GREEDY), chats.stream_chat(CHAT, GREEDY)
        await until(lambda: _decoding(chats) == {running.id}, 60)
        assert chats.report.waiting == 1 and waiting.slot is None
        await running.aclose()
        await until(lambda: _decoding(chats) == {waiting.id}, 60)
        assert chats.report.waiting == 0
        await waiting.aclose()
    finally:
        await chats.close()


@sync
async def test_max_tokens_a_client_stop_and_the_full_context_end_a_reply(long_context_gguf):
    chats = await _started(ParallelChats(), 2, 256, long_context_gguf)
    try:
        limited = chats.stream_chat(CHAT, SamplingParams(temperature=0.0, max_tokens=24))
        text = await _text(limited)
        assert limited.stats is not None and limited.stats.finish_reason == "length"
        assert limited.stats.completion_tokens == 24
        stop = text[len(text) // 2 : len(text) // 2 + 3]
        assert stop.strip(), text
        stopped = chats.stream_chat(CHAT, SamplingParams(temperature=0.0, max_tokens=24, stop=(stop,)),
                                    GenerationOptions(exact_stops=True))  # fmt: skip
        cut = await _text(stopped)
        assert stop not in cut and text.startswith(cut)  # the same greedy reply, cut before the stop
        assert stopped.stats is not None and stopped.stats.finish_reason == "stop"
        assert stopped.stats.stop_sequence == stop
        full = chats.stream_chat(CHAT, SamplingParams(temperature=0.0, max_tokens=None))
        await _text(full)
        assert full.stats is not None and full.stats.finish_reason == "length"
        assert full.stats.prompt_tokens + full.stats.completion_tokens == 256 + 1  # the last token needs no cell
    finally:
        await chats.close()


@sync
async def test_a_prompt_longer_than_a_sequence_context_is_refused_with_the_figures(long_context_gguf):
    chats = await _started(ParallelChats(), 2, 64, long_context_gguf)
    try:
        n_ctx = chats.info["n_ctx"]  # llama.cpp rounds a sequence's context up (to 256 cells)
        reply = chats.stream_chat([{"role": "user", "content": "word " * n_ctx}], GREEDY)
        with pytest.raises(RequestRefusedError, match=f"loaded with a context of {n_ctx}"):
            await _text(reply)
    finally:
        await chats.close()


@sync
async def test_a_shared_prompt_prefix_is_taken_from_the_cache(long_context_gguf):
    chats = await _started(ParallelChats(), 2, 4096, long_context_gguf)
    system = {"role": "system", "content": "Shared instructions. " * 60}
    try:
        first = chats.stream_chat([system, {"role": "user", "content": "one"}], SamplingParams(0.0, max_tokens=4))
        await _text(first)
        assert first.cached_tokens == 0
        again = chats.stream_chat([system, {"role": "user", "content": "two"}], SamplingParams(0.0, max_tokens=4))
        await _text(again)
        assert again.cached_tokens > 100  # the system prompt's tokens were in the slot already
    finally:
        await chats.close()


@sync
async def test_the_prompt_renders_as_the_single_worker_renders_it(tiny_gguf):
    chats = await _started(ParallelChats(), 2, 1024, tiny_gguf)
    worker = LlamaCppBackend()
    try:
        await worker.load(str(tiny_gguf), LoadParams(n_ctx=1024))
        assert await chats.count_tokens(CHAT) == await worker.count_tokens(CHAT)
    finally:
        await chats.close()
        await worker.close()


@sync
async def test_a_greedy_reply_with_a_repeat_penalty_is_the_single_workers_text(long_context_gguf):
    sampling = SamplingParams(temperature=0.0, repeat_penalty=1.3, frequency_penalty=0.2, max_tokens=40)
    chats = await _started(ParallelChats(), 2, 1024, long_context_gguf)
    try:
        penalised = await _text(chats.stream_chat(CHAT, sampling))
        plain = await _text(chats.stream_chat(CHAT, SamplingParams(temperature=0.0, max_tokens=40)))
    finally:
        await chats.close()
    worker = LlamaCppBackend()
    try:
        await worker.load(str(long_context_gguf), LoadParams(n_ctx=1024, n_threads=1))
        assert penalised == "".join([d.text async for d in worker.stream_chat(CHAT, sampling)])
    finally:
        await worker.close()
    assert penalised != plain  # the premise: the penalty changes this reply


@sync
async def test_a_crashed_child_fails_the_replies_in_flight(long_context_gguf):
    chats = await _started(ParallelChats(), 2, 4096, long_context_gguf)
    try:
        reply = chats.stream_chat(CHAT, GREEDY)
        await until(lambda: reply.id in _decoding(chats), 60)
        assert chats.pid is not None
        os.kill(chats.pid, signal.SIGKILL)
        with pytest.raises(GenerationError, match="ended"):
            await asyncio.wait_for(_text(reply), 60)
    finally:
        await chats.close()


@sync
async def test_a_busy_slot_shares_its_prompt_prefix_with_another_slot(long_context_gguf):
    chats = await _started(ParallelChats(), 2, 4096, long_context_gguf)
    system = {"role": "system", "content": "Shared instructions. " * 60}
    try:
        busy = chats.stream_chat([system, {"role": "user", "content": "one"}], GREEDY)
        await until(lambda: busy.id in _decoding(chats), 60)
        beside = chats.stream_chat([system, {"role": "user", "content": "two"}], SamplingParams(0.0, max_tokens=8))
        text = await _text(beside)
        assert beside.slot != busy.slot and beside.cached_tokens > 100  # copied from the busy slot's stream
        assert beside.stats is not None and beside.stats.completion_tokens == 8 and text
        assert busy.id in _decoding(chats)  # the copy did not disturb the busy sequence
        await busy.aclose()
    finally:
        await chats.close()
    fresh = await _started(ParallelChats(), 2, 4096, long_context_gguf)
    try:
        again = fresh.stream_chat([system, {"role": "user", "content": "two"}], SamplingParams(0.0, max_tokens=8))
        assert await _text(again) == text and again.cached_tokens == 0  # the copied cells are the computed ones
    finally:
        await fresh.close()
