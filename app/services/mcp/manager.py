"""The MCP servers the app runs: one :class:`ServerConnection` per configured server, started together, each with
its own state (disabled, stopped, starting, ready with N tools, failed with the reason), restarted or stopped one
by one, and the tools of the ready ones called with a timeout. Qt-free; owned by the composition root
(``Workstation.mcp``), which closes it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from app.core.errors import ErrorKind
from app.core.mcp.config import McpConfig, McpConfigError
from app.services.mcp.config_file import McpConfigFile
from app.services.mcp.connection import (
    START_TIMEOUT_S,
    McpCallError,
    ServerConnection,
    ServerState,
    ServerStatus,
    ToolInfo,
)
from app.services.mcp.results import ToolResult

log = logging.getLogger("app.services.mcp")

CALL_TIMEOUT_S = 120.0


class McpManager:
    """``await load()`` (the file is read off the event loop's thread), then ``start_enabled()``, ``tools()``,
    ``call_tool(...)``; ``close()`` stops every server."""

    def __init__(self, config_file: McpConfigFile | None = None, config: McpConfig | None = None) -> None:
        self.config_file = config_file
        self.config = config if config is not None else McpConfig([])
        self._connections: dict[str, ServerConnection] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._loaded = config is not None
        self._sync_connections()

    @property
    def problem(self) -> str | None:
        """Why the servers file could not be read (no server runs until it is fixed), or None."""
        return self.config_file.problem if self.config_file else None

    async def load(self) -> None:
        """Read the servers file (once)."""
        if self._loaded or self.config_file is None:
            return
        self._loaded = True
        self.config = await asyncio.get_running_loop().run_in_executor(None, self.config_file.load)
        self._sync_connections()

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(server_name)`` after every change of a server's state, on the event loop."""
        self._listeners.append(listener)

    # --- state --------------------------------------------------------------------------------------------------
    def statuses(self) -> list[ServerStatus]:
        return [connection.status() for connection in self._connections.values()]

    def status(self, name: str) -> ServerStatus:
        return self._connection(name).status()

    def stderr_tail(self, name: str) -> list[str]:
        return self._connection(name).stderr_tail

    def tools(self) -> list[ToolInfo]:
        """The tools of every ready server, server by server."""
        return [tool for c in self._connections.values() if c.state is ServerState.READY for tool in c.tools]

    # --- lifecycle ----------------------------------------------------------------------------------------------
    async def start_enabled(self, timeout: float = START_TIMEOUT_S) -> list[ServerStatus]:
        """Start every enabled server at once; returns when each is ready or has failed."""
        await self.load()
        enabled = [c for c in self._connections.values() if c.config.enabled]
        await asyncio.gather(*(c.start(timeout) for c in enabled))
        return self.statuses()

    async def start(self, name: str, timeout: float = START_TIMEOUT_S) -> ServerStatus:
        connection = self._connection(name)
        if not connection.config.enabled:
            raise McpConfigError(f"the MCP server {name!r} is disabled; enable it first")
        return await connection.start(timeout)

    async def stop(self, name: str) -> ServerStatus:
        connection = self._connection(name)
        await connection.stop()
        return connection.status()

    async def restart(self, name: str, timeout: float = START_TIMEOUT_S) -> ServerStatus:
        await self.stop(name)
        return await self.start(name, timeout)

    async def apply(self, config: McpConfig) -> None:
        """Use ``config`` from now on: servers removed or changed are stopped (a changed one that is enabled is
        started again), the others keep running. Saves it first when there is a file (off the loop's thread)."""
        if self.config_file is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.config_file.save, config)
        old = dict(self._connections)
        self.config = config
        restart = [n for n, c in old.items() if self.config.get(n) != c.config and c.state is not ServerState.STOPPED]
        for name in old:
            if self.config.get(name) != old[name].config:
                await old[name].stop()
        self._sync_connections()
        await asyncio.gather(*(self._connections[n].start() for n in restart if self._enabled(n)))

    async def close(self) -> None:
        """Stop every server. Idempotent."""
        await asyncio.gather(*(c.stop() for c in self._connections.values()))

    # --- calls --------------------------------------------------------------------------------------------------
    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any] | None = None, timeout: float = CALL_TIMEOUT_S
    ) -> ToolResult:
        """Call a tool of a ready server; a ``McpCallError`` when it cannot be made or does not finish (a server
        that stops during the call is reported failed, the others go on). Cancel the caller to cancel the call."""
        connection = self._connections.get(server)
        if connection is None:
            raise McpCallError(f"there is no MCP server named {server!r}", kind=ErrorKind.NOT_FOUND)
        return await connection.call_tool(tool, dict(arguments or {}), timeout)

    # --- internals ----------------------------------------------------------------------------------------------
    def _sync_connections(self) -> None:
        """One connection per configured server, in the configuration's order; one whose configuration is
        unchanged is kept (running or not)."""
        kept = {}
        for server in self.config.servers:
            current = self._connections.get(server.name)
            kept[server.name] = (
                current if current and current.config == server else ServerConnection(server, self._changed)
            )
        self._connections = kept

    def _enabled(self, name: str) -> bool:
        server = self.config.get(name)
        return server is not None and server.enabled

    def _connection(self, name: str) -> ServerConnection:
        connection = self._connections.get(name)
        if connection is None:
            names = ", ".join(self._connections) or "none"
            raise McpConfigError(f"there is no MCP server named {name!r}; configured: {names}")
        return connection

    def _changed(self, name: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(name)
            except Exception:  # a listener's bug must not stop the servers
                log.exception("an MCP state listener failed")
