"""``bench chat MODEL --turns N``: does a growing chat keep its time to first token flat?

Each turn sends the whole chat so far. llama.cpp re-reads only what follows the longest prefix it still holds,
so with the cache working the TTFT of turn N stays near turn 1's. The same chats run through the app's chat
(a ``ChatSession`` on the engine host and its worker, with a real history in a temporary folder: the context
fitting included) and through raw llama-cpp-python, alternating turn by turn; each run starts a new chat with
a new first question, so no run reuses another's cache.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.llamacpp.engine import sampling_kwargs
from app.backends.llamacpp.repack import NO_REPACK_ENV
from app.core.chat.conversation import Message
from app.core.params import LoadParams, SamplingParams
from app.devtools.chat_bench import BENCH_PROMPTS, RawPath, repacking_off_here
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.engines.host import EngineHost
from app.services.paths import app_paths

FOLLOW_UPS = ("Go on.", "Tell me more about that.", "What happened next?", "Why was that?", "And then?")
SYSTEM = "You are a storyteller. Answer in a few sentences."


class _FirstToken(ChatObserver):
    def __init__(self) -> None:
        self.first_at = 0.0

    def reply_delta(self, text: str) -> None:
        self.first_at = self.first_at or time.perf_counter()


def _question(run: int, turn: int) -> str:
    return BENCH_PROMPTS[run % len(BENCH_PROMPTS)] if turn == 0 else FOLLOW_UPS[(turn - 1) % len(FOLLOW_UPS)]


def _raw_turn(raw: RawPath, messages: list[dict[str, str]], sampling: SamplingParams) -> tuple[float, str]:
    started, first, parts = time.perf_counter(), 0.0, list[str]()
    llm: Any = raw.llm  # its typed signature wants TypedDict messages
    for chunk in llm.create_chat_completion(messages=messages, stream=True, **sampling_kwargs(sampling)):
        text = chunk["choices"][0]["delta"].get("content")
        if text:
            first = first or time.perf_counter()
            parts.append(text)
    return (first - started) * 1000, "".join(parts)


async def _app_turn(session: ChatSession, observer: _FirstToken, question: str) -> float:
    observer.first_at = 0.0
    started = time.perf_counter()
    reply: Message | None = await session.send(question)
    if reply is None or not observer.first_at:
        raise RuntimeError(f"the app's chat gave no reply ({reply.error if reply else 'none'})")
    return (observer.first_at - started) * 1000


async def bench_turns(model: str, load: LoadParams, turns: int, max_tokens: int, runs: int) -> dict[str, Any]:
    """Median TTFT of each turn over ``runs`` chats, app and raw, and the ratio of the last turn to the first."""
    no_repack = repacking_off_here()
    if no_repack:
        os.environ[NO_REPACK_ENV] = "1"
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=1)
    app_ttft: list[list[float]] = [[] for _ in range(turns)]
    raw_ttft: list[list[float]] = [[] for _ in range(turns)]
    with tempfile.TemporaryDirectory(prefix="llmw-turns-") as folder:
        store = await AsyncConversationStore.open(Path(folder) / "chats.sqlite3")
        host = EngineHost(LlamaCppBackend(kernel_fallback_marker=app_paths().llama_kernel_fallback))
        raw: RawPath | None = None
        try:
            await host.load(model, load)
            raw = RawPath(model, load, no_repack)
            observer = _FirstToken()
            session = ChatSession(store, host, lambda: sampling, observer)
            for run in range(runs + 1):  # run 0 warms both paths up and is not counted
                await session.new(system_prompt=SYSTEM)
                messages = [{"role": "system", "content": SYSTEM}]
                for turn in range(turns):
                    question = _question(run, turn)
                    messages.append({"role": "user", "content": question})
                    raw_ms, text = _raw_turn(raw, messages, sampling)
                    messages.append({"role": "assistant", "content": text})
                    app_ms = await _app_turn(session, observer, question)
                    if run:
                        raw_ttft[turn].append(raw_ms)
                        app_ttft[turn].append(app_ms)
        finally:
            if raw is not None:
                raw.close()
            await host.close()
            await store.aclose()
    return _report(model, load, turns, max_tokens, runs, app_ttft, raw_ttft)


def _report(
    model: str, load: LoadParams, turns: int, max_tokens: int, runs: int,
    app: list[list[float]], raw: list[list[float]],
) -> dict[str, Any]:  # fmt: skip
    app_medians = [statistics.median(values) for values in app]
    raw_medians = [statistics.median(values) for values in raw]
    app_ratio, raw_ratio = app_medians[-1] / app_medians[0], raw_medians[-1] / raw_medians[0]
    return {
        "model": model,
        "n_ctx": load.n_ctx,
        "turns": turns,
        "max_tokens": max_tokens,
        "runs": runs,
        "app_ttft_ms": app_medians,
        "raw_ttft_ms": raw_medians,
        "app_ratio_last_first": app_ratio,
        "raw_ratio_last_first": raw_ratio,
        "app_ratio_vs_raw": app_ratio / raw_ratio,
    }


def report_lines(r: dict[str, Any]) -> list[str]:
    def row(values: list[float]) -> str:
        return " ".join(f"{v:6.0f}" for v in values)

    return [
        f"model {r['model']}  n_ctx {r['n_ctx']}  turns {r['turns']}  max_tokens {r['max_tokens']}  "
        f"runs {r['runs']} (medians, ms)",
        f"turn                 : {' '.join(f'{i + 1:6d}' for i in range(r['turns']))}",
        f"app TTFT             : {row(r['app_ttft_ms'])}",
        f"raw TTFT             : {row(r['raw_ttft_ms'])}",
        f"turn {r['turns']} / turn 1 app  : {r['app_ratio_last_first']:.2f}   (target <= 1.5)",
        f"turn {r['turns']} / turn 1 raw  : {r['raw_ratio_last_first']:.2f}",
        f"app ratio / raw ratio: {r['app_ratio_vs_raw']:.2f}   (target within 10%: 0.90 .. 1.10)",
    ]
