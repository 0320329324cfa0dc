"""What every client of the app shares — paths, settings, the log, the engine host and the history store — built
by a composition root: the window's start-up, a CLI verb, or ``serve``. No widget creates or holds any of it."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.core.settings import Settings, SettingsError, load_settings, save_settings
from app.services.chat.history import AsyncConversationStore, ConversationStoreError
from app.services.engines.host import EngineHost
from app.services.logbuffer import LogBuffer
from app.services.model_settings import FILE_NAME as MODEL_SETTINGS_FILE
from app.services.model_settings import ModelSettingsStore
from app.services.paths import AppPaths

if TYPE_CHECKING:
    from app.services.mcp.manager import McpManager

log = logging.getLogger("app.services")


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

    async def open_history(self) -> AsyncConversationStore | None:
        """Open the history store (once); None, with ``store_problem`` saying why, when it cannot be opened."""
        if self.store is None and self.store_problem is None:
            try:
                self.store = await AsyncConversationStore.open(self.paths.conversations_db)
            except ConversationStoreError as exc:
                self.store_problem = str(exc)
                log.error("%s", exc)
        return self.store

    def apply_settings(self, settings: Settings) -> None:
        """New settings from the user: the engines that depend on them follow."""
        self.settings, self.settings_problem = settings, None
        self.host.set_ollama_host(settings.ollama_host or None)

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

    async def close(self) -> None:
        """Stop the engines and the MCP servers, and close the history. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.host.close()
        if "mcp" in self.__dict__:  # created: stop its servers
            await self.mcp.close()
        if self.store is not None:
            await self.store.aclose()
