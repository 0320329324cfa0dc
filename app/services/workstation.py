"""What every client of the app shares — paths, settings, the log, the engine host, the history store and the
long-lived services (downloads, monitor, API server, jobs, Ollama) — built by a composition root: the window's
start-up, a CLI verb, or ``serve``. No widget creates or holds any of it: pages are views that take a snapshot
when shown and subscribe. Settings change through one road, ``update_settings``, which emits ``SettingsChanged``."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.settings import MAX_RECENT_MODELS, Settings, SettingsError, load_settings, save_settings
from app.services.chat.history import AsyncConversationStore, ConversationStoreError
from app.services.engines.host import EngineHost
from app.services.engines.spec_guard import SpeculationGuard
from app.services.events import EventHub
from app.services.logbuffer import LogBuffer
from app.services.model_settings import FILE_NAME as MODEL_SETTINGS_FILE
from app.services.model_settings import ModelSettingsStore
from app.services.paths import AppPaths
from app.services.settings_changes import SettingsChanged, apply_changes, differences

if TYPE_CHECKING:
    from app.services.api.service import ApiService
    from app.services.documents.service import DocumentsService
    from app.services.downloads.service import DownloadService
    from app.services.jobs.service import JobService
    from app.services.library.service import LibraryService
    from app.services.mcp.manager import McpManager
    from app.services.monitor.service import MonitorService
    from app.services.ollama.shared import SharedOllama

log = logging.getLogger("app.services")
# The services that exist are stopped in this order: the API server first (no new requests), jobs, document
# indexing (what was committed stays), downloads, the library, the monitor; the shared Ollama client last (the API
# catalog and jobs may still use it).
CLOSE_ORDER = ("api", "jobs", "documents", "downloads", "library", "monitor", "ollama")


def default_host(settings: Settings, paths: AppPaths) -> EngineHost:
    """The engine host with this machine's llama.cpp: a load whose context cannot fit is refused up front, and
    llama.cpp's CPU-specific kernels stay off where they crashed before."""
    from app.backends.llamacpp.backend import LlamaCppBackend
    from app.services.monitor.machine_memory import read_machine_memory

    llamacpp = LlamaCppBackend(machine_memory=read_machine_memory, kernel_fallback_marker=paths.llama_kernel_fallback)
    return EngineHost(llamacpp, ollama_host=settings.ollama_host or None)


@dataclass
class Workstation:
    paths: AppPaths
    settings: Settings
    host: EngineHost
    log_buffer: LogBuffer = field(default_factory=LogBuffer)  # the window's log view reads it
    settings_problem: str | None = None  # the settings file could not be read: defaults are used, it is not saved
    store: AsyncConversationStore | None = None
    store_problem: str | None = None
    _closed: bool = field(default=False, repr=False)
    _save_lock: asyncio.Lock | None = field(default=None, repr=False)
    _events: EventHub[SettingsChanged] = field(default_factory=EventHub, repr=False)
    _saves: set[asyncio.Task[None]] = field(default_factory=set, repr=False)
    spec_guard: SpeculationGuard = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.subscribe(self._engines_follow)
        # speculative decoding proves itself on the user's replies, or is turned off for that model (saying so)
        self.spec_guard = SpeculationGuard(self.host, lambda: self.model_settings)

    @classmethod
    def create(
        cls, paths: AppPaths, log_buffer: LogBuffer | None = None, host: EngineHost | None = None
    ) -> Workstation:
        try:
            settings, problem = load_settings(paths.settings_file), None
        except SettingsError as exc:
            settings, problem = Settings(), str(exc)
            log.error("%s Using default settings for this session; the file was left as it is.", exc)
        return cls(paths, settings, host or default_host(settings, paths), log_buffer or LogBuffer(), problem)

    @functools.cached_property
    def model_settings(self) -> ModelSettingsStore:
        """Per-model settings (load options, sampling, preset), shared by the chat, the Library and the server.
        Its file is read on first use: call ``model_settings.load()`` off the Qt thread first."""
        return ModelSettingsStore(self.paths.data_dir / MODEL_SETTINGS_FILE, lambda: self.settings)

    @functools.cached_property
    def mcp(self) -> McpManager:
        """The MCP servers (app/services/mcp), created on first use: the ``mcp`` SDK is imported only when a server
        starts. ``await mcp.load()`` reads their file; none starts before ``start_enabled()``."""
        from app.services.mcp.config_file import McpConfigFile
        from app.services.mcp.manager import McpManager

        return McpManager(McpConfigFile(self.paths.mcp_servers_file))

    @functools.cached_property
    def monitor(self) -> MonitorService:
        """The monitor (sampler, the last samples, alerts, Prometheus endpoint): ``await monitor.start()`` begins
        sampling; ``snapshot()``, ``subscribe`` for its events. It follows the settings."""
        from app.services.monitor.service import MonitorService

        return MonitorService.for_workstation(self)

    @functools.cached_property
    def downloads(self) -> DownloadService:
        """The download queue; ``await downloads.start()`` reads it and resumes unfinished jobs (the window does)."""
        from app.services.downloads.service import DownloadService

        service = DownloadService(self)
        if "library" in self.__dict__:  # the library rescans when a download lands
            self.library.follow_downloads(service)
        return service

    @functools.cached_property
    def library(self) -> LibraryService:
        """The local model library: ``snapshot()``, ``await scan()``, ``subscribe`` for ``LibraryChanged``."""
        from app.services.library.service import LibraryService

        service = LibraryService(self)
        if "downloads" in self.__dict__:
            service.follow_downloads(self.downloads)
        return service

    @functools.cached_property
    def api(self) -> ApiService:
        """The local API server (start/stop, state, request log; its catalog follows the library and settings)."""
        from app.services.api.service import ApiService

        return ApiService(self, self.host, self.library, self.model_settings, self.ollama)

    @functools.cached_property
    def jobs(self) -> JobService:
        """The long jobs (batch runs, bench runs, the vLLM install): progress, cancel, result; cancelled on close."""
        from app.services.jobs.service import JobService

        return JobService()

    @functools.cached_property
    def documents(self) -> DocumentsService:
        """Your documents: the index in ``documents.sqlite3`` (opened off the loop's thread on first use) and its
        indexer; ``await documents.search(...)``, ``documents.index(paths, collection)``, ``subscribe`` for progress.
        Closing cancels indexing; what was committed stays. The ``documents_embedding_model`` setting chooses its
        embedding model, run on the engine host (beside the chat model when both fit)."""
        from app.services.documents.embedder import HostEmbedder
        from app.services.documents.service import DocumentsService
        from app.services.engines.events import ModelUnloaded

        def embedder_for(entry: str) -> HostEmbedder:
            return HostEmbedder(self.host, entry, lambda: self.model_settings.effective_load(entry))

        model = self.settings.documents_embedding_model or None
        service = DocumentsService(self.paths.data_dir / "documents.sqlite3", embedder_for=embedder_for,
                                   embedding_model=model)  # fmt: skip
        self.subscribe(lambda event: self._documents_follow(service, event))
        self.host.subscribe(lambda event: service.memory_freed() if isinstance(event, ModelUnloaded) else None)
        return service

    def _documents_follow(self, service: DocumentsService, event: SettingsChanged) -> None:
        if event.touches("documents_embedding_model"):
            service.set_embedding_model(self.settings.documents_embedding_model or None)

    @functools.cached_property
    def ollama(self) -> SharedOllama:
        """The one Ollama client, for the settings' ``ollama_host``: ``async with workstation.ollama.use() as s``."""
        from app.services.ollama.shared import SharedOllama

        shared = SharedOllama(lambda: self.settings.ollama_host or None)
        self.subscribe(shared.settings_changed)
        return shared

    async def open_history(self) -> AsyncConversationStore | None:
        """Open the history store (once); None, with ``store_problem`` saying why, when it cannot be opened."""
        if self.store is None and self.store_problem is None:
            try:
                self.store = await AsyncConversationStore.open(self.paths.conversations_db)
            except ConversationStoreError as exc:
                self.store_problem = str(exc)
                log.error("%s", exc)
        return self.store

    # --- settings: one road ---------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[SettingsChanged], None]) -> Callable[[], None]:
        """Call ``listener`` with every ``SettingsChanged`` from now on; returns the function that unsubscribes."""
        return self._events.subscribe(listener)

    def update_settings(self, **changes: Any) -> SettingsChanged | None:
        """Set these settings fields, save them (off the loop's thread, serialized) and tell every listener which
        changed; None when nothing did. Without a running loop (a CLI verb) the file is written at once."""
        names = apply_changes(self.settings, changes)
        if not names:
            return None
        self._save_soon()
        event = SettingsChanged(names)
        self._events.emit(event)
        return event

    def replace_settings(self, settings: Settings) -> SettingsChanged | None:
        """The Settings page's whole form (or a file read again): its differences go the one road."""
        self.settings_problem = None  # readable or chosen by the user: in use, and saved
        return self.update_settings(**differences(self.settings, settings))

    def remember_model(self, entry: str) -> SettingsChanged | None:
        """``entry`` was just used: first in the recent models."""
        recent = [entry] + [e for e in self.settings.recent_models if e != entry]
        return self.update_settings(recent_models=recent[:MAX_RECENT_MODELS])

    async def settings_saved(self) -> None:
        """Wait for the saves in flight (the window's close and tests)."""
        while self._saves:
            await asyncio.gather(*list(self._saves), return_exceptions=True)

    def _save_soon(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if not self.settings_problem:
                save_settings(self.settings, self.paths.settings_file)
            return
        task = loop.create_task(self.save_settings())
        self._saves.add(task)
        task.add_done_callback(self._save_done)

    def _save_done(self, task: asyncio.Task[None]) -> None:
        self._saves.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("Could not save the settings: %s", task.exception())

    def _engines_follow(self, event: SettingsChanged) -> None:
        if event.touches("ollama_host"):
            self.host.set_ollama_host(self.settings.ollama_host or None)

    async def save_settings(self) -> None:
        """Write the settings off the event loop's thread; never over a file that could not be read."""
        if self.settings_problem:
            log.warning("Not saving settings: %s", self.settings_problem)
            return
        if self._save_lock is None:
            self._save_lock = asyncio.Lock()
        async with self._save_lock:  # one writer at a time: saves share the temporary file; the newest wins
            snapshot = copy.deepcopy(self.settings)
            await asyncio.get_running_loop().run_in_executor(None, save_settings, snapshot, self.paths.settings_file)

    # --- the long-lived services: each made on first use, stopped in order on close ----------------------------
    async def close(self) -> None:
        """Stop the services (API server, jobs, downloads, monitor), the engines and the MCP servers, save the
        settings and close the history. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for name in CLOSE_ORDER:
            service = self.__dict__.get(name)
            if service is not None:
                try:
                    await service.close()
                except Exception:  # one service failing to stop must not keep the others running
                    log.exception("Could not stop the %s service", name)
        await self.settings_saved()
        self.spec_guard.close()
        await self.spec_guard.settled()
        await self.host.close()
        if "mcp" in self.__dict__:  # created: stop its servers
            await self.mcp.close()
        if self.store is not None:
            await self.store.aclose()
