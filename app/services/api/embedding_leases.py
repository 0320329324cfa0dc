"""The API's embeddings requests in the engine host's embedding slot (a second llama.cpp worker beside the chat
model; ``app.services.engines.embedding_slot``): their queue bound and their idle TTL, kept apart from the chat
model's, so an embedding model unloads after its own idle time and the chat model after its own.

The rules are the router's: the slot's model unloads ``idle_ttl_s`` after its last request ends when the server
loaded it; a request's ``keep_alive`` sets the time after that request (0: at once; negative: never).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from app.core.errors import AppError
from app.core.params import LoadParams
from app.services.api.catalog import ServedModel
from app.services.api.errors import ApiError, overloaded
from app.services.engines.host import EngineHost, Turn

log = logging.getLogger("app.services.api")


class LeaseRules(Protocol):
    """The router's settings the slot's requests follow too."""

    idle_ttl_s: float | None
    max_queue: int


class EmbeddingSlotLeases:
    def __init__(
        self, host: EngineHost, rules: LeaseRules, load_error: Callable[[ServedModel, AppError], ApiError]
    ) -> None:
        self._host = host
        self._rules = rules
        self._load_error = load_error
        self._in_flight = 0  # the API's requests for the slot, waiting or running
        self._ours: str | None = None  # the model the server loaded there (the idle TTL applies)
        self._timer: asyncio.TimerHandle | None = None
        self._expiring: set[asyncio.Task[None]] = set()

    def close(self) -> None:
        """Stop the idle timer (the model stays loaded)."""
        self._cancel_timer()

    @contextlib.asynccontextmanager
    async def serving(
        self, model: ServedModel, params: LoadParams, keep_alive: object, on_loading: Callable[[], None] | None
    ) -> AsyncIterator[Turn]:
        """A turn in the slot with ``model`` loaded for embeddings; raises ApiError (queue full, load refused or
        failed)."""
        self._admit()
        self._in_flight += 1
        try:
            async with self._turn(model, params, on_loading) as turn:
                self._cancel_timer()
                try:
                    yield turn
                finally:
                    if self._in_flight == 1:  # the last request in the slot to end decides its idle time
                        self._arm(model.entry, keep_alive)
        finally:
            self._in_flight -= 1

    @contextlib.asynccontextmanager
    async def _turn(
        self, model: ServedModel, params: LoadParams, on_loading: Callable[[], None] | None
    ) -> AsyncIterator[Turn]:
        loading = False

        def began_loading() -> None:
            nonlocal loading
            loading = True
            if on_loading is not None:
                on_loading()

        async with contextlib.AsyncExitStack() as stack:
            try:
                turn = await stack.enter_async_context(
                    self._host.use_beside(model.entry, params, on_loading=began_loading)
                )
            except AppError as exc:
                if not loading or isinstance(exc, ApiError):
                    raise
                raise self._load_error(model, exc) from exc
            if turn.loaded_here:
                self._ours = model.entry
                log.info("loaded %s in the embedding slot for an API request", model.id)
            yield turn

    def _admit(self) -> None:
        slot = self._host.embedding_slot
        if slot is not None and slot.waiting >= self._rules.max_queue:
            raise overloaded(
                f"The embedding model runs one request at a time and {self._rules.max_queue} requests are already "
                "waiting for it. Try again shortly."
            )

    def _arm(self, entry: str, keep_alive: object) -> None:
        self._cancel_timer()
        if isinstance(keep_alive, int | float):
            ttl: float | None = float(keep_alive)
        else:
            ttl = self._rules.idle_ttl_s if self._ours == entry else None
        if ttl is None or ttl < 0:
            return
        self._timer = asyncio.get_running_loop().call_later(ttl, self._expire_soon, entry)

    def _expire_soon(self, entry: str) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._expire(entry))
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self, entry: str) -> None:
        slot = self._host.embedding_slot
        if slot is None or not slot.holds(entry) or self._in_flight or slot.in_use:
            return
        log.info("unloading the embedding slot's model after its idle time")
        try:
            await self._host.unload_beside(entry)
        except AppError as exc:
            log.warning("could not unload the idle embedding model: %s", exc)
        if self._ours == entry:
            self._ours = None

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
