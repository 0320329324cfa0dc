"""The parallel llama.cpp engine, seen from the app: a child process (``parallel_server``) that runs up to
``slots`` replies at once on one loaded model by continuous batching, each sequence with the full context it was
loaded with.

    chats = ParallelChats(on_slots=...)
    info = await chats.start(path, params, slots)     # params.n_ctx: the context of EACH sequence
    reply = chats.stream_chat(messages, sampling, options)   # a ReplyHandle: async for delta in reply
    chats.report                                       # the slots (request, cells) and the queue, live
    await chats.close()

A request waits in the child while every slot is busy (``report.waiting``). ``stop()``/``aclose()`` on a reply
cancel it there: its slot is free at once. A native crash ends the child only; every reply in flight then fails
with the reason. What the child cannot do (grammars, logprobs, images, echo) its caller sends to the single worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.backends.llamacpp.repack import NO_REPACK_ENV
from app.backends.protocol import BackendError, Delta, GenerationError, RequestRefusedError
from app.core import safe_json
from app.core.chat.conversation import ReplyStats
from app.core.chat.prompt_errors import prompt_too_long_message
from app.core.params import GenerationOptions, LoadParams, SamplingParams

START_TIMEOUT_S = 300.0
_PROMPT_TOO_LONG = "prompt_too_long"


class ParallelEngineError(BackendError):
    """The child could not start, or died; the message says why."""

    def __init__(self, message: str, *, crashed: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed  # killed by a signal (a native crash)


@dataclass(frozen=True)
class SlotState:
    slot: int
    request: int | None  # the reply's id in this engine (None: idle)
    cells: int  # KV cells the slot's stream holds (its request's, or the prefix kept from the last one)
    state: str  # "idle", "prefilling", "decoding"
    generated: int = 0  # tokens its request has generated so far


@dataclass(frozen=True)
class SlotsReport:
    slots: tuple[SlotState, ...] = ()
    waiting: int = 0  # requests waiting for a free slot
    n_ctx_per_slot: int = 0
    generated_total: int = 0  # tokens generated over all requests since the engine started (only grows)


class ParallelReply:
    """One reply from the parallel engine (the ``ReplyHandle`` shape)."""

    def __init__(self, engine: ParallelChats, request_id: int) -> None:
        self.id = request_id
        self._engine = engine
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.stats: ReplyStats | None = None
        self.slot: int | None = None  # set when it takes a slot (None: waiting for one)
        self.cached_tokens = 0  # prompt tokens found cached in its slot (not computed again)
        self.finished = False  # the child has ended it (its events may still be unread)
        self._ended = False

    def stop(self) -> None:
        if not self._ended:
            self._engine._cancel(self.id)

    def __aiter__(self) -> ParallelReply:
        return self

    async def __anext__(self) -> Delta:
        while not self._ended:
            event = await self.events.get()
            kind = event.get("event")
            if kind == "piece":
                return Delta(str(event.get("text", "")))
            if kind == "done":
                self._end()
                self.stats = _stats(event)
            elif kind == "error":
                self._end()
                raise _error(event)
        raise StopAsyncIteration

    async def aclose(self) -> None:
        if not self._ended:
            self._engine._cancel(self.id)
            self._end()

    def _end(self) -> None:
        self._ended = True
        self._engine._replies.pop(self.id, None)


class ParallelChats:
    def __init__(self, on_slots: Callable[[SlotsReport], None] | None = None) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._replies: dict[int, ParallelReply] = {}
        self._ids = itertools.count(1)
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._tasks: list[asyncio.Task[None]] = []
        self._on_slots = on_slots
        self.info: dict[str, Any] = {}
        self._cells: dict[int, int] = {}
        self._states: dict[int, str] = {}
        self._generated: dict[int, int] = {}
        self._generated_total = 0
        self._slot_count = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def in_flight(self) -> int:
        return len(self._replies)

    def live_ids(self) -> set[int]:
        """The replies the child has not ended yet (waiting or in a slot)."""
        return {r.id for r in self._replies.values() if not r.finished}

    @property
    def report(self) -> SlotsReport:
        """Which reply holds each slot and how many waiting (known here at once), and each slot's cells (as the
        child last reported them)."""
        live = [r for r in self._replies.values() if not r.finished]
        holders = {r.slot: r.id for r in live if r.slot is not None}
        states = tuple(
            SlotState(i, holders.get(i), self._cells.get(i, 0), self._states.get(i, "prefilling") if i in holders
                      else "idle", self._generated.get(i, 0) if i in holders else 0)
            for i in range(self._slot_count)
        )  # fmt: skip
        waiting = sum(1 for r in live if r.slot is None)
        return SlotsReport(states, waiting, int(self.info.get("n_ctx") or 0), self._generated_total)

    async def start(
        self, path: str, params: LoadParams, slots: int, n_gpu_layers: int = 0, *, no_repack: bool = False
    ) -> dict[str, Any]:
        """Start the child with ``path`` loaded for ``slots`` sequences of ``params.n_ctx`` tokens each (``no_repack``:
        without llama.cpp's CPU-specific weight layouts, see ``repack``); raises ParallelEngineError (the reason in
        words; ``crashed`` says whether the child died of a signal, as those kernels do where they cannot run)."""
        await self.close()
        settings = {"params": params.to_dict(), "slots": slots, "n_gpu_layers": n_gpu_layers}
        env = {**os.environ, NO_REPACK_ENV: "1"} if no_repack else None
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.backends.llamacpp.parallel_server", path, json.dumps(settings),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            limit=1 << 24, env=env,
        )  # fmt: skip
        self._stderr_tail.clear()
        self._tasks = [asyncio.create_task(self._drain_stderr(self._proc))]
        try:
            first = await asyncio.wait_for(self._read(self._proc), START_TIMEOUT_S)
        except TimeoutError:
            first = {"message": f"the model did not load within {START_TIMEOUT_S:.0f} s"}
        if first is None or first.get("event") != "ready":
            if first is None:
                await self._proc.wait()
                await asyncio.wait(self._tasks, timeout=2.0)
            why = str(first["message"]) if first and "message" in first else self._why()
            code = self._proc.returncode
            await self.close()
            raise ParallelEngineError(why, crashed=code is not None and code < 0)
        self.info, self._slot_count = dict(first["info"]), slots
        self._cells, self._states, self._generated, self._generated_total = {}, {}, {}, 0
        self._tasks.append(asyncio.create_task(self._read_events(self._proc)))
        return self.info

    def stream_chat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, options: GenerationOptions | None = None
    ) -> ParallelReply:
        return self._send({"op": "chat", "messages": messages}, sampling, options)

    def stream_completion(
        self, prompt: str, sampling: SamplingParams, options: GenerationOptions | None = None
    ) -> ParallelReply:
        return self._send({"op": "complete", "prompt": prompt}, sampling, options)

    async def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        """The prompt tokens of this chat as the model's chat template renders it (tools included)."""
        reply = ParallelReply(self, next(self._ids))
        self._replies[reply.id] = reply
        self._write({"op": "count", "id": reply.id, "messages": messages, "tools": tools})
        if not self.running:
            reply.events.put_nowait({"event": "error", "message": "the parallel llama.cpp engine is not running"})
        try:
            event = await reply.events.get()
        finally:
            reply._end()
        if event.get("event") != "count":
            raise _error(event)
        return int(event["tokens"])

    async def close(self) -> None:
        """Kill the child (if running); every reply in flight fails."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc is not None:
            await proc.wait()
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        self._fail_all("the parallel llama.cpp engine was stopped")
        self._slot_count = 0

    # --- internals ----------------------------------------------------------------------------------------
    def _send(
        self, command: dict[str, Any], sampling: SamplingParams, options: GenerationOptions | None
    ) -> ParallelReply:
        reply = ParallelReply(self, next(self._ids))
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            reply.events.put_nowait({"event": "error", "message": "the parallel llama.cpp engine is not running"})
            return reply
        opts = options or GenerationOptions()
        wire = {"stop": list(sampling.stop), "temperature": sampling.temperature, "top_k": sampling.top_k,
                "top_p": sampling.top_p, "min_p": sampling.min_p, "typical_p": sampling.typical_p,
                "repeat_penalty": sampling.repeat_penalty, "frequency_penalty": sampling.frequency_penalty,
                "presence_penalty": sampling.presence_penalty, "seed": sampling.seed,
                "max_tokens": sampling.max_tokens}  # fmt: skip
        options_wire = {"tools": opts.tools, "tool_choice": opts.tool_choice, "exact_stops": opts.exact_stops,
                        "enable_thinking": opts.enable_thinking, "reasoning_effort": opts.reasoning_effort}  # fmt: skip
        self._replies[reply.id] = reply
        self._write({**command, "id": reply.id, "sampling": wire, "options": options_wire})
        self._changed()
        return reply

    def _cancel(self, request_id: int) -> None:
        self._write({"op": "cancel", "id": request_id})

    def _write(self, message: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write((json.dumps(message) + "\n").encode())

    async def _read(self, proc: asyncio.subprocess.Process) -> dict[str, Any] | None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            with contextlib.suppress(ValueError):  # not a protocol line (or damaged): skipped
                message = safe_json.loads(line, what="a line from the parallel llama.cpp engine")
                if isinstance(message, dict):
                    return message
        return None

    async def _read_events(self, proc: asyncio.subprocess.Process) -> None:
        while (event := await self._read(proc)) is not None:
            kind = event.get("event")
            if kind == "slots":
                self._slots(event)
            elif kind == "failed":
                self._fail_all(f"the parallel llama.cpp engine failed: {event.get('message')}")
            elif (reply := self._replies.get(event.get("id", -1))) is not None:
                self._track(reply, event)
                reply.events.put_nowait(event)
        await proc.wait()
        self._fail_all(self._why())

    def _track(self, reply: ParallelReply, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "count":
            reply.finished = True
            return
        if kind == "started":
            reply.slot, reply.cached_tokens = int(event["slot"]), int(event.get("cached_tokens") or 0)
            self._cells[reply.slot], self._states[reply.slot] = reply.cached_tokens, "prefilling"
        elif kind in ("done", "error"):
            reply.finished = True
            if reply.slot is not None:
                self._states[reply.slot] = "idle"
        else:
            return
        self._changed()

    def _slots(self, event: dict[str, Any]) -> None:
        for s in event.get("slots") or []:
            self._cells[int(s["slot"])] = int(s.get("cells") or 0)
            self._states[int(s["slot"])] = str(s.get("state") or "idle")
            self._generated[int(s["slot"])] = int(s.get("generated") or 0)
        self._generated_total = int(event.get("generated_total") or self._generated_total)
        self._changed()

    def _changed(self) -> None:
        if self._on_slots is not None:
            self._on_slots(self.report)

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            self._stderr_tail.append(line.decode(errors="replace").rstrip())

    def _fail_all(self, why: str) -> None:
        for reply in list(self._replies.values()):
            reply.finished = True
            reply.events.put_nowait({"event": "error", "kind": "engine", "message": why})

    def _why(self) -> str:
        code = self._proc.returncode if self._proc is not None else None
        tail = next((line for line in reversed(self._stderr_tail) if line.strip()), "")
        return f"the parallel llama.cpp engine ended (exit {code})" + (f": {tail}" if tail else "")


def _stats(event: dict[str, Any]) -> ReplyStats:
    return ReplyStats(
        prompt_tokens=int(event.get("prompt_tokens") or 0),
        cached_prompt_tokens=int(event.get("cached_tokens") or 0),
        completion_tokens=int(event.get("completion_tokens") or 0),
        ttft_ms=event.get("ttft_ms"),
        decode_tokens_per_s=event.get("decode_tokens_per_s"),
        total_ms=event.get("total_ms"),
        finish_reason=str(event.get("finish_reason") or "stop"),
        stop_sequence=event.get("stop_sequence"),
    )


def _error(event: dict[str, Any]) -> Exception:
    if event.get("kind") == _PROMPT_TOO_LONG:
        return RequestRefusedError(prompt_too_long_message(int(event["prompt_tokens"]), int(event["n_ctx"])))
    message = str(event.get("message") or "the parallel llama.cpp engine failed")
    if event.get("kind") == "bad_input":
        return RequestRefusedError(message)
    return GenerationError(message)
