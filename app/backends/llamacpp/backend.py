"""The llama.cpp backend: the Backend protocol over a worker process that runs llama-cpp-python."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.backends.facts import LLAMACPP_FACTS
from app.backends.llamacpp import protocol
from app.backends.llamacpp.kernel_fallback import NOTE as KERNEL_NOTE
from app.backends.llamacpp.kernel_fallback import KernelFallback
from app.backends.llamacpp.process import WorkerProcess, describe_exit
from app.backends.protocol import (
    BackendBase,
    BackendBusyError,
    BackendError,
    BackendState,
    Delta,
    GenerationError,
    KvUsage,
    ModelInfo,
    ModelLoadError,
    RequestRefusedError,
    StateKind,
)
from app.backends.streamed_reply import StreamedReply
from app.core.chat.conversation import ReplyStats
from app.core.errors import ErrorKind, InvalidInputError
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.load_checks import context_beyond_training, memory_refusal
from app.core.memory.fit import MachineMemory
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.core.speculative import speculative_problem

log = logging.getLogger("app.backends.llamacpp")
_NO_OPTIONS = GenerationOptions()

BUSY_MESSAGE = "A reply is being generated. Stop it before loading another model."
# error kinds that mean "this request cannot work as asked": the caller changes it (CLI exit 2)
_BAD_REQUEST_KINDS = (protocol.ERR_BAD_INPUT, protocol.ERR_TEMPLATE)
# error kinds of a reply that mean the same: nothing wrong with the engine, the request must change (HTTP 400)
_REFUSED_REPLY_KINDS = (protocol.ERR_BAD_INPUT, protocol.ERR_PROMPT_TOO_LONG)


class LoadRefusedError(ModelLoadError, InvalidInputError):
    """The load cannot work as asked (an unknown chat format, a chat template that fails, a context that will
    not fit this machine's memory); the message says what to change."""

    kind = ErrorKind.INVALID_INPUT  # BackendError's ENGINE_FAILED would come first in the MRO


class _WorkerError(BackendError):
    """An error event: its kind, and whether the worker still holds a model (a refused load keeps the old one)."""

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__(event.get("message", "the llama.cpp worker failed"))
        self.worker_kind = event.get("kind")  # the worker protocol's error kind (ERR_*)
        self.model_kept = bool(event.get("loaded"))


class _KernelCrash(GenerationError):
    """The worker died in llama.cpp's CPU-specific kernels; the fallback is on and the reply can be asked again."""


@dataclass
class _Reply:
    """Book-keeping for one chat request, filled as its events arrive."""

    sent_at: float
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    first_at: float | None = None
    last_at: float | None = None
    text: list[str] = field(default_factory=list)
    abandoned: bool = False
    stats: ReplyStats | None = None  # set at its "done" event


class LlamaCppBackend(BackendBase):
    """llama-cpp-python in a child process: a native crash kills the worker, never the app."""

    kind = "llamacpp"
    facts = LLAMACPP_FACTS
    embeds_on_chat_context = True  # a model loaded for chat answers embeddings too, without a reload

    def __init__(
        self,
        python: str | None = None,
        machine_memory: Callable[[], MachineMemory] | None = None,
        kernel_fallback_marker: Path | None = None,
    ) -> None:
        """``machine_memory`` reads this machine's free memory (blocking; it runs on an executor); with it a load
        whose context will not fit is refused before the worker tries (the worker itself checks RAM only).
        ``kernel_fallback_marker`` remembers that llama.cpp's CPU-specific kernels crash on this machine."""
        super().__init__()
        self._python = python
        self._machine_memory = machine_memory
        self.kernel_fallback = KernelFallback(kernel_fallback_marker)
        self._recovery: asyncio.Task[None] | None = None  # the worker restarting after a kernel crash
        self._last_load: tuple[str, LoadParams] | None = None
        self._worker: WorkerProcess | None = None
        self._ids = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._replies: dict[int, _Reply] = {}
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self._active: int | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._generated_reply = 0  # tokens sampled so far in the current (or last) reply, live
        self._generated_earlier = 0  # tokens sampled in the replies before it
        self.speculative_mode = "off"  # speculative decoding of the loaded model: "off", "ngram" or "draft"
        self._speculate_next = True  # False: the next reply goes without it (see ``skip_speculation_once``)

    # --- public API -------------------------------------------------------------------------
    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker and self._worker.alive else None

    @property
    def generating(self) -> bool:
        return self._active is not None

    @property
    def generated_tokens_live(self) -> int:
        """Tokens sampled so far in the reply in flight (or the last one); updated with each delta."""
        return self._generated_reply

    @property
    def generated_tokens_total(self) -> int:
        """Tokens sampled over every reply of this backend, live: only grows, so the monitor can take a rate
        of decoding alone (the context size also grows by the prompt)."""
        return self._generated_earlier + self._generated_reply

    async def load(self, model: str, params: LoadParams) -> ModelInfo:
        """Load a GGUF in the worker (starting it if needed); raises ModelLoadError with a readable reason
        (LoadRefusedError when the request itself must change: the model loaded before stays loaded)."""
        if self.generating:
            raise BackendBusyError(BUSY_MESSAGE)
        problems = params.problems()
        if problem := speculative_problem(params.speculative):
            problems.append(problem)
        if problems:
            raise LoadRefusedError(" ".join(problems))
        refusal = await asyncio.get_running_loop().run_in_executor(None, self._memory_refusal, model, params)
        if refusal is not None:
            raise LoadRefusedError(refusal)
        previous = self._model, self._kv, self._state
        self._set_state(StateKind.STARTING, f"loading {model.rsplit('/', 1)[-1]}")
        self._model, self._kv = None, None
        try:
            event = await self._load_in_worker(model, params)
        except BackendError as exc:
            raise self._load_failed(exc, previous) from exc
        self._last_load = (model, params)
        info = event["info"]
        self._model = ModelInfo(**info)
        self.speculative_mode = str(event.get("speculative", "off"))
        self._kv = KvUsage(0, self._model.n_ctx)
        self._set_state(StateKind.READY, self._model.name)
        log.info("loaded %s in %.2f s (n_ctx %d)", model, self._model.load_seconds, self._model.n_ctx)
        if warning := context_beyond_training(self._model.n_ctx, self._model.n_ctx_train):
            log.info("note: %s", warning)  # INFO: the window's log shows it; the CLI prints its own line
        return self._model

    async def _load_in_worker(self, model: str, params: LoadParams) -> dict[str, Any]:
        """The worker's answer to a load; once more in a fresh worker when this one died in llama.cpp's
        CPU-specific kernels (see ``kernel_fallback``)."""
        for attempt in (1, 2):
            await self._ensure_worker()
            try:
                return await self._request({"op": "load", "path": model, "params": params.to_dict()})
            except _WorkerError as exc:
                if attempt == 2 or not self._take_kernel_crash(exc):
                    raise
        raise AssertionError("unreachable")

    def _take_kernel_crash(self, exc: BackendError) -> bool:
        return isinstance(exc, _WorkerError) and exc.worker_kind == protocol.ERR_KERNEL_CRASH

    def _memory_refusal(self, model: str, params: LoadParams) -> str | None:
        """Blocking (header read, memory readings): run on an executor."""
        if self._machine_memory is None:
            return None
        try:
            header = read_gguf_header(model)
        except (GgufFileError, OSError):
            return None  # the worker reports what is wrong with the file
        return memory_refusal(header, params, self._machine_memory())

    def _load_failed(
        self, exc: BackendError, previous: tuple[ModelInfo | None, KvUsage | None, BackendState]
    ) -> ModelLoadError:
        """The error to raise; the state shows the model the worker still holds, or the failure."""
        model, kv, state = previous
        if isinstance(exc, _WorkerError) and exc.model_kept and model is not None:
            self._model, self._kv = model, kv
            self._set_state(state.kind, state.detail)
        else:
            self._set_state(StateKind.FAILED, str(exc))
        if isinstance(exc, _WorkerError) and exc.worker_kind in _BAD_REQUEST_KINDS:
            return LoadRefusedError(str(exc))
        return ModelLoadError(str(exc))

    def skip_speculation_once(self) -> None:
        """The next reply runs without speculative decoding (a measurement of the model without it)."""
        self._speculate_next = False

    async def unload(self) -> None:
        if self.generating:
            raise BackendBusyError("A reply is being generated. Stop it before unloading the model.")
        if self._worker and self._worker.alive and self._model is not None:
            await self._request({"op": "unload"})
        self._model, self._kv = None, None
        self.speculative_mode = "off"
        self._set_state(StateKind.STOPPED)

    def stream_chat(
        self, messages: list[dict[str, Any]], params: SamplingParams, options: GenerationOptions | None = None
    ) -> StreamedReply:
        """Stream a reply. Its ``stop()`` ends it gracefully; cancelling the consumer (or closing the stream) also
        stops the worker at its next token. ``options``: structured output, tools, logprobs — enforced by a
        grammar in the worker or refused with RequestRefusedError (InvalidInputError for a malformed shape)."""
        command = {"op": "chat", "messages": messages}
        return StreamedReply(lambda handle: self._stream(handle, command, params, options))

    def stream_completion(
        self, prompt: str, params: SamplingParams, options: GenerationOptions | None = None
    ) -> StreamedReply:
        """Continue ``prompt`` as raw text, without the chat template (OpenAI's ``/v1/completions``)."""
        if options is not None and options.tools:
            raise InvalidInputError("A text completion cannot call tools; send the tools with a chat instead.")
        command = {"op": "complete", "prompt": prompt}
        return StreamedReply(lambda handle: self._stream(handle, command, params, options))

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One normalized vector per text, from a model loaded with ``LoadParams(embedding=True)`` or from the
        loaded chat model's own context (mean-pooled; its prompt cache is kept: ``chat_embeddings``)."""
        return (await self.embed_counted(texts))[0]

    async def embed_counted(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """The vectors of ``embed`` and the texts' token count (an embeddings request's usage)."""
        if not texts:
            raise InvalidInputError("Give at least one text to embed.")
        event = await self._model_request({"op": "embed", "texts": list(texts)})
        return [list(vector) for vector in event["vectors"]], int(event.get("tokens", 0))

    def sibling(self) -> LlamaCppBackend:
        """Another backend like this one, with its own worker (the engine host's embedding slot)."""
        return LlamaCppBackend(self._python, self._machine_memory, self.kernel_fallback.marker)

    @property
    def machine_memory(self) -> Callable[[], MachineMemory] | None:
        """The reader of this machine's free memory that load checks use (None: llama.cpp decides alone)."""
        return self._machine_memory

    async def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        """The prompt tokens of this chat, rendered by the model's chat template with ``tools`` shown."""
        GenerationOptions(tools=tools).check()
        event = await self._model_request({"op": "count", "messages": messages, "tools": tools})
        return int(event["tokens"])

    async def _model_request(self, command: dict[str, Any]) -> dict[str, Any]:
        """A request to the loaded model that is not a reply (it waits behind a reply in the worker); asked once
        more, as a reply is, when llama.cpp's CPU-specific kernels crashed the worker on it."""
        for attempt in (1, 2):
            if self._model is None or self._worker is None or not self._worker.alive:
                raise BackendError("No model is loaded. Open a model and load it first.")
            try:
                return await self._request(command)
            except _WorkerError as exc:
                if exc.worker_kind in _REFUSED_REPLY_KINDS:
                    raise RequestRefusedError(str(exc)) from None
                if attempt == 2 or not self._take_kernel_crash(exc) or self._recovery is None:
                    raise
                await self._recovery
        raise AssertionError("unreachable")

    async def _stream(
        self, handle: StreamedReply, command: dict[str, Any], params: SamplingParams, options: GenerationOptions | None
    ) -> AsyncGenerator[Delta, None]:
        """A reply; asked once more, in a worker without llama.cpp's CPU-specific kernels, when those crashed the
        worker before the reply's first token (the model is reloaded there first)."""
        for attempt in (1, 2):
            started = False
            try:
                async with contextlib.aclosing(self._stream_once(handle, command, params, options)) as deltas:
                    async for delta in deltas:  # closed with this one: the worker stops at its next token
                        started = True
                        yield delta
                return
            except _KernelCrash:
                if attempt == 2 or started or self._recovery is None:
                    raise
                await self._recovery

    async def _stream_once(
        self, handle: StreamedReply, command: dict[str, Any], params: SamplingParams, options: GenerationOptions | None
    ) -> AsyncGenerator[Delta, None]:
        if options is not None:
            options.check()
        if self.generating:
            raise BackendBusyError("A reply is already being generated. Stop it first.")
        if self._model is None or self._worker is None or not self._worker.alive:
            raise BackendError("No model is loaded. Open a model and load it first.")
        request_id = next(self._ids)
        reply = _Reply(sent_at=time.perf_counter())
        self._replies[request_id] = reply
        self._begin(request_id)
        speculate, self._speculate_next = self._speculate_next, True
        self._worker.send(
            {**command, "id": request_id, "sampling": params.to_dict(), "options": (options or _NO_OPTIONS).to_dict(),
             "speculate": speculate}
        )  # fmt: skip
        handle.on_stop(lambda: self.stop_reply(request_id))
        finished = False
        try:
            while True:
                event = await reply.queue.get()
                kind = event["event"]
                if kind == "delta":
                    yield Delta(event["text"], logprobs=event.get("logprobs"))
                elif kind == "done":
                    finished = True
                    return
                else:
                    finished = True
                    raise self._reply_error(event, "".join(reply.text))
        finally:
            if not finished:  # the consumer stopped reading (closed, cancelled, or dropped the stream)
                reply.abandoned = True
                self.stop_reply(request_id)
                while self._active == request_id:  # the worker ends it at its next token: then the next may go
                    await self._idle.wait()
            handle.stats = reply.stats

    def stop(self) -> None:
        """Ask the worker to stop the reply in flight at its next token."""
        if self._active is not None:
            self.stop_reply(self._active)

    def stop_reply(self, request_id: int) -> None:
        if self._active == request_id and self._worker is not None:
            self._worker.send({"op": "stop", "id": request_id})

    async def wait_idle(self) -> None:
        """Wait until no reply is in flight (after stop(), the worker still has to acknowledge)."""
        await self._idle.wait()

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, worker.stop)
        self._model, self._kv = None, None
        self._set_state(StateKind.STOPPED)

    def kill_worker(self) -> None:
        """Kill the worker outright (used by tests and by 'force stop')."""
        if self._worker is not None:
            self._worker.kill()

    # --- internals ---------------------------------------------------------------------------
    def _begin(self, request_id: int) -> None:
        self._active = request_id
        self._generated_earlier += self._generated_reply
        self._generated_reply = 0
        self._idle.clear()
        self._set_state(StateKind.GENERATING, self._model.name if self._model else "")

    def _end(self, request_id: int) -> None:
        self._replies.pop(request_id, None)
        if self._active == request_id:
            self._active = None
            self._idle.set()
            if self._worker and self._worker.alive and self._model is not None:
                self._set_state(StateKind.READY, self._model.name)

    async def _ensure_worker(self) -> None:
        if self._worker is not None and self._worker.alive:
            return
        loop = asyncio.get_running_loop()
        self._worker = WorkerProcess(loop, self._on_event, self._python, self.kernel_fallback.worker_env())
        self._hello = loop.create_future()
        await loop.run_in_executor(None, self._worker.start)
        await self._hello

    async def _request(self, command: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = future
        if self._worker is None or not self._worker.send({**command, "id": request_id}):
            self._waiters.pop(request_id, None)
            raise BackendError("The llama.cpp worker is not running. Load the model again.")
        event = await future
        if event["event"] == "error":
            raise _WorkerError(event)
        return event

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "hello":
            if self._hello and not self._hello.done():
                self._hello.set_result(event)
        elif kind == "exit":
            self._on_exit(event)
        elif event.get("id") in self._replies:
            self._on_reply_event(event)
        elif (waiter := self._waiters.pop(event.get("id"), None)) is not None and not waiter.done():  # type: ignore[arg-type]
            waiter.set_result(event)

    def _on_reply_event(self, event: dict[str, Any]) -> None:
        request_id = event["id"]
        reply = self._replies[request_id]
        now = time.perf_counter()
        self._generated_reply = int(event.get("generated", self._generated_reply))  # on "delta" and "done"
        if event["event"] == "delta":
            reply.first_at = reply.first_at or now
            reply.last_at = now
            reply.text.append(event["text"])
            if self._model is not None and "kv_used" in event:  # live while generating; exact at "done"
                self._kv = KvUsage(int(event["kv_used"]), self._model.n_ctx)
        elif event["event"] == "done":
            self._stats = reply.stats = _reply_stats(reply, event, now)
            if event.get("kv"):
                self._kv = KvUsage(event["kv"]["used_cells"], event["kv"]["total_cells"])
        if event["event"] in ("done", "error"):
            self._end(request_id)
        if not reply.abandoned:
            reply.queue.put_nowait(event)

    def _on_exit(self, event: dict[str, Any]) -> None:
        worker = self._worker
        if worker is None or worker.pid != event.get("pid"):
            log.debug("llama.cpp worker %s exited after it was closed", event.get("pid"))
            return
        tail = "\n".join(list(worker.stderr_tail)[-5:]) if worker else ""
        reason = f"The llama.cpp worker stopped unexpectedly: {describe_exit(event.get('returncode'))}."
        log.error("%s Last worker output:\n%s", reason, tail or "(none)")
        recoverable = self.kernel_fallback.crashed(event.get("returncode"))
        kind = protocol.ERR_KERNEL_CRASH if recoverable else protocol.ERR_EXITED
        failure = {"event": "error", "kind": kind, "message": reason, "tail": tail}
        if self._hello and not self._hello.done():
            self._hello.set_result(failure)
        for request_id, waiter in list(self._waiters.items()):
            if not waiter.done():
                waiter.set_result({**failure, "id": request_id})
        self._waiters.clear()
        for request_id, reply in list(self._replies.items()):
            if not reply.abandoned:
                reply.queue.put_nowait({**failure, "id": request_id})
            self._end(request_id)
        self._worker = None
        if recoverable and self._model is not None and self._last_load is not None:
            self._set_state(StateKind.STARTING, "restarting llama.cpp without its CPU-specific kernels")
            self._recovery = asyncio.ensure_future(self._recover(*self._last_load))
            return  # the model stays loaded as far as clients know: the new worker loads it again
        was_loaded = self._model is not None
        self._model, self._kv = None, None
        if was_loaded or self._state.kind is StateKind.STARTING:
            self._set_state(StateKind.FAILED, reason + " Load the model again to continue.")

    async def _recover(self, model: str, params: LoadParams) -> None:
        """A fresh worker without the crashing kernels, with the same model loaded again."""
        try:
            await self._ensure_worker()
            event = await self._request({"op": "load", "path": model, "params": params.to_dict()})
        except BackendError as exc:
            self._model, self._kv = None, None
            self._set_state(StateKind.FAILED, f"{exc} Load the model again to continue.")
            raise
        self._model = ModelInfo(**event["info"])
        self.speculative_mode = str(event.get("speculative", "off"))
        self._kv = KvUsage(0, self._model.n_ctx)
        self._set_state(StateKind.READY, self._model.name)
        log.info("llama.cpp restarted without its CPU-specific kernels; %s is loaded again", model)

    def _reply_error(self, event: dict[str, Any], partial: str) -> BackendError:
        message = event.get("message", "generation failed")
        if event.get("kind") in _REFUSED_REPLY_KINDS:
            return RequestRefusedError(message, partial)
        if event.get("kind") == protocol.ERR_KERNEL_CRASH:
            return _KernelCrash(message + " " + KERNEL_NOTE, partial)
        if event.get("kind") == protocol.ERR_EXITED:
            message += " The partial reply was kept; load the model again to continue."
        return GenerationError(message, partial)


def _reply_stats(reply: _Reply, event: dict[str, Any], now: float) -> ReplyStats:
    completion = int(event.get("completion_tokens", 0))
    ttft_ms = (reply.first_at - reply.sent_at) * 1000 if reply.first_at else None
    decode = None
    if reply.first_at and reply.last_at and completion > 1 and reply.last_at > reply.first_at:
        decode = (completion - 1) / (reply.last_at - reply.first_at)
    return ReplyStats(
        prompt_tokens=int(event.get("prompt_tokens", 0)),
        cached_prompt_tokens=int(event.get("cached_tokens") or 0),
        completion_tokens=completion,
        ttft_ms=ttft_ms,
        decode_tokens_per_s=decode,
        total_ms=(now - reply.sent_at) * 1000,
        finish_reason=event.get("finish_reason"),
        stop_sequence=event.get("stop_sequence"),
        spec_mode=event.get("spec_mode"),
        spec_drafted=int(event.get("spec_drafted") or 0),
        spec_accepted=int(event.get("spec_accepted") or 0),
    )
