"""The llama.cpp backend against the real worker process and real llama-cpp-python on tiny GGUFs."""

from __future__ import annotations

import asyncio
import contextlib

import psutil
import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.protocol import BackendBusyError, GenerationError, ModelLoadError, StateKind
from app.core.params import LoadParams, SamplingParams

GREEDY_LONG = SamplingParams(temperature=0.0, max_tokens=3000, seed=1)
USER_HI = [{"role": "user", "content": "hello there"}]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


SHORT = SamplingParams(max_tokens=16, seed=3)


async def _collect(backend, messages=USER_HI, params=SHORT):
    return "".join([d.text async for d in backend.stream_chat(messages, params)])


def test_load_and_stream_counts_match_llama_cpp(tiny_gguf):
    params = SamplingParams(max_tokens=24, seed=7, temperature=0.0)

    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(tiny_gguf), LoadParams(n_ctx=512))
            assert info.chat_format is None and "template stored in the model" in info.chat_format_reason
            assert info.n_ctx == 512 and info.architecture == "llama"
            assert backend.state.kind is StateKind.READY
            text = await _collect(backend, params=params)
            return text, backend.stats(), backend.kv_usage(), backend.worker_pid
        finally:
            await backend.close()

    text, stats, kv, pid = run(scenario())
    import llama_cpp

    from app.backends.llamacpp.engine import sampling_kwargs

    reference = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=512, verbose=False)
    expected = reference.create_chat_completion(messages=USER_HI, **sampling_kwargs(params))
    chunks = reference.create_chat_completion(messages=USER_HI, stream=True, **sampling_kwargs(params))
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    reference.close()
    assert text == streamed
    assert stats.prompt_tokens == expected["usage"]["prompt_tokens"]
    assert stats.completion_tokens == expected["usage"]["completion_tokens"]
    assert stats.ttft_ms is not None and stats.ttft_ms > 0
    assert stats.decode_tokens_per_s and stats.decode_tokens_per_s > 0
    assert kv.total_cells == 512 and 0 < kv.used_cells <= stats.prompt_tokens + stats.completion_tokens
    assert pid is not None


def test_kv_usage_grows_while_the_reply_streams(long_context_gguf):
    """The monitor reads kv_usage() while a reply is written: it must move token by token, not only at the end.

    The reply may be 1,500 tokens long and is stopped once the figure has moved a few times: it is still being
    written then, however fast or loaded the machine."""
    params = SamplingParams(max_tokens=1500, seed=1, temperature=0.0)

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=2048))
            seen, lives = [], []
            async with contextlib.aclosing(backend.stream_chat(USER_HI, params)) as deltas:
                async for _delta in deltas:
                    seen.append(backend.kv_usage().used_cells)
                    lives.append(backend.generated_tokens_live)  # the monitor's tok/s: live per delta too
                    if len(set(seen)) >= 5:
                        break
            return seen, lives, backend.kv_usage(), backend.stats()
        finally:
            await backend.close()

    seen, lives, final, stats = run(scenario())
    assert len(set(seen)) >= 5 and seen == sorted(seen)  # it moved while the reply streamed
    assert len(set(lives)) >= 5 and lives == sorted(lives)
    assert stats.finish_reason == "stopped" and stats.completion_tokens < 1500
    assert seen[0] >= stats.prompt_tokens  # the prompt is in the cache before the first token arrives
    assert final.total_cells == 2048 and seen[-1] <= final.used_cells + 1


def test_generated_tokens_are_live_per_reply_and_total_only_grows(long_context_gguf):
    """The monitor's tok/s reads generated_tokens_total: sampled tokens only (no prompt), live per delta."""
    params = SamplingParams(max_tokens=30, seed=1, temperature=0.0)

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=512))
            assert (backend.generated_tokens_live, backend.generated_tokens_total) == (0, 0)
            replies = []
            for _ in range(2):
                seen = [
                    (backend.generated_tokens_live, backend.generated_tokens_total)
                    async for _delta in backend.stream_chat(USER_HI, params)
                ]
                replies.append((seen, backend.generated_tokens_live, backend.stats()))
            return replies, backend.generated_tokens_total
        finally:
            await backend.close()

    replies, total = run(scenario())
    (first, first_end, first_stats), (second, second_end, second_stats) = replies
    assert first_end == first_stats.completion_tokens == 30 and second_end == second_stats.completion_tokens == 30
    lives = [live for live, _total in first + second]
    assert max(lives) == 30  # sampled tokens only: the prompt is never counted
    assert lives[: len(first)] == sorted(lives[: len(first)]) and lives[len(first) :] == sorted(lives[len(first) :])
    totals = [t for _live, t in first + second]
    assert totals == sorted(totals) and total == 60
    assert all(t == 30 + live for live, t in second)


def test_no_template_picks_format_from_architecture(tiny_gguf_no_template):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(tiny_gguf_no_template), LoadParams(n_ctx=256))
            text = await _collect(backend)
            return info, text
        finally:
            await backend.close()

    info, text = run(scenario())
    assert info.chat_format == "llama-2"
    assert "no chat template" in info.chat_format_reason and "llama" in info.chat_format_reason
    assert isinstance(text, str)


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [("not_a_gguf", "is not a GGUF model file"), ("truncated_gguf", "truncated"), ("bad_arch_gguf", "nosucharch")],
)
def test_bad_files_give_clear_errors_and_backend_recovers(request, fixture, expected, tiny_gguf):
    path = request.getfixturevalue(fixture)

    async def scenario():
        backend = LlamaCppBackend()
        try:
            with pytest.raises(ModelLoadError) as caught:
                await backend.load(str(path), LoadParams(n_ctx=256))
            assert backend.state.kind is StateKind.FAILED and backend.model is None
            await backend.load(str(tiny_gguf), LoadParams(n_ctx=256))
            return str(caught.value), await _collect(backend)
        finally:
            await backend.close()

    message, _text = run(scenario())
    assert expected in message
    assert "Traceback" not in message


def test_missing_file_and_bad_params(tmp_path):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            with pytest.raises(ModelLoadError, match="does not exist"):
                await backend.load(str(tmp_path / "nope.gguf"), LoadParams())
            with pytest.raises(ModelLoadError, match="flash attention"):
                await backend.load(str(tmp_path / "nope.gguf"), LoadParams(type_v="q8_0"))
        finally:
            await backend.close()

    run(scenario())


def test_prompt_longer_than_context_is_explained_and_model_stays_usable(tiny_gguf):
    long_prompt = [{"role": "user", "content": "word " * 400}]

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(tiny_gguf), LoadParams(n_ctx=256))
            with pytest.raises(GenerationError) as caught:
                await _collect(backend, long_prompt)
            assert backend.state.kind is StateKind.READY
            return str(caught.value), await _collect(
                backend, [{"role": "user", "content": "hi"}], SamplingParams(max_tokens=4)
            )
        finally:
            await backend.close()

    message, _ = run(scenario())
    assert "context of 256" in message and "larger context" in message


def test_stop_ends_reply_at_next_token(long_context_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=8192))
            pieces = []
            async for delta in backend.stream_chat(USER_HI, GREEDY_LONG):
                pieces.append(delta.text)
                if len(pieces) == 3:
                    backend.stop()
            return pieces, backend.stats(), backend.state.kind
        finally:
            await backend.close()

    _pieces, stats, state = run(scenario())
    assert stats.finish_reason == "stopped"
    assert 3 <= stats.completion_tokens < 3000
    assert state is StateKind.READY


def test_cancelling_the_consumer_stops_the_worker(long_context_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=8192))
            started = asyncio.Event()

            async def consume():
                async for _ in backend.stream_chat(USER_HI, GREEDY_LONG):
                    started.set()

            task = asyncio.ensure_future(consume())
            await started.wait()
            task.cancel()
            await asyncio.wait_for(backend.wait_idle(), 10)
            stats = backend.stats()
            return stats, await _collect(backend, params=SamplingParams(max_tokens=4))
        finally:
            await backend.close()

    stats, _ = run(scenario())
    assert stats.finish_reason == "stopped" and stats.completion_tokens < 3000


def test_worker_killed_mid_reply_keeps_partial_and_reloads(long_context_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=8192))
            pieces = []
            with pytest.raises(GenerationError) as caught:
                async for delta in backend.stream_chat(USER_HI, GREEDY_LONG):
                    pieces.append(delta.text)
                    if len(pieces) == 3:
                        backend.kill_worker()
            failed_state, model_after = backend.state, backend.model
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=8192))
            again = await _collect(backend, params=SamplingParams(max_tokens=4))
            return caught.value, "".join(pieces), failed_state, model_after, again
        finally:
            await backend.close()

    error, received, failed_state, model_after, again = run(scenario())
    assert "stopped unexpectedly" in str(error) and "SIGKILL" in str(error)
    assert error.partial.startswith(received) and len(received) > 0
    assert failed_state.kind is StateKind.FAILED and model_after is None
    assert isinstance(again, str)


def test_loading_while_generating_is_refused_and_reply_continues(long_context_gguf, tiny_gguf):
    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(long_context_gguf), LoadParams(n_ctx=8192))
            count = 0
            refused = None
            async for _ in backend.stream_chat(USER_HI, SamplingParams(temperature=0.0, max_tokens=200)):
                count += 1
                if count == 2:
                    try:
                        await backend.load(str(tiny_gguf), LoadParams())
                    except BackendBusyError as exc:
                        refused = str(exc)
            return refused, backend.stats(), backend.model
        finally:
            await backend.close()

    refused, stats, model = run(scenario())
    assert refused and "Stop it" in refused
    assert stats.finish_reason == "length" and stats.completion_tokens == 200
    assert model is not None and model.name == "tiny-8k"


ORPHAN_SCRIPT = """
import asyncio, sys, time
from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.params import LoadParams

async def main():
    backend = LlamaCppBackend()
    await backend.load(sys.argv[1], LoadParams(n_ctx=256))
    print(backend.worker_pid, flush=True)
    time.sleep(60)

asyncio.run(main())
"""


def test_worker_exits_when_the_app_is_killed(tiny_gguf):
    import signal
    import subprocess
    import sys
    import time

    app = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT, str(tiny_gguf)], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(app.stdout.readline())
        app.send_signal(signal.SIGKILL)
        app.wait(10)
        deadline = time.monotonic() + 10
        while _running(worker_pid):
            if time.monotonic() > deadline:
                psutil.Process(worker_pid).kill()
                raise AssertionError("the worker outlived the app")
            time.sleep(0.05)
    finally:
        if app.poll() is None:
            app.kill()


def _running(pid):
    """True while the process exists and is not a zombie waiting for its (new) parent to reap it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
