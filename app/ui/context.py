"""What the window's parts share: settings, paths, the history store, the backend, the log."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.backends.base import Backend
from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.settings import Settings, SettingsError, load_settings
from app.services.conversations import AsyncConversationStore
from app.services.logbuffer import LogBuffer
from app.services.machine_memory import read_machine_memory
from app.services.paths import AppPaths

log = logging.getLogger("app.ui")

OLLAMA_PREFIX = "ollama:"
VLLM_PREFIX = "vllm:"


@dataclass
class AppContext:
    paths: AppPaths
    settings: Settings
    log_buffer: LogBuffer
    backend: LlamaCppBackend = field(default_factory=lambda: LlamaCppBackend(machine_memory=read_machine_memory))
    store: AsyncConversationStore | None = None
    settings_problem: str | None = None
    ollama_backend: Backend | None = None

    vllm_backend: Backend | None = None
    vllm_target: tuple[str, str | None] | None = None  # (base URL, API key) of the vLLM server offered to chat

    def backend_for(self, model: str) -> Backend:
        """The engine for a model entry: ``ollama:NAME`` in Ollama, ``vllm:NAME`` in vLLM, else llama.cpp."""
        from app.backends.base import BackendError, create_backend

        if model.startswith(OLLAMA_PREFIX):
            if self.ollama_backend is None:
                self.ollama_backend = create_backend("ollama", host=self.settings.ollama_host or None)
            return self.ollama_backend
        if model.startswith(VLLM_PREFIX):
            if self.vllm_target is None:
                raise BackendError("No vLLM server is running. Start one (or connect to one) on the vLLM page.")
            if self.vllm_backend is None:
                url, key = self.vllm_target
                self.vllm_backend = create_backend("vllm", base_url=url, api_key=key)
            return self.vllm_backend
        return self.backend

    def backends(self) -> list[Backend]:
        return [b for b in (self.backend, self.ollama_backend, self.vllm_backend) if b is not None]

    @classmethod
    def create(cls, paths: AppPaths, log_buffer: LogBuffer) -> AppContext:
        try:
            settings, problem = load_settings(paths.settings_file), None
        except SettingsError as exc:
            settings, problem = Settings(), str(exc)
            log.error("%s Using default settings for this session; the file was left as it is.", exc)
        return cls(paths=paths, settings=settings, log_buffer=log_buffer, settings_problem=problem)
