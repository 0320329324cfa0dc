"""Getting a request's model ready in its engine: the queue bound, a turn in the engine's one line
(``EngineHost.use``) with the model loaded on first use with its saved settings, and the idle timer that unloads
it again.

- **Queue bound**: on an engine that runs one reply at a time (llama.cpp, Ollama) at most ``max_queue`` callers
  wait in the engine host's line (the window's chats and loads count); beyond that the request is refused at once.
  Once admitted a request waits its turn and then runs on the model it asked for: the window cannot load another
  model in between (its load waits in the same line).
- **JIT load**: a model that is not loaded is loaded in the request's turn with its per-model settings
  (``ModelSettingsStore``: the Library's settings, else its preset, else the defaults) — every time, whoever asked.
  A load the memory estimate refuses comes back as the engine's error (400, with the estimate's numbers).
- **Idle TTL**: a model the server loaded unloads ``idle_ttl_s`` after its last request ends; a request's
  ``keep_alive``/``ttl`` sets the time after that request for any model (0: at once; negative: never). vLLM's
  memory belongs to its server, so nothing is unloaded there.
- **Context**: ``n_ctx`` (``serve --ctx``) is the context of every load the server makes, over each model's own. A
  request that needs more than the model is loaded with (its prompt, counted in its turn, plus room for the reply:
  ``app.services.api.context``) reloads it in that same turn with a larger context, bounded by the model's trained
  context and the memory estimate; ``Lease.note`` says so (the request log shows it). A model the window loaded is
  reloaded only while the window is not waiting for it. A request whose prompt cannot fit is a 400 naming the
  figures and the setting. vLLM's context is its server's (``--max-model-len``).
- **Embeddings**: a chat model answers them on its loaded chat context (no reload); an embedding model (or a chat
  model while another is loaded) goes to the engine host's embedding slot beside the chat model when the memory
  estimate says it fits, with its own line and idle TTL (``embedding_leases``), else it takes the chat model's place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from app.backends.protocol import ModelInfo, TokenCounting, implements
from app.core.chat import prompt_errors
from app.core.errors import AppError
from app.core.params import LoadParams, SamplingParams
from app.services.api.catalog import ServedModel
from app.services.api.context import ContextNeed, CountMemo, most_that_fits, wanted_context
from app.services.api.embedding_leases import EmbeddingSlotLeases
from app.services.api.errors import ApiError, bad_request, from_app_error, overloaded
from app.services.api.fields import UNSET
from app.services.engines.entries import EngineKind
from app.services.engines.events import EngineEvent, ModelLoaded, ModelUnloaded
from app.services.engines.host import EngineHost, Turn
from app.services.engines.parallel_turn import ParallelTurn

if TYPE_CHECKING:
    from app.core.memory.fit import MachineMemory

log = logging.getLogger("app.services.api")


class ModelDefaults(Protocol):
    """Per-model load and sampling settings: ``app.services.model_settings.ModelSettingsStore`` is the app's."""

    def effective_load(self, entry: str) -> LoadParams: ...

    def effective_sampling(self, entry: str) -> SamplingParams: ...


class BuiltinDefaults:
    """The built-in defaults for every model (no per-model settings)."""

    def effective_load(self, entry: str) -> LoadParams:
        return LoadParams()

    def effective_sampling(self, entry: str) -> SamplingParams:
        return SamplingParams()


@dataclass
class Lease:
    """A request's hold on its loaded model: ``turn`` is its turn in the engine's line (what it asks goes through
    it); ``loaded_here``: the server loaded the model for this request; ``note``: what the server did to fit it
    (a reload with a larger context), for the request log."""

    model: ServedModel
    turn: Turn
    note: str | None = None

    @property
    def info(self) -> ModelInfo:
        return self.turn.info

    @property
    def loaded_here(self) -> bool:
        return self.turn.loaded_here

    @property
    def load_ms(self) -> float | None:
        return self.turn.load_ms


class ModelRouter:
    def __init__(
        self,
        host: EngineHost,
        defaults: ModelDefaults | None = None,
        *,
        idle_ttl_s: float | None = None,
        max_queue: int = 8,
        n_ctx: int | None = None,
        machine_memory: Callable[[], MachineMemory] | None = None,
        n_parallel: int | None = None,
    ) -> None:
        """``n_ctx``: the context of every load the server makes (None: each model's own); ``machine_memory`` reads
        this machine's free memory for the estimate that bounds a larger context (blocking; default: NVML and
        psutil)."""
        self._host = host
        self._defaults: ModelDefaults = defaults or BuiltinDefaults()
        self.idle_ttl_s = idle_ttl_s
        self.max_queue = max_queue
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel  # ``serve --parallel`` (0: auto); None: each model's setting
        self._machine_memory = machine_memory
        self._counts = CountMemo()  # the last count of each model's prompts (an agent's next turn is not counted)
        self._in_flight: dict[EngineKind, int] = {}  # the API's requests per engine, waiting or running
        self._ours: set[tuple[EngineKind, str]] = set()  # models the server loaded (the idle TTL applies)
        self._timers: dict[EngineKind, asyncio.TimerHandle] = {}
        self._expiring: set[asyncio.Task[None]] = set()
        self._loading: set[tuple[EngineKind, str]] = set()  # loads the server is making now
        self._beside = EmbeddingSlotLeases(host, self, _load_error)  # embeddings in the slot beside the chat model
        self._unsubscribe = host.subscribe(self._engine_event)

    def close(self) -> None:
        """Stop the idle timers (the models stay loaded) and stop listening to the host."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._beside.close()
        self._unsubscribe()

    def sampling(self, model: ServedModel) -> SamplingParams:
        return self._defaults.effective_sampling(model.entry)

    def queued(self, kind: EngineKind) -> int:
        """Callers waiting in that engine's line now: the API's requests, the window's replies and loads."""
        return self._host.waiting(kind)

    @contextlib.asynccontextmanager
    async def serving(
        self, model: ServedModel, *, embedding: bool = False, keep_alive: object = UNSET,
        on_loading: Callable[[], None] | None = None, need: ContextNeed | None = None,
    ) -> AsyncIterator[Lease]:  # fmt: skip
        """Hold ``model`` loaded (loading it if needed) for one request; raises ApiError (queue full, load
        refused or failed, a prompt that cannot fit). ``on_loading`` is called when a load begins for it; ``need``:
        what the request puts in the context (the model is reloaded with a larger one where it needs it)."""
        params = self._load_params(model, True) if embedding else None
        if params is not None and await self._host.embeds_beside(model.entry, params):
            async with self._beside.serving(model, params, keep_alive, on_loading) as turn:
                yield Lease(model, turn)
            return
        kind = model.engine
        self._admit(kind)
        self._in_flight[kind] = self._in_flight.get(kind, 0) + 1
        try:
            async with self._turn(model, embedding, on_loading, need) as (turn, note):
                self._cancel_timer(kind)
                try:
                    yield Lease(model, turn, note)
                finally:
                    if self._in_flight[kind] == 1:  # the last request on this engine to end decides its idle time
                        self._arm(model, keep_alive)
        finally:
            self._in_flight[kind] -= 1

    async def parallel_slots(self, model: ServedModel) -> int:
        """How many requests run side by side on ``model`` (1: one at a time, on the single worker): llama.cpp only,
        ``serve --parallel`` over the model's setting; neither set: as many as fit by the memory estimate, up to 4
        (one where N copies of the context will not fit beside what is in memory now)."""
        if model.engine is not EngineKind.LLAMACPP:
            return 1
        params = self._load_params(model, False)
        if self.n_parallel == 0:  # auto: what fits by the memory estimate, whatever the model's setting
            return await self._host.parallel.slots_for(model.entry, replace(params, n_parallel=None), None)
        return await self._host.parallel.slots_for(model.entry, params, self.n_parallel)

    async def beyond_a_slot(self, model: ServedModel, need: ContextNeed) -> str | None:
        """Why ``need`` goes to the single worker for its context (it may not fit one parallel sequence's context;
        the single worker reloads with a larger one), in words for the request log; None when it fits a slot. An
        upper bound decides without counting; the loaded parallel engine counts the rest exactly."""
        params = self._load_params(model, False)
        per_slot = params.n_ctx
        if need.bound() + need.room <= per_slot:
            return None
        loaded = self._host.parallel.loaded
        if loaded is not None and loaded.entry == model.entry and loaded.params == params:
            tokens = await self._host.parallel.count_tokens(need.chat(), need.tools)
            if tokens + need.room <= per_slot:
                return None
        return f"a prompt that may need more than a parallel sequence's {per_slot:,} tokens of context"

    @contextlib.asynccontextmanager
    async def serving_parallel(
        self, model: ServedModel, slots: int, *, on_loading: Callable[[], None] | None = None,
        client: str | None = None, label: str | None = None, keep_alive: object = None,
    ) -> AsyncIterator[Lease]:  # fmt: skip
        """Hold ``model`` on the parallel llama.cpp engine for one request (loaded there with ``slots`` sequences,
        each with the model's context, if it is not); raises ApiError when N × context will not fit or the engine
        cannot start. It waits for a free slot in the engine, not here. Idle afterwards, the model unloads after
        ``keep_alive`` seconds (Ollama's; negative: it stays), else the server's idle time."""
        params = self._load_params(model, False)
        if self._host.parallel.snapshot().waiting >= self.max_queue:
            raise overloaded(
                f"All {slots} parallel llama.cpp slots are busy and {self.max_queue} requests are already waiting for "
                "one. Try again shortly."
            )
        async with contextlib.AsyncExitStack() as stack:
            try:
                use = await stack.enter_async_context(self._host.parallel.use(model.entry, params, slots, on_loading))
            except AppError as exc:
                raise _load_error(model, exc) from exc
            if use.loaded_here:
                log.info("loaded %s (%s) for %d parallel API requests, context %s tokens each", model.id, model.engine,
                         slots, f"{use.load.info.n_ctx:,}")  # fmt: skip
            turn = ParallelTurn(self._host, model.engine, model.entry, use.load.info, use.loaded_here, use.load_ms,
                                use=use, client=client, label=label)  # fmt: skip
            try:
                yield Lease(model, turn, f"loaded for {slots} parallel requests" if use.loaded_here else None)
            finally:  # a later request cancels the idle timer
                ttl = float(keep_alive) if isinstance(keep_alive, int | float) else self.idle_ttl_s
                if ttl is not None and ttl >= 0:
                    self._host.parallel.unload_after(ttl)

    @contextlib.asynccontextmanager
    async def _turn(
        self, model: ServedModel, embedding: bool, on_loading: Callable[[], None] | None, need: ContextNeed | None
    ) -> AsyncIterator[tuple[Turn, str | None]]:
        """The request's turn in the engine host's line, its model loaded on a context that fits ``need``, with
        the note of a reload; a failed load is the API's error."""
        kind, loading = model.engine, False

        def began_loading() -> None:
            nonlocal loading
            loading = True
            self._loading.add((kind, model.entry))
            if on_loading is not None:
                on_loading()

        async with contextlib.AsyncExitStack() as stack:
            try:
                params = self._load_params(model, embedding)
                turn = await stack.enter_async_context(self._host.use(model.entry, params, on_loading=began_loading))
                if turn.loaded_here:
                    self._ours.add((kind, model.entry))
                    log.info("loaded %s (%s) for an API request, context %s tokens", model.id, kind,
                             f"{turn.info.n_ctx:,}")  # fmt: skip
                fitted = (turn, None) if need is None else await self._fitted(model, turn, need, began_loading)
            except AppError as exc:
                if not loading or isinstance(exc, ApiError):
                    raise
                raise _load_error(model, exc) from exc
            finally:
                self._loading.discard((kind, model.entry))  # a reload's ModelLoaded is heard as the server's
            yield fitted

    def _admit(self, kind: EngineKind) -> None:
        if kind is EngineKind.VLLM or self._host.concurrent(kind):
            return  # vLLM queues what it cannot run at once itself
        if self.queued(kind) >= self.max_queue:
            raise overloaded(
                f"The {kind} engine runs one reply at a time and {self.max_queue} requests are already waiting "
                "for it. Try again shortly."
            )

    def _load_params(self, model: ServedModel, embedding: bool) -> LoadParams:
        if not self._host.facts(model.engine).loads_models:  # the server loaded it (vLLM)
            return replace(LoadParams(), embedding=embedding)
        params = self._defaults.effective_load(model.entry)
        if self.n_ctx is not None and params.n_ctx != self.n_ctx:  # serve --ctx, over the model's own
            params = replace(params, n_ctx=self.n_ctx)
        return replace(params, embedding=embedding) if params.embedding != embedding else params

    # --- context ----------------------------------------------------------------------------------------------
    async def _fitted(
        self, model: ServedModel, turn: Turn, need: ContextNeed, on_loading: Callable[[], None]
    ) -> tuple[Turn, str | None]:
        """``turn`` on a context that holds ``need``: as loaded, or reloaded in this turn with a larger one (and
        the note saying so); ApiError 400 when no context that holds its prompt can be had."""
        kind, n_ctx = model.engine, turn.info.n_ctx
        if not self._reloads(kind) or not n_ctx or self._surely_fits(turn, need):
            return turn, None  # surely fits (nothing counted), or the context is not the server's to change
        tokens, exact = await self._prompt_tokens(turn, need)
        if tokens is None or tokens + need.room <= n_ctx:
            return turn, None
        wanted = wanted_context(tokens, need.room, turn.info.n_ctx_train)
        fits = await self._most_that_fits(turn, wanted) if wanted > n_ctx else None
        target = min(wanted, fits) if fits is not None else wanted
        may_reload = self._may_reload(kind, model.entry)
        if target > max(n_ctx, tokens) and may_reload:
            return await self._reload(model, turn, target, tokens, on_loading)
        if tokens < n_ctx or not exact:
            return turn, None  # the prompt fits as loaded (the reply gets what is left), or the engine will say
        trained = turn.info.n_ctx_train
        if not may_reload:
            message = prompt_errors.window_model_message(model.id, tokens, n_ctx, wanted)
        elif trained and trained <= tokens:
            message = prompt_errors.beyond_training_message(model.id, tokens, trained)
        elif fits is not None:
            message = prompt_errors.beyond_memory_message(model.id, tokens, tokens + need.room, fits)
        else:
            message = prompt_errors.prompt_too_long_message(tokens, n_ctx)
        raise bad_request(message, code="context_length_exceeded")

    def _reloads(self, kind: EngineKind) -> bool:
        """Whether the server sets that engine's context (not vLLM's: its server's), one request at a time."""
        return self._host.facts(kind).loads_models and not self._host.concurrent(kind)

    def _may_reload(self, kind: EngineKind, entry: str) -> bool:
        """A model the server loaded, always; the window's only while the window is not waiting in its line."""
        if (kind, entry) in self._ours:
            return True
        api_waiting = self._in_flight.get(kind, 1) - 1  # this request holds the turn
        return self._host.waiting(kind) <= api_waiting

    def _surely_fits(self, turn: Turn, need: ContextNeed) -> bool:
        """Whether an upper bound of the prompt's tokens leaves the reply its room, so nothing needs counting."""
        room = turn.info.n_ctx - need.room
        if need.bound() <= room:
            return True
        last = self._counts.bound((turn.entry, turn.info.chat_format), need)
        return last is not None and last <= room

    async def _prompt_tokens(self, turn: Turn, need: ContextNeed) -> tuple[int | None, bool]:
        """The prompt's tokens as the engine counts them (llama.cpp; exact), else a rough upper estimate (Ollama:
        enough to grow its context, never to refuse); None when counting fails (the reply then says what is wrong)."""
        engine = self._host.engine(turn.kind)
        if engine is None or not implements(engine, TokenCounting):
            return need.estimate(), False
        try:
            tokens = await turn.count_tokens(need.chat(), need.tools)
        except AppError as exc:
            log.debug("could not count a request's prompt tokens: %s", exc)
            return None, False
        self._counts.remember((turn.entry, turn.info.chat_format), need, tokens)
        return tokens, True

    async def _most_that_fits(self, turn: Turn, wanted: int) -> int | None:
        """The largest context up to ``wanted`` that fits this machine by the memory estimate (llama.cpp only:
        Ollama's memory is its own server's); None when there is no estimate to ask."""
        loaded = self._host.loaded(turn.kind)
        if turn.kind is not EngineKind.LLAMACPP or loaded is None:
            return None
        read = self._machine_memory or _read_machine_memory
        layers = turn.info.n_gpu_layers

        def judge() -> int | None:
            return most_that_fits(loaded.entry, loaded.params, layers, wanted, read())

        return await asyncio.get_running_loop().run_in_executor(None, judge)

    async def _reload(
        self, model: ServedModel, turn: Turn, n_ctx: int, tokens: int, on_loading: Callable[[], None]
    ) -> tuple[Turn, str | None]:
        """Load the model again with a context of ``n_ctx``, its other settings as they were, in this turn."""
        kind, was = model.engine, turn.info.n_ctx
        loaded = self._host.loaded(kind)
        if loaded is None:
            return turn, None
        on_loading()
        began = time.perf_counter()
        try:
            info = await turn.reload(replace(loaded.params, n_ctx=n_ctx))
        except AppError as exc:
            raise _reload_error(model, tokens, n_ctx, exc) from exc
        load_ms = (turn.load_ms or 0.0) + (time.perf_counter() - began) * 1000
        note = f"reloaded with a context of {info.n_ctx:,} tokens (was {was:,}): the prompt has {tokens:,}"
        log.info("%s: %s", model.id, note)
        return replace(turn, info=info, loaded_here=True, load_ms=load_ms), note

    # --- idle TTL ---------------------------------------------------------------------------------------------
    def _arm(self, model: ServedModel, keep_alive: object) -> None:
        kind = model.engine
        self._cancel_timer(kind)
        if not self._host.facts(kind).loads_models:  # its memory is its server's
            return
        if isinstance(keep_alive, int | float):
            ttl: float | None = float(keep_alive)
        else:
            ttl = self.idle_ttl_s if (kind, model.entry) in self._ours else None
        if ttl is None or ttl < 0:
            return
        loop = asyncio.get_running_loop()
        self._timers[kind] = loop.call_later(ttl, self._expire_soon, kind, model.entry)

    def _expire_soon(self, kind: EngineKind, entry: str) -> None:
        self._timers.pop(kind, None)
        task = asyncio.get_running_loop().create_task(self._expire(kind, entry))
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self, kind: EngineKind, entry: str) -> None:
        loaded = self._host.loaded(kind)
        if loaded is None or loaded.entry != entry or self._in_flight.get(kind):
            return
        if self._host.in_use(kind) or self._host.generating(kind):
            return  # the window is using it: the model stays
        log.info("unloading a model after its idle time (%s)", kind)
        try:
            await self._host.unload(kind)
        except AppError as exc:
            log.warning("could not unload the idle model: %s", exc)

    def _cancel_timer(self, kind: EngineKind) -> None:
        handle = self._timers.pop(kind, None)
        if handle is not None:
            handle.cancel()

    def _engine_event(self, event: EngineEvent) -> None:
        if isinstance(event, ModelUnloaded):
            self._ours.discard((event.engine, event.entry))
            self._cancel_timer(event.engine)
        elif isinstance(event, ModelLoaded) and (event.engine, event.entry) not in self._loading:
            self._ours = {key for key in self._ours if key[0] is not event.engine}  # loaded by someone else
            self._cancel_timer(event.engine)


def _read_machine_memory() -> MachineMemory:
    from app.services.monitor.machine_memory import read_machine_memory

    return read_machine_memory()


def _reload_error(model: ServedModel, tokens: int, n_ctx: int, exc: AppError) -> ApiError:
    error = from_app_error(exc, model.engine)
    error.message = (
        f"The request needs {tokens:,} tokens of context and '{model.id}' could not be reloaded with a context of "
        f"{n_ctx:,}: {exc}"
    )
    if error.status == 400:
        error.code = "context_length_exceeded"
    return error


def _load_error(model: ServedModel, exc: AppError) -> ApiError:
    error = from_app_error(exc, model.engine)
    error.message = f"The model '{model.id}' could not be loaded: {exc}"
    if error.status == 400:
        error.code = "model_load_refused"
    return error
