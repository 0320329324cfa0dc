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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from app.backends.protocol import ModelInfo
from app.core.errors import AppError
from app.core.params import LoadParams, SamplingParams
from app.services.api.catalog import ServedModel
from app.services.api.errors import ApiError, from_app_error, overloaded
from app.services.engines.entries import EngineKind
from app.services.engines.events import EngineEvent, ModelLoaded, ModelUnloaded
from app.services.engines.host import EngineHost, Turn

log = logging.getLogger("app.services.api")

UNSET = object()  # a request that said nothing about keep_alive


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
    it); ``loaded_here``: the server loaded the model for this request."""

    model: ServedModel
    turn: Turn

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
    ) -> None:
        self._host = host
        self._defaults: ModelDefaults = defaults or BuiltinDefaults()
        self.idle_ttl_s = idle_ttl_s
        self.max_queue = max_queue
        self._in_flight: dict[EngineKind, int] = {}  # the API's requests per engine, waiting or running
        self._ours: set[tuple[EngineKind, str]] = set()  # models the server loaded (the idle TTL applies)
        self._timers: dict[EngineKind, asyncio.TimerHandle] = {}
        self._expiring: set[asyncio.Task[None]] = set()
        self._loading: set[tuple[EngineKind, str]] = set()  # loads the server is making now
        self._unsubscribe = host.subscribe(self._engine_event)

    def close(self) -> None:
        """Stop the idle timers (the models stay loaded) and stop listening to the host."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._unsubscribe()

    def sampling(self, model: ServedModel) -> SamplingParams:
        return self._defaults.effective_sampling(model.entry)

    def queued(self, kind: EngineKind) -> int:
        """Callers waiting in that engine's line now: the API's requests, the window's replies and loads."""
        return self._host.waiting(kind)

    @contextlib.asynccontextmanager
    async def serving(
        self, model: ServedModel, *, embedding: bool = False, keep_alive: object = UNSET,
        on_loading: Callable[[], None] | None = None,
    ) -> AsyncIterator[Lease]:  # fmt: skip
        """Hold ``model`` loaded (loading it if needed) for one request; raises ApiError (queue full, load
        refused or failed). ``on_loading`` is called when a load begins for it."""
        kind = model.engine
        self._admit(kind)
        self._in_flight[kind] = self._in_flight.get(kind, 0) + 1
        try:
            async with self._turn(model, embedding, on_loading) as turn:
                self._cancel_timer(kind)
                try:
                    yield Lease(model, turn)
                finally:
                    if self._in_flight[kind] == 1:  # the last request on this engine to end decides its idle time
                        self._arm(model, keep_alive)
        finally:
            self._in_flight[kind] -= 1

    @contextlib.asynccontextmanager
    async def _turn(
        self, model: ServedModel, embedding: bool, on_loading: Callable[[], None] | None
    ) -> AsyncIterator[Turn]:
        """The request's turn in the engine host's line, its model loaded; a failed load is the API's error."""
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
            except AppError as exc:
                if not loading:
                    raise
                raise _load_error(model, exc) from exc
            finally:
                self._loading.discard((kind, model.entry))
            if turn.loaded_here:
                self._ours.add((kind, model.entry))
                log.info("loaded %s (%s) for an API request", model.id, kind)
            yield turn

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
        return replace(params, embedding=embedding) if params.embedding != embedding else params

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


def _load_error(model: ServedModel, exc: AppError) -> ApiError:
    error = from_app_error(exc, model.engine)
    error.message = f"The model '{model.id}' could not be loaded: {exc}"
    if error.status == 400:
        error.code = "model_load_refused"
    return error
