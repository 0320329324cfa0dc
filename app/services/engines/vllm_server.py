"""The app's own vLLM server, owned by the engine host: started, watched and stopped here, offered to every
client once it is ready. The vLLM page shows its progress; the monitor counts its processes' memory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from app.core.errors import ErrorKind
from app.services.engines.events import VllmEndpoint

if TYPE_CHECKING:  # the vLLM server's module (~80 ms) is imported when a server is started, not with the host
    from app.core.vllm.log import PhaseEvent
    from app.services.vllm.server import VllmServerError


class EndpointBoard(Protocol):
    """Where the server is offered once ready (the engine host)."""

    @property
    def vllm_endpoint(self) -> VllmEndpoint | None: ...

    def offer_vllm(self, endpoint: VllmEndpoint) -> None: ...

    def withdraw_vllm(self, source: str) -> None: ...


class ManagedServer(Protocol):
    """What the host needs of a server it starts (``app.services.vllm.server.VllmServer`` fits; tests pass stubs)."""

    @property
    def base_url(self) -> str: ...
    @property
    def served_model_name(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def elapsed(self) -> float | None: ...
    @property
    def log_tail(self) -> list[str]: ...

    async def start(
        self,
        on_log: Callable[[str], None] | None = None,
        on_phase: Callable[[PhaseEvent], None] | None = None,
        on_crash: Callable[[VllmServerError], None] | None = None,
    ) -> None: ...
    async def stop(self) -> None: ...
    def launch_command(self) -> str: ...
    def docker_command(self) -> str: ...


class ManagedVllm:
    """At most one server the app started, offered to the host's clients once it is ready."""

    def __init__(self, host: EndpointBoard) -> None:
        self._host = host
        self.server: ManagedServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def starting(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def ready(self) -> bool:
        endpoint = self._host.vllm_endpoint
        return self.server is not None and endpoint is not None and endpoint.source == "managed"

    def start(
        self,
        server: ManagedServer,
        api_key: str | None,
        on_log: Callable[[str], None] | None = None,
        on_phase: Callable[[PhaseEvent], None] | None = None,
        on_crash: Callable[[VllmServerError], None] | None = None,
    ) -> asyncio.Task[None]:
        """Start ``server`` (it is ``self.server`` from now on) and offer it once ready. The task raises
        VllmServerError / OSError when it cannot start (the server is then forgotten), CancelledError when
        ``stop`` came first. A crash later withdraws it and calls ``on_crash``."""
        from app.services.vllm.server import VllmServerError

        if self.server is not None:
            raise VllmServerError("The app's vLLM server is already running. Stop it first.", kind=ErrorKind.BUSY)
        self.server = server

        def crashed(error: VllmServerError) -> None:
            if self.server is server:
                self.server = None
                self._host.withdraw_vllm("managed")
            if on_crash is not None:
                on_crash(error)

        self._task = asyncio.ensure_future(server.start(on_log, on_phase, crashed))
        return asyncio.ensure_future(self._offer_when_ready(server, api_key, self._task))

    async def _offer_when_ready(self, server: ManagedServer, api_key: str | None, task: asyncio.Task[None]) -> None:
        try:
            await asyncio.shield(task)
        except BaseException:
            if self.server is server:
                self.server = None
            raise
        endpoint = VllmEndpoint(server.base_url, server.served_model_name, api_key or None, "managed", server.pid)
        self._host.offer_vllm(endpoint)

    async def stop(self) -> None:
        """Stop the server (cancelling a start in progress); the endpoint is withdrawn. Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            from app.services.vllm.server import VllmServerError  # loaded already: a server was started

            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, VllmServerError, OSError):
                await task
        server, self.server = self.server, None
        if server is not None:
            await server.stop()
        self._host.withdraw_vllm("managed")
