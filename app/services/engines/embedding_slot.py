"""The embedding slot: a second llama.cpp worker, owned by the engine host, that keeps an embedding model loaded
beside the engine's own (chat) model, so a client that alternates embeddings and chat — every RAG client — loads
each model once instead of swapping them on every request.

The host puts a model here when the memory estimate says it fits in the machine's free memory beside what is
loaded (``fits``: a "fits" verdict, not a tight one); otherwise the model takes the chat model's place as before,
and the log says why. The slot has its own line (embeddings there never wait for a reply being generated), holds
one model at a time, and tells the host's listeners with ``EmbeddingModelLoaded``/``EmbeddingModelUnloaded`` —
never ``ModelLoaded``, which is always the engine's own model. The API server unloads it after its own idle time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from app.backends.protocol import Backend, BackendState, ModelInfo, ModelLoadError
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.load_checks import estimate_settings
from app.core.memory.fit import FITS, MachineMemory, fit_verdict
from app.core.params import LoadParams
from app.services.engines.entries import EngineKind, engine_model
from app.services.engines.events import EmbeddingModelLoaded, EmbeddingModelUnloaded, EngineEvent
from app.services.engines.gate import Turnstile

log = logging.getLogger("app.services.engines")

# llama.cpp architectures that encode text into vectors and cannot write a reply
ENCODER_ARCHITECTURES = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert", "modern-bert", "t5encoder"}
)


def embeds_only(architecture: str | None, metadata: Mapping[str, object]) -> bool:
    """Whether a GGUF is an embedding model: an encoder, or a model that pools its own vectors (``pooling_type``)
    or attends both ways. Any other model is a chat model, which embeds on its chat context (mean-pooled)."""
    if architecture in ENCODER_ARCHITECTURES:
        return True
    pooling = str(metadata.get(f"{architecture}.pooling_type", "0")).strip()
    causal = str(metadata.get(f"{architecture}.attention.causal", "true")).strip().lower()
    return (pooling.isdigit() and int(pooling) > 0) or causal in ("false", "0")


@runtime_checkable
class SiblingEngine(Protocol):
    """An engine that can make another of itself, with its own worker, and reads the machine's free memory."""

    def sibling(self) -> Backend: ...

    @property
    def machine_memory(self) -> Callable[[], MachineMemory] | None: ...


@runtime_checkable
class CountedEmbeddings(Protocol):
    """An engine whose embeddings come with the texts' token count (an embeddings request's usage)."""

    async def embed_counted(self, texts: list[str]) -> tuple[list[list[float]], int]: ...


@dataclass(frozen=True)
class Placement:
    """What a GGUF is and whether it fits beside what is loaded: the slot's decision for one request."""

    chat_model: bool  # it can chat (so a chat load of it embeds too)
    fits: bool  # the memory estimate says "fits" in the free memory left now
    summary: str  # the estimate's words, for the log


@dataclass(frozen=True)
class SlotModel:
    entry: str
    info: ModelInfo
    params: LoadParams


@dataclass(frozen=True)
class SlotTurn:
    """A turn in the slot with ``info`` loaded on ``backend``; ``loaded_here``: this turn loaded it."""

    backend: Backend
    info: ModelInfo
    loaded_here: bool
    load_ms: float | None


def embedding_settings(params: LoadParams) -> LoadParams:
    """``params`` as an embedding load runs them: the whole context in one batch (``engine._embedding_kwargs``)."""
    return replace(params, n_batch=max(params.n_batch, params.n_ctx))


def chat_model_file(path: str) -> bool:
    """Whether the GGUF at ``path`` is a chat model (blocking: a header read); False when it cannot be read."""
    try:
        header = read_gguf_header(path)
    except (GgufFileError, OSError):
        return False
    return not embeds_only(header.architecture, header.metadata)


class EmbeddingSlot:
    """One embedding model in its own worker (made on the first load), with its own line."""

    def __init__(
        self,
        make_backend: Callable[[], Backend],
        machine_memory: Callable[[], MachineMemory],
        emit: Callable[[EngineEvent], None],
    ) -> None:
        self._make_backend = make_backend
        self._machine_memory = machine_memory
        self._emit = emit
        self.backend: Backend | None = None
        self.loaded: SlotModel | None = None
        self.line = Turnstile()
        self._loading = False

    @classmethod
    def beside(cls, engine: Backend, emit: Callable[[EngineEvent], None]) -> EmbeddingSlot | None:
        """The slot for ``engine`` (None when it cannot make a second worker); it judges memory as ``engine``'s
        load checks do, or by NVML and psutil when those have no reader."""
        if not isinstance(engine, SiblingEngine):
            return None
        return cls(engine.sibling, engine.machine_memory or _read_machine_memory, emit)

    def holds(self, entry: str) -> bool:
        return self.loaded is not None and self.loaded.entry == entry

    @property
    def in_use(self) -> bool:
        return self.line.busy

    @property
    def waiting(self) -> int:
        return self.line.waiting

    async def placement(self, entry: str, params: LoadParams) -> Placement | None:
        """Read ``entry``'s GGUF and the machine's free memory (off the loop); None when the file cannot be read
        (its load then says what is wrong)."""

        def judge() -> Placement | None:
            try:
                header = read_gguf_header(engine_model(entry))
                verdict = fit_verdict(header, estimate_settings(embedding_settings(params)), self._machine_memory())
            except (GgufFileError, OSError, ValueError, TypeError):
                return None
            chat = not embeds_only(header.architecture, header.metadata)
            return Placement(chat, verdict.state == FITS, verdict.summary)

        return await asyncio.get_running_loop().run_in_executor(None, judge)

    @contextlib.asynccontextmanager
    async def use(
        self, entry: str, params: LoadParams, on_loading: Callable[[], None] | None = None
    ) -> AsyncIterator[SlotTurn]:
        """A turn in the slot's line with ``entry`` loaded for embeddings (loading it, in place of the model the
        slot held, when needed)."""
        ticket = self.line.ticket()
        try:
            await ticket
            if self.backend is not None and self.loaded is not None and self.loaded.entry == entry:
                yield SlotTurn(self.backend, self.loaded.info, False, None)
                return
            if on_loading is not None:
                on_loading()
            began = time.perf_counter()
            backend, info = await self._load(entry, replace(params, embedding=True))
            yield SlotTurn(backend, info, True, (time.perf_counter() - began) * 1000)
        finally:
            self.line.leave(ticket)

    async def unload(self, entry: str | None = None) -> None:
        """Unload the slot's model (only if it is still ``entry``, when given), in the slot's line."""
        ticket = self.line.ticket()
        try:
            await ticket
            loaded = self.loaded
            if loaded is None or self.backend is None or (entry is not None and loaded.entry != entry):
                return
            await self.backend.unload()
            self._forget(loaded)
        finally:
            self.line.leave(ticket)

    async def close(self) -> None:
        backend, self.backend = self.backend, None
        if backend is not None:
            await backend.close()
        if self.loaded is not None:
            self._forget(self.loaded)

    async def _load(self, entry: str, params: LoadParams) -> tuple[Backend, ModelInfo]:
        backend = self.backend or self._adopt(self._make_backend())
        before, self._loading = self.loaded, True
        try:
            info = await backend.load(engine_model(entry), params)
        except ModelLoadError:
            if before is not None and backend.model is None:
                self._forget(before)  # the worker lost the model it held
            raise
        finally:
            self._loading = False
        if before is not None:
            self._forget(before)
        self.loaded = SlotModel(entry, info, params)
        log.info("loaded %s in the embedding slot, beside the chat model", info.name)
        self._emit(EmbeddingModelLoaded(EngineKind.LLAMACPP, entry, info, params))
        return backend, info

    def _adopt(self, backend: Backend) -> Backend:
        self.backend = backend
        backend.add_state_listener(lambda state: self._state_changed(backend, state))
        return backend

    def _state_changed(self, backend: Backend, state: BackendState) -> None:
        if backend is self.backend and not self._loading and backend.model is None and self.loaded is not None:
            self._forget(self.loaded)  # its worker died

    def _forget(self, loaded: SlotModel) -> None:
        """The slot no longer holds ``loaded`` (said once, whoever noticed first)."""
        if self.loaded is loaded:
            self.loaded = None
            self._emit(EmbeddingModelUnloaded(EngineKind.LLAMACPP, loaded.entry))


def _read_machine_memory() -> MachineMemory:
    from app.services.monitor.machine_memory import read_machine_memory

    return read_machine_memory()
