"""What the window's parts share: settings, paths, the history store, the backend, the log."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.settings import Settings, SettingsError, load_settings
from app.services.conversations import AsyncConversationStore
from app.services.logbuffer import LogBuffer
from app.services.paths import AppPaths

log = logging.getLogger("app.ui")


@dataclass
class AppContext:
    paths: AppPaths
    settings: Settings
    log_buffer: LogBuffer
    backend: LlamaCppBackend = field(default_factory=LlamaCppBackend)
    store: AsyncConversationStore | None = None
    settings_problem: str | None = None

    @classmethod
    def create(cls, paths: AppPaths, log_buffer: LogBuffer) -> AppContext:
        try:
            settings, problem = load_settings(paths.settings_file), None
        except SettingsError as exc:
            settings, problem = Settings(), str(exc)
            log.error("%s Using default settings for this session; the file was left as it is.", exc)
        return cls(paths=paths, settings=settings, log_buffer=log_buffer, settings_problem=problem)
