"""What the window's parts share: settings, paths, the history store, the backend, the log."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.backends.base import Backend
from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.settings import Settings, SettingsError, load_settings
from app.services.conversations import AsyncConversationStore
from app.services.logbuffer import LogBuffer
from app.services.paths import AppPaths

log = logging.getLogger("app.ui")

OLLAMA_PREFIX = "ollama:"


@dataclass
class AppContext:
    paths: AppPaths
    settings: Settings
    log_buffer: LogBuffer
    backend: LlamaCppBackend = field(default_factory=LlamaCppBackend)
    store: AsyncConversationStore | None = None
    settings_problem: str | None = None
    ollama_backend: Backend | None = None

    def backend_for(self, model: str) -> Backend:
        """The engine for a model entry: ``ollama:NAME`` runs in Ollama, anything else in llama.cpp."""
        if not model.startswith(OLLAMA_PREFIX):
            return self.backend
        if self.ollama_backend is None:
            from app.backends.base import create_backend

            self.ollama_backend = create_backend("ollama", host=self.settings.ollama_host or None)
        return self.ollama_backend

    def backends(self) -> list[Backend]:
        return [b for b in (self.backend, self.ollama_backend) if b is not None]

    @classmethod
    def create(cls, paths: AppPaths, log_buffer: LogBuffer) -> AppContext:
        try:
            settings, problem = load_settings(paths.settings_file), None
        except SettingsError as exc:
            settings, problem = Settings(), str(exc)
            log.error("%s Using default settings for this session; the file was left as it is.", exc)
        return cls(paths=paths, settings=settings, log_buffer=log_buffer, settings_problem=problem)
