"""``workstation.api``: the local API server as a workstation service. It outlives every page: the Server page,
the status bar and the batch runner are views of it; the window starts it with the app when the settings say so
(``autostart``), ``serve`` starts it with its command line's config.

    api = workstation.api
    unsubscribe = api.subscribe(on_event)      # ApiStateChanged, ApiRequestLogged (on the loop)
    url = await api.start()                    # the settings' host, port, key and idle time; raises like ApiServer
    api.snapshot()                             # state, url, key, error, "restart to apply", the request log
    await api.stop()

Its catalog follows the workstation: GGUFs from ``workstation.library`` (a finished download, a folder added in
Settings or the Library shows in ``GET /v1/models`` of the running server), Ollama's models at the settings' host.
Settings of the server itself (``api_host``, ``api_port``, ``api_key``, ``api_idle_ttl_s``) apply on the next start;
while it serves, the snapshot says ``restart_to_apply``. One ``ApiServer`` for the service's life: the request log
and the metrics survive a restart."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.errors import AppError
from app.services.api.catalog import ModelCatalog, ollama_lister
from app.services.api.config import ServerConfig
from app.services.api.events import ApiEvent, ApiRequestLogged, ApiSnapshot, ApiState, ApiStateChanged
from app.services.api.records import RequestRecord
from app.services.api.router import ModelDefaults
from app.services.api.server import ApiServer
from app.services.engines.host import EngineHost
from app.services.events import EventHub
from app.services.library.events import LibraryChanged, LibraryEvent
from app.services.library.index import LibraryRoots, ModelLibrary

if TYPE_CHECKING:
    from app.services.library.service import LibraryService
    from app.services.ollama.shared import SharedOllama
    from app.services.settings_changes import SettingsChanged, SettingsOwner

log = logging.getLogger("app.services.api")

SERVER_SETTINGS = ("api_host", "api_port", "api_key", "api_idle_ttl_s")


def config_from_settings(workstation: SettingsOwner) -> ServerConfig:
    """The server the settings describe (a negative idle time: models stay loaded)."""
    s = workstation.settings
    ttl = None if s.api_idle_ttl_s < 0 else s.api_idle_ttl_s
    return ServerConfig(host=s.api_host, port=s.api_port, api_key=s.api_key.strip() or None, idle_ttl_s=ttl,
                        state_dir=workstation.paths.data_dir)  # fmt: skip


class ApiService:
    """``workstation``: its settings and their changes; ``host``, ``library``, ``defaults``: the workstation's
    engine host, library service and per-model settings (``Workstation.api`` passes them)."""

    def __init__(
        self,
        workstation: SettingsOwner,
        host: EngineHost,
        library: LibraryService,
        defaults: ModelDefaults,
        ollama: SharedOllama,
    ) -> None:
        self._workstation = workstation
        lister = ollama_lister(ollama)  # the workstation's one Ollama client, for the settings' host
        self.catalog = ModelCatalog(host, library, list_ollama=lister)
        self.server = ApiServer(host, self.catalog, defaults=defaults)
        self._events: EventHub[ApiEvent] = EventHub()
        self._state = ApiState.STOPPED
        self._error: str | None = None
        self._running: ServerConfig | None = None  # the config it serves with
        self._from_settings = False  # that config is the settings' (not ``serve``'s command line)
        self._restart_to_apply = False
        self._requests = 0
        self._lock = asyncio.Lock()  # one start or stop at a time
        self._cleanup: asyncio.Task[None] | None = None  # a server that died being released
        self._unsubscribe: list[Callable[[], None]] = [
            self.server.subscribe(self._record),
            workstation.subscribe(self._settings_changed),
            library.subscribe(self._library_event),
        ]

    # --- reading ------------------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[ApiEvent], None]) -> Callable[[], None]:
        """Hear of every ``ApiStateChanged`` and ``ApiRequestLogged`` from now on; returns the unsubscriber."""
        return self._events.subscribe(listener)

    @property
    def state(self) -> ApiState:
        return self._state

    @property
    def url(self) -> str | None:
        return self.server.url if self._state is ApiState.SERVING else None

    @property
    def api_key(self) -> str | None:
        """The key the running server asks for (None: none, or not serving)."""
        return self._running.api_key if self._running is not None and self.url else None

    def snapshot(self) -> ApiSnapshot:
        records = tuple(self.server.requests.recent())
        return ApiSnapshot(
            self._state, self.url, self.api_key, self._error, self._restart_to_apply, self._requests, records
        )

    # --- start / stop -------------------------------------------------------------------------------------
    async def start(self, config: ServerConfig | None = None) -> str:
        """Start serving (with ``config``, else the settings'); returns the base URL. Raises InvalidInputError
        (an unsafe config), PortInUseError or OSError; the snapshot then says FAILED, with the reason."""
        async with self._lock:
            if self._state is ApiState.SERVING and self.server.url is not None:
                return self.server.url
            chosen = config or config_from_settings(self._workstation)
            if chosen.state_dir is None:  # ``serve``'s config: its stored responses live in the app's data folder
                chosen = replace(chosen, state_dir=self._workstation.paths.data_dir)
            if self._cleanup is not None:  # the socket of a server that died must be released first
                await self._cleanup
                self._cleanup = None
            self._error = None
            self._set(ApiState.STARTING)
            try:
                await asyncio.get_running_loop().run_in_executor(None, _import_http_stack)
                url = await self.server.start(chosen)
            except (AppError, OSError) as exc:
                self._error = str(exc) if isinstance(exc, AppError) else f"The server could not start: {exc}"
                self._set(ApiState.FAILED)
                raise
            except BaseException:
                self._set(ApiState.STOPPED)
                raise
            self._running, self._from_settings = chosen, config is None
            self._requests, self._restart_to_apply = 0, False
            self._set(ApiState.SERVING)
            if (task := self.server.serving_task) is not None:
                task.add_done_callback(self._serving_ended)
            return url

    def _serving_ended(self, task: asyncio.Task[None]) -> None:
        """The serving task ended without ``stop`` (the state would say STOPPING): the server died. Say so, and
        release its socket, so a start can follow."""
        if self._state is not ApiState.SERVING or self.server.serving_task is not task:
            return
        failure = None if task.cancelled() else task.exception()
        self._error = f"The API server stopped unexpectedly{f' ({failure})' if failure else ''}. Start it again."
        log.error("%s", self._error)
        self._running = None
        self._set(ApiState.FAILED)
        self._cleanup = asyncio.get_running_loop().create_task(self.server.stop())

    async def autostart(self) -> None:
        """Start with the app when the settings say so. A failure is kept in the snapshot (the Server page shows
        it) and logged, not raised."""
        if not self._workstation.settings.api_autostart or self._state is not ApiState.STOPPED:
            return
        try:
            await self.start()
        except (AppError, OSError) as exc:
            log.warning("The API server did not start with the app: %s", exc)

    async def stop(self) -> None:
        """Stop accepting connections and end the replies in flight; the loaded models stay loaded."""
        async with self._lock:
            if self._state is not ApiState.SERVING:
                if self._state is ApiState.FAILED:
                    self._error = None
                    self._set(ApiState.STOPPED)
                return
            self._set(ApiState.STOPPING)
            try:
                await self.server.stop()
            finally:
                self._running, self._restart_to_apply = None, False
                self._set(ApiState.STOPPED)

    def also_serve(self, folders: Sequence[Path]) -> None:
        """Serve these folders' GGUFs too, for this session (``serve --models-dir``; not saved in the settings)."""
        if folders:
            self.catalog.add_library(ModelLibrary(LibraryRoots(folders=tuple(folders))))

    async def close(self) -> None:
        """The workstation closes: stop serving and stop following. Idempotent."""
        while self._unsubscribe:
            self._unsubscribe.pop()()
        await self.stop()

    # --- following ----------------------------------------------------------------------------------------
    def _set(self, state: ApiState) -> None:
        self._state = state
        self._events.emit(ApiStateChanged(self.snapshot()))

    def _record(self, record: RequestRecord) -> None:
        if record.finished:
            self._requests += 1
        self._events.emit(ApiRequestLogged(record, self._requests))

    def _library_event(self, event: LibraryEvent) -> None:
        if isinstance(event, LibraryChanged):  # a download finished, a folder added: listed at once
            self.catalog.invalidate()

    def _settings_changed(self, event: SettingsChanged) -> None:
        if event.touches("ollama_host"):
            self.catalog.invalidate()
        if event.touches(*SERVER_SETTINGS) and self._from_settings and self._state is ApiState.SERVING:
            pending = config_from_settings(self._workstation) != self._running
            if pending != self._restart_to_apply:
                self._restart_to_apply = pending
                self._set(ApiState.SERVING)


def _import_http_stack() -> None:
    """uvicorn and Starlette, imported off the loop's thread (a first start would pause the window for them)."""
    import uvicorn  # noqa: F401

    import app.services.api.asgi  # noqa: F401
