"""The engine host: the one owner of the engines, the model each has loaded, the app's own vLLM server and the
live figures. The window, the CLI and the API server are its clients; none of them holds an engine itself.

Bound to one asyncio loop (qasync in the window, ``asyncio.run`` in the CLI); other threads reach it with
``asyncio.run_coroutine_threadsafe(..., host.loop)``. Listeners are called on that loop.

The busy rule — one line per engine: an engine that runs one reply at a time (llama.cpp, and Ollama through its
client) takes everything in arrival order — the window's replies and loads, the API's requests (``use``), counts
and vectors — each waits its turn and can see its place; loading another model there waits for the replies ahead
of it and says so. vLLM takes concurrent replies as its server does; a request for another model there waits for
those on the loaded one (``ModelGate``).

Embeddings: a llama.cpp model loaded for chat answers them on its own context (no reload). An embedding model, or a
chat model asked for vectors while another is loaded, goes to the embedding slot — a second llama.cpp worker with
its own line, beside the engine's model — when the memory estimate says it fits (``embeds_beside``, ``use_beside``;
``embedding_slot``); otherwise it takes the engine's model's place, as before.

Parallel chats: a llama.cpp model whose setting is N > 1 (``LoadParams.n_parallel``) loads for the chats in the
parallel engine (``parallel``, continuous batching), not in the single worker: chats then generate side by side, up
to N at once (with the API's requests on that model), the rest wait in the engine's queue. One copy: the single
worker's model is unloaded, and it loads the model again only for a reply or request that needs it (images, a
grammar or JSON format, logprobs, a forced tool call: ``parallel_route``; embeddings on the chat model) — that copy
stays loaded beside, for the next such reply, until the chats' model changes or is unloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from app.backends.factory import create_backend
from app.backends.facts import EngineFacts, facts_for
from app.backends.protocol import (
    Backend,
    BackendState,
    ConcurrentChats,
    Embeddings,
    ModelInfo,
    ModelLoadError,
    TokenCounting,
    implements,
)
from app.core.errors import InvalidInputError, UnavailableError
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.services.engines.embedding_slot import CountedEmbeddings, EmbeddingSlot, chat_model_file, embeds_only
from app.services.engines.entries import EngineKind, engine_model, engine_of, entry_for
from app.services.engines.events import (
    EngineEvent,
    EngineStateChanged,
    LoadWaiting,
    ModelLoaded,
    ModelUnloaded,
    QueueChanged,
    ReplyFigures,
    VllmEndpoint,
    VllmEndpointChanged,
)
from app.services.engines.gate import ModelGate, Turnstile
from app.services.engines.parallel_replies import ParallelReplyStream
from app.services.engines.parallel_route import serial_reason
from app.services.engines.parallel_slots import ParallelSlots
from app.services.engines.replies import ReplyStream
from app.services.engines.vllm_server import ManagedVllm

log = logging.getLogger("app.services.engines")

Listener = Callable[[EngineEvent], None]
_T = TypeVar("_T")
NO_VLLM = "No vLLM server is running: start one or connect to a running one first."


@dataclass(frozen=True)
class LoadedModel:
    entry: str
    info: ModelInfo
    params: LoadParams
    chat_embeds: bool = False  # loaded for chat, it answers embeddings too (on its chat context)
    parallel: int = 0  # N > 1: loaded for the chats in the parallel engine, for N sequences (not in the worker)

    def serves(self, entry: str, params: LoadParams) -> bool:
        """Whether a request for ``entry`` runs on this load as it is: the same model, loaded for the same use
        (chat or embeddings) or for a chat that embeds too; its other settings are whoever loaded it's."""
        if self.entry != entry:
            return False
        return self.params.embedding == params.embedding or (params.embedding and self.chat_embeds)


@dataclass(frozen=True)
class Turn:
    """A turn held on one engine with ``entry`` loaded (``EngineHost.use``): replies, counts and vectors asked
    through it run in this turn, so nothing else on that engine comes between. ``loaded_here``: the turn loaded
    the model, in ``load_ms``."""

    host: EngineHost
    kind: EngineKind
    entry: str
    info: ModelInfo
    loaded_here: bool = False
    load_ms: float | None = None
    beside: Backend | None = None  # the embedding slot's engine, when the turn is there (``use_beside``)

    def stream_chat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, options: GenerationOptions | None = None
    ) -> ReplyStream:
        return self.host._reply(self.kind, messages, sampling, options, None, in_turn=True)

    def complete(self, prompt: str, sampling: SamplingParams, options: GenerationOptions | None = None) -> ReplyStream:
        return self.host._reply(self.kind, [], sampling, options, prompt, in_turn=True)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return (await self.embed_counted(texts))[0]

    async def embed_counted(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """The vectors and the texts' token count (0 from an engine that does not count them)."""
        engine = self.beside if self.beside is not None else self.host._embedder(self.kind)
        if isinstance(engine, CountedEmbeddings):
            return await engine.embed_counted(texts)
        return await self.host._embedder(self.kind).embed(texts), 0

    async def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        return await self.host._counter(self.kind).count_tokens(messages, tools)

    async def reload(self, params: LoadParams) -> ModelInfo:
        """Load this turn's model again with ``params`` (e.g. a larger context), in this turn: nothing else on the
        engine comes between (``host.load`` would queue behind the turn)."""
        return await self.host._load_now(self.kind, self.entry, params)


class EngineHost:
    """Owns the engines. ``llamacpp`` always exists (its worker starts on the first load); Ollama's client is
    made when first used; a vLLM client exists while a vLLM server is offered (``vllm_endpoint``)."""

    def __init__(self, llamacpp: Backend | None = None, *, ollama_host: str | None = None) -> None:
        self._engines: dict[EngineKind, Backend] = {}
        self._loaded: dict[EngineKind, LoadedModel] = {}
        self._turnstiles: dict[EngineKind, Turnstile] = {}
        self._gates: dict[EngineKind, ModelGate] = {}  # concurrent engines: who uses which model
        self._load_locks: dict[EngineKind, asyncio.Lock] = {}
        self._listeners: list[Listener] = []
        self._replies: set[ReplyStream | ParallelReplyStream] = set()
        self._worker_copy: LoadedModel | None = None  # the single worker's copy of a parallel chats' model
        self._ollama_host = ollama_host
        self.vllm_endpoint: VllmEndpoint | None = None
        self.vllm_server = ManagedVllm(self)
        self.loop: asyncio.AbstractEventLoop | None = None
        engine = self._adopt(EngineKind.LLAMACPP, llamacpp or create_backend("llamacpp"))
        self.embedding_slot = EmbeddingSlot.beside(engine, self.emit)  # None: this engine makes no second worker
        # llama.cpp replies side by side (continuous batching), for the API server and parallel chats; started on
        # first use
        self.parallel = ParallelSlots(self.emit, no_repack=lambda: _kernel_fallback_on(engine))

    # --- events ---------------------------------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every event from now on; returns the function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def emit(self, event: EngineEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # one broken client must not stop the others hearing of it
                log.exception("an engine-event listener failed on %s", type(event).__name__)

    # --- engines --------------------------------------------------------------------------------------------
    @property
    def llamacpp(self) -> Backend:
        return self._engines[EngineKind.LLAMACPP]

    def engine(self, kind: EngineKind) -> Backend | None:
        """The engine of that kind if it exists now (nothing is created)."""
        return self._engines.get(kind)

    def engines(self) -> list[Backend]:
        return list(self._engines.values())

    def engine_for(self, entry: str) -> Backend:
        """The engine that runs ``entry`` (``ollama:NAME``, ``vllm:NAME``, else a GGUF), made when first needed."""
        kind = engine_of(entry)
        if kind in self._engines:
            return self._engines[kind]
        if kind is EngineKind.OLLAMA:
            return self._adopt(kind, create_backend("ollama", host=self._ollama_host or None))
        endpoint = self.vllm_endpoint
        if endpoint is None:
            raise UnavailableError(NO_VLLM)
        return self._adopt(kind, create_backend("vllm", base_url=endpoint.base_url, api_key=endpoint.api_key))

    def facts(self, kind: EngineKind) -> EngineFacts:
        """What that engine does itself (whether or not it exists now)."""
        engine = self._engines.get(kind)
        return engine.facts if engine is not None else facts_for(str(kind))

    def concurrent(self, kind: EngineKind) -> bool:
        """Whether that engine generates several replies at once (then chats may generate side by side): a
        concurrent engine, or llama.cpp while the chats' model runs on the parallel engine."""
        engine = self._engines.get(kind)
        loaded = self._loaded.get(kind)
        on_parallel = loaded is not None and loaded.parallel > 1
        return engine is not None and (implements(engine, ConcurrentChats) or on_parallel)

    def model_info(self, kind: EngineKind) -> ModelInfo | None:
        """The model the chats on that engine run on: the parallel engine's load when they run there, else the
        engine's own model."""
        loaded = self._loaded.get(kind)
        if loaded is not None and loaded.parallel:
            return loaded.info
        engine = self._engines.get(kind)
        return engine.model if engine is not None else None

    def loaded(self, kind: EngineKind) -> LoadedModel | None:
        return self._loaded.get(kind)

    def generating(self, kind: EngineKind) -> bool:
        return any(reply.backend is self._engines.get(kind) for reply in self._replies)

    def waiting(self, kind: EngineKind) -> int:
        """Callers waiting in that engine's line (the one whose turn it is not counted)."""
        turnstile = self._turnstiles.get(kind)
        return turnstile.waiting if turnstile else 0

    def in_use(self, kind: EngineKind) -> bool:
        """Whether anyone holds or waits for a turn on that engine (a reply, a load, a request)."""
        turnstile, gate = self._turnstiles.get(kind), self._gates.get(kind)
        return bool((turnstile and turnstile.busy) or (gate and (gate.holders or gate.waiting)))

    def set_ollama_host(self, host: str | None) -> None:
        """Settings changed: a new Ollama address means a new client (the old one closes when idle)."""
        if (host or None) == (self._ollama_host or None):
            return
        self._ollama_host = host
        old = self._engines.get(EngineKind.OLLAMA)
        if old is not None and not self.generating(EngineKind.OLLAMA):
            self._forget(EngineKind.OLLAMA)
            self._spawn(old.close())

    # --- load / unload --------------------------------------------------------------------------------------
    async def load(self, entry: str, params: LoadParams) -> ModelInfo:
        """Load ``entry`` in its engine, in its line: it waits for the replies and requests ahead of it (and says
        so); on a concurrent engine, for the requests using another model."""
        kind = engine_of(entry)
        async with self._line(kind, entry, params, announce=True):
            if kind is EngineKind.LLAMACPP and (params.n_parallel or 0) > 1 and not params.embedding:
                return await self._load_parallel(kind, entry, params)
            return await self._load_now(kind, entry, params)

    @contextlib.asynccontextmanager
    async def use(
        self, entry: str, params: LoadParams, *, on_loading: Callable[[], None] | None = None
    ) -> AsyncIterator[Turn]:
        """Hold a turn on ``entry``'s engine with ``entry`` loaded, for one request's work. It waits its place in
        the engine's one line (the window's replies and loads are in it too); when its turn comes and another
        model is loaded, ``entry`` is loaded with ``params`` (``on_loading`` is called first). The turn is held
        until the block ends, so what runs through it runs on the model it asked for: nothing can load another
        in between. On a concurrent engine requests for the loaded model go side by side."""
        kind = engine_of(entry)
        async with self._line(kind, entry, params):
            async with self._load_locks.setdefault(kind, asyncio.Lock()):  # side by side: one of them loads
                loaded = self._loaded.get(kind)
                if loaded is not None and loaded.serves(entry, params) and self._worker_holds(kind, loaded):
                    turn = Turn(self, kind, entry, loaded.info)
                elif loaded is not None and loaded.parallel and loaded.serves(entry, params):
                    if on_loading is not None:
                        on_loading()
                    began = time.perf_counter()
                    info = await self._load_worker_copy(kind, loaded)
                    turn = Turn(self, kind, entry, info, True, (time.perf_counter() - began) * 1000)
                else:
                    if on_loading is not None:
                        on_loading()
                    began = time.perf_counter()
                    info = await self._load_now(kind, entry, await self._load_params_for(kind, entry, params))
                    turn = Turn(self, kind, entry, info, True, (time.perf_counter() - began) * 1000)
            yield turn

    async def unload(self, kind: EngineKind) -> None:
        """Unload that engine's model, in its line (after the replies and requests ahead of it)."""
        engine = self._engines.get(kind)
        loaded = self._loaded.get(kind)
        if engine is None:
            self._loaded.pop(kind, None)
            return
        await self._in_turn(kind, engine.unload())
        self._worker_copy = None
        if self._loaded.get(kind) is loaded:
            self._loaded.pop(kind, None)
            if loaded is not None:
                if loaded.parallel:
                    self.parallel.release(loaded.entry)
                self.emit(ModelUnloaded(kind, loaded.entry))

    @contextlib.asynccontextmanager
    async def _line(
        self, kind: EngineKind, entry: str, params: LoadParams, *, announce: bool = False
    ) -> AsyncIterator[None]:
        """A turn in that engine's line: the turnstile of a single-sequence engine, the model gate of a concurrent
        one. ``announce``: a load that has to wait says so (``LoadWaiting``)."""
        self._bind()
        self.engine_for(entry)
        turnstile = self._turnstiles.get(kind)
        if turnstile is None:
            async with self._gates.setdefault(kind, ModelGate()).use((entry, params.embedding)):
                yield
            return
        ticket = turnstile.ticket()
        try:
            if announce and not ticket.done():
                self.emit(LoadWaiting(kind, entry, turnstile.place(ticket) or 0))
            await ticket
            yield
        finally:
            turnstile.leave(ticket)

    async def _load_now(self, kind: EngineKind, entry: str, params: LoadParams) -> ModelInfo:
        engine = self.engine_for(entry)
        before = self._loaded.get(kind)
        if before is not None and before.parallel:  # the chats leave the parallel engine for the worker
            self._loaded.pop(kind, None)
            self.parallel.release(before.entry)
            self.emit(ModelUnloaded(kind, before.entry))
        self._worker_copy = None
        try:
            info = await engine.load(engine_model(entry), params)
        except ModelLoadError as exc:
            if not await self._make_room(kind, exc):
                raise
            info = await engine.load(engine_model(entry), params)
        chat_embeds = not params.embedding and self._embeds_on_chat(kind)
        chat_embeds = chat_embeds and not embeds_only(info.architecture, info.metadata)
        self._loaded[kind] = LoadedModel(entry, info, params, chat_embeds)
        self.emit(ModelLoaded(kind, entry, info, params))
        slot = self.embedding_slot
        if chat_embeds and kind is EngineKind.LLAMACPP and slot is not None and slot.holds(entry):
            log.info("%s is loaded for chat now, which embeds too: the embedding slot's copy is unloaded", info.name)
            await slot.unload(entry)
        return info

    async def _load_parallel(self, kind: EngineKind, entry: str, params: LoadParams) -> ModelInfo:
        """Load ``entry`` for the chats in the parallel engine, for ``params.n_parallel`` sequences of
        ``params.n_ctx`` tokens each (refused with the estimate's numbers when they will not fit). The single
        worker's model is unloaded first: one copy (the worker loads it again only for a reply that needs it)."""
        engine = self.engine_for(entry)
        before = self._loaded.get(kind)
        if engine.model is not None:
            await engine.unload()
        self._worker_copy = None
        if before is not None and before.parallel and before.entry != entry:
            self.parallel.release(before.entry)
        if before is not None and self._loaded.get(kind) is before:  # (a worker's load is gone with its model)
            self._loaded.pop(kind, None)
            self.emit(ModelUnloaded(kind, before.entry))
        slots = params.n_parallel or 2
        async with self.parallel.use(entry, params, slots) as use:
            info = use.load.info
        self.parallel.keep(entry)
        chat_embeds = self._embeds_on_chat(kind) and not embeds_only(info.architecture, info.metadata)
        self._loaded[kind] = LoadedModel(entry, info, params, chat_embeds, slots)
        self.emit(ModelLoaded(kind, entry, info, params))
        return info

    def _worker_holds(self, kind: EngineKind, loaded: LoadedModel) -> bool:
        """Whether the single worker has ``loaded``'s model (its own load, or its copy of a parallel one)."""
        if not loaded.parallel:
            return True
        engine = self._engines.get(kind)
        return self._worker_copy is loaded and engine is not None and engine.model is not None

    async def _load_worker_copy(self, kind: EngineKind, loaded: LoadedModel) -> ModelInfo:
        """Load the parallel chats' model in the single worker too, for what only it does (in the caller's turn);
        the chats stay on the parallel engine."""
        engine = self._engines[kind]
        log.info("%s runs on the parallel engine; loading it in the single worker too, for a reply only it can give",
                 loaded.info.name)  # fmt: skip
        info = await engine.load(engine_model(loaded.entry), replace(loaded.params, n_parallel=None))
        self._worker_copy = loaded if self._loaded.get(kind) is loaded else None
        return info

    async def _ensure_worker(self, kind: EngineKind) -> None:
        """In a turn on the worker: its copy of the parallel chats' model is loaded (nothing to do otherwise)."""
        loaded = self._loaded.get(kind)
        if loaded is not None and not self._worker_holds(kind, loaded):
            await self._load_worker_copy(kind, loaded)

    # --- embeddings beside the chat model (the embedding slot) ------------------------------------------------
    async def embeds_beside(self, entry: str, params: LoadParams) -> bool:
        """Whether an embeddings request for ``entry`` runs in the embedding slot, a second llama.cpp worker
        beside the engine's own model: it is there already, or it is an embedding model (or a chat model while
        another is loaded) that fits beside what is loaded by the memory estimate. Otherwise it runs on the
        engine's model, as before: a chat model loaded for chat embeds on its context, with no reload."""
        slot = self.embedding_slot
        if slot is None or not params.embedding or engine_of(entry) is not EngineKind.LLAMACPP:
            return False
        if slot.holds(entry):
            return True
        main = self._loaded.get(EngineKind.LLAMACPP)
        if main is not None and main.serves(entry, params):
            return False
        placement = await slot.placement(entry, params)
        if placement is None or (placement.chat_model and (main is None or main.entry == entry)):
            return False
        if not placement.fits:
            alone = "in the slot, so it loads alone"
            where = f"beside {main.info.name}, so it takes that model's place" if main else alone
            log.info("%s does not fit %s (memory estimate: %s)", engine_model(entry).rsplit("/", 1)[-1], where,
                     placement.summary.rstrip("."))  # fmt: skip
            return False
        return True

    @contextlib.asynccontextmanager
    async def use_beside(
        self, entry: str, params: LoadParams, *, on_loading: Callable[[], None] | None = None
    ) -> AsyncIterator[Turn]:
        """A turn in the embedding slot with ``entry`` loaded for embeddings (where ``embeds_beside`` says). The
        slot has its own line: it never waits for the engine's replies, nor they for it."""
        slot = self.embedding_slot
        if slot is None:
            raise UnavailableError("This engine has no embedding slot: embed on its own model.")
        self._bind()
        async with slot.use(entry, params, on_loading) as held:
            yield Turn(self, EngineKind.LLAMACPP, entry, held.info, held.loaded_here, held.load_ms, held.backend)

    async def unload_beside(self, entry: str | None = None) -> None:
        """Unload the embedding slot's model (only if it is still ``entry``, when given), in the slot's line."""
        if self.embedding_slot is not None:
            await self.embedding_slot.unload(entry)

    async def _make_room(self, kind: EngineKind, exc: ModelLoadError) -> bool:
        """A load that failed beside the embedding slot's model: unload that one, so the load can be tried again."""
        slot = self.embedding_slot
        if kind is not EngineKind.LLAMACPP or slot is None or slot.loaded is None:
            return False
        log.warning("could not load beside the embedding model %s (%s): unloading it and trying again",
                    slot.loaded.info.name, exc)  # fmt: skip
        await slot.unload()
        return True

    def _embeds_on_chat(self, kind: EngineKind) -> bool:
        """Whether that engine's chat loads answer embeddings too (llama.cpp: on the chat context)."""
        return bool(getattr(self._engines.get(kind), "embeds_on_chat_context", False))

    async def _load_params_for(self, kind: EngineKind, entry: str, params: LoadParams) -> LoadParams:
        """The load an embeddings request makes: a chat model is loaded for chat where its chat context embeds,
        so the chat requests that follow need no reload; an embedding model is loaded for embeddings."""
        if not params.embedding or not self._embeds_on_chat(kind):
            return params
        chat = await asyncio.get_running_loop().run_in_executor(None, chat_model_file, engine_model(entry))
        return replace(params, embedding=False) if chat else params

    # --- replies --------------------------------------------------------------------------------------------
    def stream_chat(
        self,
        kind: EngineKind,
        messages: list[dict[str, Any]],
        sampling: SamplingParams,
        options: GenerationOptions | None = None,
    ) -> ReplyStream | ParallelReplyStream:
        """A reply from that engine's loaded model; it waits its turn on a single-sequence engine. When the chats'
        llama.cpp model runs on the parallel engine, it runs there side by side with the others (or in its queue),
        unless it needs what only the single worker does (``serial_reason``)."""
        loaded = self._loaded.get(kind)
        if loaded is not None and loaded.parallel and serial_reason(messages, options) is None:
            return self._parallel_reply(kind, loaded, messages, sampling, options, None)
        return self._reply(kind, messages, sampling, options, None)

    def complete(
        self, kind: EngineKind, prompt: str, sampling: SamplingParams, options: GenerationOptions | None = None
    ) -> ReplyStream | ParallelReplyStream:
        """A raw text completion of ``prompt`` (no chat template); it waits its turn like a reply."""
        loaded = self._loaded.get(kind)
        if loaded is not None and loaded.parallel and serial_reason([], options) is None:
            return self._parallel_reply(kind, loaded, [], sampling, options, prompt)
        return self._reply(kind, [], sampling, options, prompt)

    async def embed(self, kind: EngineKind, texts: list[str]) -> list[list[float]]:
        """Vectors for ``texts`` from that engine's model (loaded for embeddings); waits its turn like a reply."""
        return await self._in_turn(kind, self._on_worker(kind, lambda: self._embedder(kind).embed(texts)))

    async def count_tokens(
        self, kind: EngineKind, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """The prompt tokens of a chat as that engine's model renders it; waits its turn like a reply (counted by
        the parallel engine, at once, when the chats' model runs there)."""
        loaded = self._loaded.get(kind)
        if loaded is not None and loaded.parallel:
            self._bind()
            async with self.parallel.use(loaded.entry, loaded.params, loaded.parallel):
                return await self.parallel.count_tokens(messages, tools)
        return await self._in_turn(kind, self._counter(kind).count_tokens(messages, tools))

    async def _on_worker(self, kind: EngineKind, work: Callable[[], Awaitable[_T]]) -> _T:
        """``work()`` on the single worker, in the caller's turn, with the parallel chats' model copied there."""
        await self._ensure_worker(kind)
        return await work()

    def _embedder(self, kind: EngineKind) -> Embeddings:
        engine = self._running(kind)
        if not isinstance(engine, Embeddings):
            raise InvalidInputError(f"The {kind} engine cannot embed text here.")
        return engine

    def _counter(self, kind: EngineKind) -> TokenCounting:
        engine = self._running(kind)
        if not isinstance(engine, TokenCounting):
            raise InvalidInputError(f"The {kind} engine cannot count tokens here.")
        return engine

    def _reply(
        self,
        kind: EngineKind,
        messages: list[dict[str, Any]],
        sampling: SamplingParams,
        options: GenerationOptions | None,
        prompt: str | None,
        *,
        in_turn: bool = False,
    ) -> ReplyStream:
        """A reply that waits its turn, or (``in_turn``) runs in the turn its caller holds."""
        engine = self._running(kind)
        turnstile = None if in_turn else self._turnstiles.get(kind)
        finished = self._reply_finished(kind)
        loaded = self._loaded.get(kind)
        prepare = None  # the worker's copy of the parallel chats' model, loaded in the reply's turn
        if not in_turn and loaded is not None and loaded.parallel:
            prepare = lambda: self._ensure_worker(kind)  # noqa: E731
        reply = ReplyStream(engine, messages, sampling, turnstile, finished, options=options, prompt=prompt,
                            prepare=prepare)  # fmt: skip
        self._replies.add(reply)
        return reply

    def _parallel_reply(
        self, kind: EngineKind, loaded: LoadedModel, messages: list[dict[str, Any]], sampling: SamplingParams,
        options: GenerationOptions | None, prompt: str | None,
    ) -> ParallelReplyStream:  # fmt: skip
        engine = self._running(kind)

        def finished(reply: ParallelReplyStream) -> None:
            self._replies.discard(reply)
            self.emit(ReplyFigures(kind, reply.stats, None))

        load = (loaded.entry, loaded.params, loaded.parallel)
        reply = ParallelReplyStream(self.parallel, engine, load, messages, sampling, finished, options=options,
                                    prompt=prompt)  # fmt: skip
        self._replies.add(reply)
        return reply

    def _running(self, kind: EngineKind) -> Backend:
        self._bind()
        engine = self._engines.get(kind)
        if engine is None:
            raise UnavailableError(NO_VLLM if kind is EngineKind.VLLM else f"The {kind} engine is not running.")
        return engine

    async def _in_turn(self, kind: EngineKind, work: Awaitable[_T]) -> _T:
        """Await ``work`` in this engine's line (at once on an engine that runs requests concurrently)."""
        turnstile = self._turnstiles.get(kind)
        ticket = turnstile.ticket() if turnstile is not None else None
        try:
            if ticket is not None:
                await ticket
            return await work
        finally:
            if turnstile is not None and ticket is not None:
                turnstile.leave(ticket)
            if asyncio.iscoroutine(work):
                work.close()  # never awaited when the wait was cancelled

    def _reply_finished(self, kind: EngineKind) -> Callable[[ReplyStream], None]:
        def finished(reply: ReplyStream) -> None:
            self._replies.discard(reply)
            self.emit(ReplyFigures(kind, reply.stats, reply.backend.kv_usage()))

        return finished

    def stop(self, kind: EngineKind) -> None:
        """Stop every reply on that engine: the one generating and those waiting."""
        for reply in [r for r in self._replies if r.backend is self._engines.get(kind)]:
            reply.stop()

    # --- vLLM -----------------------------------------------------------------------------------------------
    def offer_vllm(self, endpoint: VllmEndpoint) -> None:
        """A vLLM server is ready (the app's own or a remote one): chats, batch and bench can use it."""
        if self.vllm_endpoint == endpoint:
            return
        self._drop_vllm_client()
        self.vllm_endpoint = endpoint
        self.emit(VllmEndpointChanged(endpoint))

    def withdraw_vllm(self, source: str) -> None:
        """The server from ``source`` ("managed" or "remote") is gone; another source's stays offered."""
        if self.vllm_endpoint is None or self.vllm_endpoint.source != source:
            return
        self._drop_vllm_client()
        self.vllm_endpoint = None
        self.emit(VllmEndpointChanged(None))

    def _drop_vllm_client(self) -> None:
        client = self._engines.get(EngineKind.VLLM)
        if client is not None:
            loaded = self._loaded.pop(EngineKind.VLLM, None)
            self._forget(EngineKind.VLLM)
            self._spawn(client.close())
            if loaded is not None:
                self.emit(ModelUnloaded(EngineKind.VLLM, loaded.entry))

    def vllm_entries(self) -> list[str]:
        endpoint = self.vllm_endpoint
        return [entry_for(EngineKind.VLLM, endpoint.served_model)] if endpoint else []

    # --- lifetime -------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop every reply (waiting for them to end, up to 5 s), the app's vLLM server and every engine."""
        for reply in list(self._replies):
            reply.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_no_replies(), 5)
        if self._replies:
            log.warning("a reply did not stop in time; closing the engines")
        await self.vllm_server.stop()
        if self.embedding_slot is not None:
            await self.embedding_slot.close()
        await self.parallel.close()
        for engine in self.engines():
            await engine.close()

    async def _until_no_replies(self) -> None:
        while self._replies:
            await asyncio.sleep(0.02)

    # --- internals ------------------------------------------------------------------------------------------
    def _adopt(self, kind: EngineKind, engine: Backend) -> Backend:
        self._engines[kind] = engine
        engine.add_state_listener(lambda state: self._state_changed(kind, engine, state))
        if not implements(engine, ConcurrentChats):
            self._turnstiles[kind] = Turnstile(lambda waiting: self.emit(QueueChanged(kind, waiting)))
        return engine

    def _forget(self, kind: EngineKind) -> None:
        self._engines.pop(kind, None)
        self._turnstiles.pop(kind, None)
        self._gates.pop(kind, None)
        self._loaded.pop(kind, None)

    def _state_changed(self, kind: EngineKind, engine: Backend, state: BackendState) -> None:
        if self._engines.get(kind) is not engine:
            return  # a client the host has dropped
        if engine.model is None and kind in self._loaded and not self._loaded[kind].parallel:
            entry = self._loaded.pop(kind).entry  # the worker died or the server went away
            self.emit(ModelUnloaded(kind, entry))
        self.emit(EngineStateChanged(kind, state))

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
        elif self.loop is not loop:
            raise RuntimeError("the engine host is bound to another event loop; use run_coroutine_threadsafe")

    def _spawn(self, coro: Coroutine[object, object, object]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (the host is being dropped at exit): nothing left to close it on
            coro.close()
            return
        task = loop.create_task(coro)
        _background.add(task)
        task.add_done_callback(_background.discard)


def _kernel_fallback_on(engine: Backend) -> bool:
    """Whether the llama.cpp worker runs without llama.cpp's CPU-specific kernels (they crash on this machine)."""
    return bool(getattr(getattr(engine, "kernel_fallback", None), "active", False))


_background: set[asyncio.Task[object]] = set()  # closing clients: kept so they are not collected mid-way
