"""The engine host's parallel llama.cpp engine (``EngineHost.parallel``): up to N replies at once on one model by
continuous batching (``app.backends.llamacpp.parallel_chats``), each sequence with the full context it was loaded
with. The API server uses it for llama.cpp requests when N > 1 (``serve --parallel N``, or the model's
``LoadParams.n_parallel``); requests it cannot run (grammars, logprobs, images, echo) go to the single worker. The
chats use it for a model whose setting is N > 1 (``EngineHost.load`` loads it here, ``keep``: the idle time never
unloads it while the chats run on it).

It holds its own copy of the model, beside the single worker's (which loads only when such a request comes).
N × context must fit this machine by the memory estimate, or the load is refused with the numbers. Listeners hear
``ParallelSlotsChanged`` with a ``ParallelSnapshot`` — each slot's cells in use, whose request runs there, the queue —
when a request is queued, starts or ends, and about twice a second while it generates; ``snapshot()`` reads it now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from app.backends.llamacpp.parallel_chats import ParallelChats, ParallelEngineError, ParallelReply, SlotsReport
from app.backends.protocol import ModelInfo
from app.core.errors import InvalidInputError
from app.core.gguf.header import read_gguf_header
from app.core.load_checks import estimate_settings
from app.core.memory.fit import MachineMemory
from app.core.memory.parallel_fit import default_slots, parallel_refusal
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.services.engines.entries import EngineKind, engine_model
from app.services.engines.events import EngineEvent, ParallelSlotsChanged, ParallelSnapshot, SlotView

log = logging.getLogger("app.services.engines")
_CRASH_SIGNALS = (-signal.SIGILL, -signal.SIGSEGV, -signal.SIGBUS)


@dataclass(frozen=True)
class ParallelLoad:
    entry: str
    params: LoadParams  # n_ctx: each sequence's
    slots: int
    info: ModelInfo


@dataclass(frozen=True)
class ParallelUse:
    """A request's hold on the parallel engine with its model loaded (``loaded_here``: loaded for it)."""

    load: ParallelLoad
    loaded_here: bool = False
    load_ms: float | None = None


class ParallelSlots:
    def __init__(
        self,
        emit: Callable[[EngineEvent], None],
        machine_memory: Callable[[], MachineMemory] | None = None,
        no_repack: Callable[[], bool] | None = None,
    ) -> None:
        """``machine_memory`` reads free memory for the N × context check (blocking; default NVML and psutil);
        ``no_repack`` says whether llama.cpp's CPU-specific kernels are off on this machine (the single worker's
        fallback); a child that crashes while starting is started again without them."""
        self._emit = emit
        self._machine_memory = machine_memory
        self._no_repack = no_repack or (lambda: False)
        self._repack_crashed = False
        self._chats = ParallelChats(on_slots=self._reported)
        self._loaded: ParallelLoad | None = None
        self._users = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._load_lock = asyncio.Lock()
        self._who: dict[int, tuple[str | None, str | None]] = {}  # reply id → (client, request label)
        self._expiry: asyncio.TimerHandle | None = None
        self._expiring: set[asyncio.Task[None]] = set()
        self._kept: str | None = None  # the chats' model: never unloaded for idleness while it is

    @property
    def loaded(self) -> ParallelLoad | None:
        return self._loaded if self._chats.running else None

    async def slots_for(self, entry: str, params: LoadParams, asked: int | None) -> int:
        """N for ``entry``: ``asked`` (``serve --parallel``), else its setting, else what fits (up to 4)."""
        if asked is not None:
            return asked
        if params.n_parallel is not None:
            return params.n_parallel
        return await asyncio.get_running_loop().run_in_executor(None, self._default_slots, entry, params)

    @contextlib.asynccontextmanager
    async def use(
        self, entry: str, params: LoadParams, slots: int, on_loading: Callable[[], None] | None = None
    ) -> AsyncIterator[ParallelUse]:
        """Hold the engine with ``entry`` loaded for ``slots`` sequences of ``params.n_ctx`` tokens each (loaded
        now if another load is there: after the requests on it end). Raises InvalidInputError when N × context
        will not fit, ModelLoadError-like ``ParallelEngineError`` when the child cannot start."""
        self._cancel_expiry()
        async with self._load_lock:
            held = self.loaded
            if held is not None and held.entry == entry and held.params == params and held.slots == slots:
                use = ParallelUse(held)
            else:
                await self._idle.wait()
                if on_loading is not None:
                    on_loading()
                began = time.perf_counter()
                use = ParallelUse(await self._load(entry, params, slots), True, (time.perf_counter() - began) * 1000)
            self._users += 1
            self._idle.clear()
        try:
            yield use
        finally:
            self._users -= 1
            if self._users == 0:
                self._idle.set()

    def stream_chat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, options: GenerationOptions | None = None,
        *, client: str | None = None, label: str | None = None,
    ) -> ParallelReply:  # fmt: skip
        reply = self._chats.stream_chat(messages, sampling, options)
        self._who[reply.id] = (client, label)
        return reply

    def complete(
        self, prompt: str, sampling: SamplingParams, options: GenerationOptions | None = None,
        *, client: str | None = None, label: str | None = None,
    ) -> ParallelReply:  # fmt: skip
        reply = self._chats.stream_completion(prompt, sampling, options)
        self._who[reply.id] = (client, label)
        return reply

    async def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        return await self._chats.count_tokens(messages, tools)

    def keep(self, entry: str | None) -> None:
        """The chats run on ``entry`` here (None: no longer): the idle time (``unload_after``) leaves it loaded."""
        self._kept = entry
        if entry is not None:
            self._cancel_expiry()

    def release(self, entry: str) -> None:
        """The chats no longer run on ``entry``: unloaded as soon as no request uses it (if it is still loaded)."""
        if self._kept == entry:
            self._kept = None
            if self._loaded is not None and self._loaded.entry == entry:
                self.unload_after(0.0)

    def queued_place(self, reply: ParallelReply) -> int:
        """``reply``'s place in the engine's queue as it was sent (1: next to get a slot), 0 when a slot was free
        for it: the child gives slots in arrival order, so the replies sent before it that have not ended are ahead."""
        loaded = self.loaded
        if loaded is None:
            return 0
        ahead = sum(1 for other in self._chats.live_ids() if other < reply.id)
        return max(0, ahead - loaded.slots + 1)

    def snapshot(self) -> ParallelSnapshot:
        """The slots now: each one's state, cells in use of its context, whose request; the requests waiting."""
        loaded = self.loaded
        if loaded is None:
            return ParallelSnapshot()
        return self._snapshot(loaded, self._chats.report)

    def unload_after(self, idle_s: float) -> None:
        """Unload the model ``idle_s`` seconds from now unless a request comes first (the server's idle TTL)."""
        self._cancel_expiry()
        loop = asyncio.get_running_loop()
        self._expiry = loop.call_later(max(idle_s, 0.0), self._expire_soon)

    def _expire_soon(self) -> None:
        self._expiry = None
        task = asyncio.get_running_loop().create_task(self._expire())
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self) -> None:
        if self._users or self._chats.in_flight or self.loaded is None:
            return
        if self._kept is not None and self.loaded.entry == self._kept:
            return  # the chats run on it
        log.info("parallel llama.cpp engine: unloading %s after its idle time", self.loaded.info.name)
        await self.close()

    def _cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    async def close(self) -> None:
        self._cancel_expiry()
        await self._chats.close()
        self._loaded = None
        self._emit(ParallelSlotsChanged(EngineKind.LLAMACPP, ParallelSnapshot()))

    # --- internals ----------------------------------------------------------------------------------------
    async def _load(self, entry: str, params: LoadParams, slots: int) -> ParallelLoad:
        path = engine_model(entry)
        refusal = await asyncio.get_running_loop().run_in_executor(None, self._refusal, path, params, slots)
        if refusal is not None:
            raise InvalidInputError(refusal)
        self._loaded = None
        no_repack = self._no_repack() or self._repack_crashed
        layers = params.n_gpu_layers if params.n_gpu_layers is not None else -1
        try:
            info = await self._chats.start(path, params, slots, layers, no_repack=no_repack)
        except ParallelEngineError as exc:
            if no_repack or not exc.crashed:
                raise
            log.warning("the parallel llama.cpp engine crashed starting (%s): starting it again without llama.cpp's "
                        "CPU-specific kernels", exc)  # fmt: skip
            self._repack_crashed = True
            info = await self._chats.start(path, params, slots, layers, no_repack=True)
        self._loaded = ParallelLoad(entry, params, slots, _model_info(info))
        log.info("parallel llama.cpp engine: %s loaded for %d sequences × %s tokens", self._loaded.info.name, slots,
                 f"{self._loaded.info.n_ctx:,}")  # fmt: skip
        return self._loaded

    def _refusal(self, path: str, params: LoadParams, slots: int) -> str | None:
        header = read_gguf_header(path)
        return parallel_refusal(header, estimate_settings(params), slots, self._read_memory())

    def _default_slots(self, entry: str, params: LoadParams) -> int:
        header = read_gguf_header(engine_model(entry))
        return default_slots(header, estimate_settings(params), self._read_memory())

    def _read_memory(self) -> MachineMemory:
        if self._machine_memory is not None:
            return self._machine_memory()
        from app.services.monitor.machine_memory import read_machine_memory

        return read_machine_memory()

    def _reported(self, report: SlotsReport) -> None:
        loaded = self._loaded
        if loaded is not None:
            self._emit(ParallelSlotsChanged(EngineKind.LLAMACPP, self._snapshot(loaded, report)))

    def _snapshot(self, loaded: ParallelLoad, report: SlotsReport) -> ParallelSnapshot:
        live = self._chats.live_ids()
        for gone in [r for r in self._who if r not in live]:
            del self._who[gone]
        views = tuple(
            SlotView(s.slot, s.state, s.cells, report.n_ctx_per_slot or loaded.info.n_ctx,
                     *self._who.get(s.request, (None, None)) if s.request is not None else (None, None), s.generated)
            for s in report.slots
        )  # fmt: skip
        return ParallelSnapshot(loaded.entry, views, report.waiting, self._chats.pid, report.generated_total)


def _model_info(info: dict[str, Any]) -> ModelInfo:
    return ModelInfo(
        path=str(info["path"]), name=str(info.get("name") or ""), architecture=info.get("architecture"),
        n_ctx=int(info["n_ctx"]), n_ctx_train=info.get("n_ctx_train"), n_gpu_layers=int(info.get("n_gpu_layers") or 0),
        chat_format=info.get("chat_format"), chat_format_reason=str(info.get("chat_format_reason") or ""),
        load_seconds=float(info.get("load_seconds") or 0.0), gpu_offload_supported=False,
        metadata=dict(info.get("metadata") or {}),
    )  # fmt: skip
