"""The workstation's one Ollama client (``workstation.ollama``): one :class:`OllamaService` for the settings'
``ollama_host``, shared by every page and the API catalog.

``async with workstation.ollama.use() as service:`` lends the client bound to the host as it is now; the
block never closes it. When the host setting changes, the next ``use`` gets a client for the new host and the
old one is closed once the last block still using it has ended. ``close`` closes them all."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.lazy_import import import_now

if TYPE_CHECKING:
    from app.services.ollama.client import OllamaService
    from app.services.settings_changes import SettingsChanged


@dataclass(frozen=True)
class SharedOllamaState:
    """``made``: clients created so far (one per host used); ``lent``: ``use`` blocks entered; ``in_use``: now."""

    host: str | None
    made: int
    lent: int
    in_use: int


class SharedOllama:
    def __init__(self, host: Callable[[], str | None]) -> None:
        self._host = host  # the setting as it is now ("" or None: OLLAMA_HOST, else the local default)
        self._current: tuple[str | None, OllamaService] | None = None
        self._users: dict[int, int] = {}  # id(service) -> blocks using it now
        self._retired: list[OllamaService] = []  # for an old host, closed when their last user is done
        self._imported = False
        self._made = self._lent = 0

    @property
    def host(self) -> str | None:
        return self._host() or None

    def snapshot(self) -> SharedOllamaState:
        return SharedOllamaState(self.host, self._made, self._lent, sum(self._users.values()))

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[OllamaService]:
        """The client for the current host, lent for the block. Raises ``OllamaError`` for an unusable host."""
        service = await self._service()
        key = id(service)
        self._users[key] = self._users.get(key, 0) + 1
        self._lent += 1
        try:
            yield service
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
                await self._close_idle_retired()

    def settings_changed(self, event: SettingsChanged) -> None:
        """A new host: the next ``use`` makes its client; the old one goes once idle."""
        if event.touches("ollama_host") and self._current is not None and self._current[0] != self.host:
            self._retired.append(self._current[1])
            self._current = None

    async def close(self) -> None:
        """Close every client (the workstation's close). Idempotent."""
        if self._current is not None:
            self._retired.append(self._current[1])
            self._current = None
        retired, self._retired = self._retired, []
        for service in retired:
            await service.close()

    async def _service(self) -> OllamaService:
        await self._close_idle_retired()
        if not self._imported:  # the client library (~150 ms) loads off the loop's thread
            await asyncio.get_running_loop().run_in_executor(None, import_now, "ollama", "httpx")
            self._imported = True
        from app.services.ollama.client import OllamaService

        host = self.host
        if self._current is None or self._current[0] != host:  # the first use, or a host changed unannounced
            if self._current is not None:
                self._retired.append(self._current[1])
            self._current = None
            self._current = (host, OllamaService(host))
            self._made += 1
        return self._current[1]

    async def _close_idle_retired(self) -> None:
        idle = [service for service in self._retired if id(service) not in self._users]
        self._retired = [service for service in self._retired if id(service) in self._users]
        for service in idle:
            await service.close()
