"""Several choices for one request (OpenAI's ``n``): each choice is a reply of its own on the model the request
holds, sampled with its own seed — the request's seed plus the choice's index when it gives one (distinct choices
that repeat), else a random one each. An engine that runs replies side by side (vLLM, which runs ``n`` as that
many requests internally too) writes them at once; a single-sequence engine (llama.cpp, Ollama) one after another
in the request's turn. The usage counts the prompt once and every choice's completion, as OpenAI's does.

``ChoiceRuns`` is read like one ``ReplyRun``: its steps are ``ChoiceOuts`` (a step's outs with the choice's index
and the choices that ended before it); the OpenAI shapes number their chunks and choices with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.backends.protocol import Delta
from app.core.chat.conversation import ReplyStats
from app.core.params import SamplingParams
from app.services.api import openai_render
from app.services.api.replies import CollectedReply, Out, ReplyRun

SEEDS = 2**32  # llama.cpp's seeds are 32-bit


def choice_sampling(sampling: SamplingParams, index: int) -> SamplingParams:
    """Choice ``index``'s sampling: a given seed moved on by the index (choice 0 keeps it)."""
    if index == 0 or sampling.seed is None:
        return sampling
    return dataclasses.replace(sampling, seed=(sampling.seed + index) % SEEDS)


class ChoiceOuts(list[Out]):
    """One step of one choice: its outs, the ``choice``'s index, and the choices that ``ended`` (index, finish
    reason) since the step before."""

    def __init__(self, outs: Iterable[Out], choice: int, ended: Iterable[tuple[int, str]] = ()) -> None:
        super().__init__(outs)
        self.choice = choice
        self.ended = list(ended)


@dataclass(frozen=True)
class Choice:
    index: int
    reply: CollectedReply
    finish_reason: str
    stats: ReplyStats | None


class ChoiceRuns(ReplyRun):
    """``n`` replies read as one run. ``start(i)`` opens choice i's reply; ``side_by_side``: all at once (an
    engine that runs replies concurrently), else each when the one before has ended. ``choices``: the ended ones,
    in index order; ``stats``: their figures together; ``stream.stop()`` stops them all. (Its own private names
    all say ``choice``: the others are ReplyRun's.)"""

    def __init__(
        self, start: Callable[[int], Awaitable[ReplyRun]], n: int, *, side_by_side: bool, engine: str,
        want_logprobs: bool = False,
    ) -> None:  # fmt: skip
        self._choices_all = _AllChoices()
        super().__init__(self._choices_all, None, engine=engine, want_logprobs=want_logprobs)
        self._choice_start, self._choice_count, self._choices_side_by_side = start, n, side_by_side
        self._choices_ended: dict[int, Choice] = {}

    @property
    def choices(self) -> list[Choice]:
        return [self._choices_ended[i] for i in sorted(self._choices_ended)]

    @property
    def finish_reason(self) -> str:
        reasons = [c.finish_reason for c in self.choices]
        return next((r for r in ("length", "tool_calls") if r in reasons), reasons[-1] if reasons else "stop")

    async def steps(self) -> AsyncGenerator[list[Out], None]:
        reading = self._choices_together() if self._choices_side_by_side else self._choices_in_turn()
        ended: list[tuple[int, str]] = []
        try:
            async for index, outs in reading:
                if outs is None:
                    ended.append((index, self._choices_ended[index].finish_reason))
                    continue
                yield ChoiceOuts(outs, index, ended)
                ended = []
        finally:
            await reading.aclose()

    async def close(self) -> None:
        await self._choices_all.aclose()

    async def _choices_in_turn(self) -> AsyncGenerator[tuple[int, list[Out] | None], None]:
        for index in range(self._choice_count):
            if self._choices_all.stopped:
                return
            run = await self._open_choice(index)
            steps = run.steps()
            try:
                async for outs in steps:
                    yield index, outs
            finally:
                await steps.aclose()
            self._end_choice(index, run)
            yield index, None

    async def _choices_together(self) -> AsyncGenerator[tuple[int, list[Out] | None], None]:
        runs = [await self._open_choice(index) for index in range(self._choice_count)]
        queue: asyncio.Queue[tuple[int, list[Out] | None, BaseException | None]] = asyncio.Queue()

        async def read(index: int, run: ReplyRun) -> None:
            try:
                async for outs in run.steps():
                    queue.put_nowait((index, outs, None))
                queue.put_nowait((index, None, None))
            except Exception as exc:
                queue.put_nowait((index, None, exc))

        readers = [asyncio.create_task(read(i, run)) for i, run in enumerate(runs)]
        try:
            for _ in range(self._choice_count):
                while True:
                    index, outs, failure = await queue.get()
                    if failure is not None:
                        raise failure
                    if outs is None:
                        break
                    yield index, outs
                self._end_choice(index, runs[index])
                yield index, None
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    async def _open_choice(self, index: int) -> ReplyRun:
        run = await self._choice_start(index)
        self._choices_all.runs.append(run)
        return run

    def _end_choice(self, index: int, run: ReplyRun) -> None:
        self._choices_ended[index] = Choice(index, collected(run), run.finish_reason, run.stats)
        self._choices_all.stats = summed([c.stats for c in self.choices], side_by_side=self._choices_side_by_side)


def collected(run: ReplyRun) -> CollectedReply:
    """What ``collect`` returns, for a run whose steps were read already."""
    reader = run.reader
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reader.calls]
    return CollectedReply(reader.content, reader.thinking, calls, list(reader.logprobs))


def summed(stats: list[ReplyStats | None], *, side_by_side: bool) -> ReplyStats | None:
    """The choices' figures as one: the prompt once, every completion token; the first token's time from the first
    choice; decode speed over all the tokens written."""
    known = [s for s in stats if s is not None]
    if not known:
        return None
    completion = sum(s.completion_tokens for s in known)
    decode_s = [s.completion_tokens / s.decode_tokens_per_s for s in known if s.decode_tokens_per_s]
    totals = [s.total_ms for s in known if s.total_ms is not None]
    return ReplyStats(
        prompt_tokens=known[0].prompt_tokens, completion_tokens=completion, ttft_ms=known[0].ttft_ms,
        decode_tokens_per_s=completion / sum(decode_s) if decode_s and sum(decode_s) > 0 else None,
        total_ms=(max(totals) if side_by_side else sum(totals)) if totals else None,
        finish_reason=known[-1].finish_reason,
    )  # fmt: skip


class _AllChoices:
    """The choices' replies as one handle: ``stop()`` stops every one (and starts no more), ``aclose()`` closes
    them; iterating it yields nothing (``ChoiceRuns.steps`` reads the replies)."""

    def __init__(self) -> None:
        self.runs: list[ReplyRun] = []
        self.stats: ReplyStats | None = None
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        for run in self.runs:
            run.stream.stop()

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self

    async def __anext__(self) -> Delta:
        raise StopAsyncIteration

    async def aclose(self) -> None:
        for run in self.runs:
            with contextlib.suppress(Exception):
                await run.close()


# --- OpenAI's shapes for several choices ------------------------------------------------------------------------
def numbered(chunks: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """Stream chunks of choice ``index`` (the renderer writes every chunk's one choice as index 0)."""
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            choice["index"] = index
    return chunks


def one_body(bodies: list[dict[str, Any]], stats: ReplyStats | None) -> dict[str, Any]:
    """One response of several choices' bodies (each rendered alone): their choices numbered, usage summed."""
    choices = [{**body["choices"][0], "index": i} for i, body in enumerate(bodies)]
    return {**bodies[0], "choices": choices, "usage": openai_render.usage(stats)}
