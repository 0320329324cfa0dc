"""Continuous batching over the parallel engine's slots (one KV stream each).

Every step: waiting requests take free slots; then ONE ``llama_decode`` holds a token for each decoding sequence
and as many prompt tokens of the sequences being prefilled as the batch has room for (a long prompt never stalls
the others' replies for more than one batch); then each row that asked for logits samples its sequence's next
token. A sequence ends at its model's end of generation, a stop string, ``max_tokens``, a full context, or when it
is cancelled; its slot is free for the next request at once.

Prompt prefixes: a slot keeps the cells of its last request, so a request whose prompt begins the same way (an
agent's next turn, a shared system prompt) prefills only the rest there; when another slot (busy or free) holds
a longer common prefix of at least ``COPY_MIN_TOKENS``, its stream is copied over and trimmed (llama.cpp copies
whole streams between non-unified sequences), instead of computing the prefix again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.backends.llamacpp.parallel_batch import BatchContext, Row
from app.backends.llamacpp.parallel_sampling import SeqSampler
from app.backends.llamacpp.parallel_text import SeqText
from app.backends.llamacpp.reply_loop import Stops

COPY_MIN_TOKENS = 64  # a shorter shared prefix is cheaper to prefill than a stream copy
Say = Callable[[dict[str, Any]], None]


@dataclass
class Request:
    id: Any
    tokens: list[int]
    stops: Stops
    max_tokens: int | None
    sampler: SeqSampler
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class Running:
    request: Request
    text: SeqText
    slot: int
    fed: int  # prompt tokens in the slot's cells
    reused: int  # of which came from a cached prefix (not computed for this request)
    last: int | None = None  # the sampled token not yet decoded
    generated: int = 0
    started: float = field(default_factory=time.perf_counter)
    first_at: float | None = None

    @property
    def pos(self) -> int:
        return len(self.request.tokens) + self.generated - 1


@dataclass
class Slot:
    index: int
    cached: list[int] = field(default_factory=list)  # the tokens whose cells the slot's stream holds, in order
    running: Running | None = None


class Scheduler:
    def __init__(
        self, batch: BatchContext, ends: Callable[[int], bool], piece: Callable[[int], bytes], say: Say
    ) -> None:
        self.batch, self._ends, self._piece, self._say = batch, ends, piece, say
        self.slots = [Slot(i) for i in range(batch.settings.slots)]
        self.waiting: deque[Request] = deque()
        self.generated_total = 0  # tokens sampled over all requests (only grows): the Monitor's tok/s

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or any(s.running for s in self.slots)

    def submit(self, request: Request) -> None:
        limit = self.batch.n_ctx_per_seq
        if len(request.tokens) >= limit:
            self._say({"id": request.id, "event": "error", "kind": "prompt_too_long",
                       "prompt_tokens": len(request.tokens), "n_ctx": limit})  # fmt: skip
            request.sampler.close()
            return
        self.waiting.append(request)

    def cancel(self, request_id: Any) -> None:
        for request in [r for r in self.waiting if r.id == request_id]:
            self.waiting.remove(request)
            self._done_event(request, "stopped", None, 0, 0, None, time.perf_counter())
            request.sampler.close()
        for slot in self.slots:
            if slot.running is not None and slot.running.request.id == request_id:
                self._finish(slot, "stopped")

    def step(self) -> None:
        self._admit()
        rows, owners = self._rows()
        if not rows:
            return
        self.batch.decode(rows)
        for slot in self.slots:  # a prompt's cells are shareable as soon as they are computed
            if (running := slot.running) is not None and running.last is None:
                slot.cached = running.request.tokens[: running.fed]
        for index, running in owners:
            self._sample(running, index)

    def slot_report(self) -> list[dict[str, Any]]:
        return [{"slot": s.index, "request": s.running.request.id if s.running else None,
                 "cells": self.batch.cells(s.index), "state": self._state(s),
                 "generated": s.running.generated if s.running else 0} for s in self.slots]  # fmt: skip

    # --- admission ----------------------------------------------------------------------------------------
    def _admit(self) -> None:
        while self.waiting and (free := [s for s in self.slots if s.running is None]):
            request = self.waiting.popleft()
            slot, reused = self._place(request.tokens, free)
            running = Running(request, SeqText(request.stops), slot.index, reused, reused)
            slot.running, slot.cached = running, request.tokens[:reused]
            self._say({"id": request.id, "event": "started", "slot": slot.index,
                       "prompt_tokens": len(request.tokens), "cached_tokens": reused})  # fmt: skip

    def _place(self, tokens: list[int], free: list[Slot]) -> tuple[Slot, int]:
        """The free slot for ``tokens`` and how many of their cells it holds already (never all: the last
        prompt token is decoded again for its logits)."""
        most = len(tokens) - 1
        slot = max(free, key=lambda s: _common(s.cached, tokens))
        reused = min(_common(slot.cached, tokens), most)
        donor = max(self.slots, key=lambda s: _common(s.cached, tokens))
        shared = min(_common(donor.cached, tokens), most)
        if donor is not slot and shared >= COPY_MIN_TOKENS and shared - reused >= COPY_MIN_TOKENS:
            self.batch.copy(donor.index, slot.index)
            slot.cached, reused = list(donor.cached), shared
        if not self.batch.trim(slot.index, reused):
            reused = 0
        return slot, reused

    # --- one step -----------------------------------------------------------------------------------------
    def _rows(self) -> tuple[list[Row], list[tuple[int, Running]]]:
        rows: list[Row] = []
        owners: list[tuple[int, Running]] = []
        active = [s.running for s in self.slots if s.running is not None]
        for running in active:
            if running.last is not None:
                owners.append((len(rows), running))
                rows.append((running.last, running.pos, running.slot, True))
        room = self.batch.settings.n_batch - len(rows)
        for running in active:
            prompt = running.request.tokens
            while running.last is None and running.fed < len(prompt) and room > 0:
                last = running.fed == len(prompt) - 1
                if last:
                    owners.append((len(rows), running))
                rows.append((prompt[running.fed], running.fed, running.slot, last))
                running.fed += 1
                room -= 1
        return rows, owners

    def _sample(self, running: Running, row: int) -> None:
        slot = self.slots[running.slot]
        if running.last is not None:
            slot.cached.append(running.last)
        else:
            slot.cached = list(running.request.tokens)
        token = running.request.sampler.sample(self.batch.ctx, row, self.batch.logits(row))
        if running.first_at is None:
            running.first_at = time.perf_counter()
        if self._ends(token):
            self._finish(slot, "stop")
            return
        running.generated += 1
        self.generated_total += 1
        running.last = token
        if piece := running.text.feed(self._piece(token)):
            self._say({"id": running.request.id, "event": "piece", "text": piece})
        if running.text.stopped:
            self._finish(slot, "stop")
        elif self._at_limit(running):
            self._finish(slot, "length")

    def _at_limit(self, running: Running) -> bool:
        """Its ``max_tokens`` reached, or no cell left for the token just sampled."""
        limit = running.request.max_tokens
        return (limit is not None and running.generated >= limit) or running.pos >= self.batch.n_ctx_per_seq

    def _finish(self, slot: Slot, reason: str) -> None:
        running = slot.running
        assert running is not None
        slot.running = None
        if reason != "stopped" and (rest := running.text.finish()):
            self._say({"id": running.request.id, "event": "piece", "text": rest})
        request = running.request
        if running.last is None:  # cancelled while its prompt was prefilled: the cells decoded so far stay
            slot.cached = request.tokens[: running.fed]
        self._done_event(request, reason, running.text.stop_sequence, running.generated, running.reused,
                         running.first_at, running.started)  # fmt: skip
        request.sampler.close()
        keep = len(slot.cached)
        if self.batch.cells(slot.index) > keep and not self.batch.trim(slot.index, keep):
            slot.cached = []

    def _done_event(
        self, request: Request, reason: str, stop: str | None, generated: int, reused: int, first_at: float | None,
        started: float,
    ) -> None:  # fmt: skip
        now = time.perf_counter()
        decode_s = now - first_at if first_at is not None else 0.0
        self._say({"id": request.id, "event": "done", "finish_reason": reason, "stop_sequence": stop,
                   "prompt_tokens": len(request.tokens), "completion_tokens": generated, "cached_tokens": reused,
                   "wait_ms": (started - request.arrived) * 1000,
                   "ttft_ms": (first_at - started) * 1000 if first_at is not None else None,
                   "decode_tokens_per_s": (generated - 1) / decode_s if generated > 1 and decode_s > 0 else None,
                   "total_ms": (now - request.arrived) * 1000})  # fmt: skip

    @staticmethod
    def _state(slot: Slot) -> str:
        running = slot.running
        if running is None:
            return "idle"
        return "decoding" if running.last is not None else "prefilling"


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
