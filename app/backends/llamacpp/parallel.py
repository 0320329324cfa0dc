"""llama.cpp parallel sequences in a child process (``app.backends.llamacpp.parallel_worker``), for ``bench run``.

``ParallelLlama.start(model, slots, n_ctx_per_seq)`` starts the child (one context, ``n_seq_max = slots``) and
waits until it has loaded the model; ``generate(prompt, max_tokens)`` sends one request and returns its
``ParallelResult`` (the child's own clock: TTFT from the start of the request's prefill to its first sampled
token, latency from its arrival in the child). Requests beyond ``slots`` wait in the child for a free sequence.
Prompts are plain text (no chat template) and replies ignore EOS: exactly ``max_tokens`` tokens each.
A native crash ends only the child (every waiting ``generate`` then raises ``ParallelLlamaError``);
``close()`` kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any

from app.backends.protocol import BackendError
from app.core import safe_json

START_TIMEOUT_S = 300.0


class ParallelLlamaError(BackendError):
    """The child could not start, or died; the message says why."""


@dataclass(frozen=True)
class ParallelResult:
    tokens: int
    prompt_tokens: int
    ttft_ms: float
    latency_ms: float


class ParallelLlama:
    """One child process running ``slots`` llama.cpp sequences at once."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[ParallelResult]] = {}
        self._ids = itertools.count()
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._tasks: list[asyncio.Task[None]] = []
        self.slots = 0
        self.info: dict[str, Any] = {}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def start(self, model: str, slots: int, n_ctx_per_seq: int, n_threads: int | None = None) -> None:
        """Start the child and wait for the model to load. Raises ParallelLlamaError (the reason in words)."""
        await self.close()
        settings = {"slots": slots, "n_ctx_per_seq": n_ctx_per_seq, "n_threads": n_threads}
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.backends.llamacpp.parallel_worker", model, json.dumps(settings),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            limit=1 << 20,
        )  # fmt: skip
        self._stderr_tail.clear()
        self._tasks = [asyncio.create_task(self._drain_stderr(self._proc))]
        try:
            first = await asyncio.wait_for(self._read(self._proc), START_TIMEOUT_S)
        except TimeoutError:
            first = {"error": f"the model did not load within {START_TIMEOUT_S:.0f} s"}
        if first is None or "ready" not in first:
            if first is None:
                await self._proc.wait()
                await asyncio.wait(self._tasks, timeout=2.0)  # the stderr tail, for the message
            why = self._why(first)
            await self.close()
            raise ParallelLlamaError(why)
        self.slots, self.info = slots, first["ready"]
        self._tasks.append(asyncio.create_task(self._read_results(self._proc)))

    async def generate(self, prompt: str, max_tokens: int) -> ParallelResult:
        """Run one request; raises ParallelLlamaError if the child rejects it or dies."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise ParallelLlamaError("the llama.cpp parallel worker is not running")
        request_id = next(self._ids)
        future: asyncio.Future[ParallelResult] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            proc.stdin.write((json.dumps({"id": request_id, "prompt": prompt, "max_tokens": max_tokens}) + "\n")
                             .encode())  # fmt: skip
            await proc.stdin.drain()
            return await future
        except (BrokenPipeError, ConnectionResetError):
            raise ParallelLlamaError(self._why(None)) from None
        finally:
            self._pending.pop(request_id, None)

    async def close(self) -> None:
        """Kill the child (if running) and fail whatever still waits."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc is not None:
            await proc.wait()
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        self._fail_pending("the llama.cpp parallel worker was stopped")

    async def _read(self, proc: asyncio.subprocess.Process) -> dict[str, Any] | None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            with contextlib.suppress(ValueError):  # JsonError: not a protocol line (or damaged), skipped
                message = safe_json.loads(line, what="a line from the parallel worker")
                if isinstance(message, dict):
                    return message
        return None

    async def _read_results(self, proc: asyncio.subprocess.Process) -> None:
        while (message := await self._read(proc)) is not None:
            future = self._pending.get(message.get("id", -1))
            if "error" in message and future is None:
                self._fail_pending(f"llama.cpp parallel worker: {message['error']}")
            elif future is None or future.done():
                continue
            elif "error" in message:
                future.set_exception(ParallelLlamaError(str(message["error"])))
            else:
                future.set_result(ParallelResult(int(message["tokens"]), int(message["prompt_tokens"]),
                                                 float(message["ttft_ms"]), float(message["latency_ms"])))  # fmt: skip
        await proc.wait()
        self._fail_pending(self._why(None))

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            self._stderr_tail.append(line.decode(errors="replace").rstrip())

    def _fail_pending(self, why: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ParallelLlamaError(why))

    def _why(self, message: dict[str, Any] | None) -> str:
        if message is not None and "error" in message:
            return str(message["error"])
        code = self._proc.returncode if self._proc is not None else None
        tail = next((line for line in reversed(self._stderr_tail) if line.strip()), "")
        return f"the llama.cpp parallel worker ended (exit {code})" + (f": {tail}" if tail else "")
