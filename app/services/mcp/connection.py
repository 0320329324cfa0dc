"""One MCP server's connection, held by one asyncio task from start to stop: the transport (a process spoken to
over stdio, or a Streamable HTTP URL), the SDK's ``ClientSession``, the server's tools and its state.

A stdio server is started as an argv list (never through a shell) with the SDK's safe default environment
(``mcp.client.stdio.get_default_environment``: PATH, HOME, USER, …) plus only the ``env`` its configuration
gives. Its stderr goes to the app's log, and its last lines explain a failure. A server that exits is reported
as failed, whether it was idle or in the middle of a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.errors import AppError, ErrorKind
from app.core.mcp.config import ServerConfig, redacted
from app.services.mcp.results import ToolResult, result_text
from app.services.mcp.status import ServerState, ServerStatus, ToolInfo
from app.services.mcp.stderr import StderrPipe

log = logging.getLogger("app.services.mcp")

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
MAX_HTTP_EVENT_BYTES = 32 * 1024 * 1024  # one message from an HTTP server (the SDK's default is 1 MiB)
BUILTIN_MODULE = "app.services.mcp.builtin_server"


class McpCallError(AppError):
    """A tool call that could not be made or did not finish; the message names the server and the tool."""


class ServerConnection:
    """``start()`` returns once the server is ready or has failed; ``call_tool``; ``stop()``. ``on_change`` is
    called (on the event loop) after every change of state."""

    def __init__(self, config: ServerConfig, on_change: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.state = ServerState.STOPPED if config.enabled else ServerState.DISABLED
        self.error: str | None = None
        self.tools: tuple[ToolInfo, ...] = ()
        self._on_change = on_change
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._stderr: StderrPipe | None = None

    def status(self) -> ServerStatus:
        config = self.config
        return ServerStatus(config.name, config.transport, config.enabled, self.state, self.error, self.tools)

    @property
    def stderr_tail(self) -> list[str]:
        return list(self._stderr.tail) if self._stderr else []

    # --- lifecycle ----------------------------------------------------------------------------------------------
    async def start(self, timeout: float = START_TIMEOUT_S) -> ServerStatus:
        """Start the server (if it is not running) and wait until it is ready or has failed."""
        if self._task is None or self._task.done():
            self._stopping = False
            self._wake = asyncio.Event()
            settled = asyncio.Event()
            self._set(ServerState.STARTING, None, ())
            self._task = asyncio.create_task(self._run(timeout, settled), name=f"mcp server {self.config.name}")
            await settled.wait()
        else:
            while self.state is ServerState.STARTING:
                await asyncio.sleep(0.05)
        return self.status()

    async def stop(self) -> None:
        """Stop the server; its process (and the processes it started) end. Idempotent."""
        self._stopping = True
        self._wake.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        settled = ServerState.STOPPED if self.config.enabled else ServerState.DISABLED
        if self.state is not settled:
            self._set(settled, None, ())

    async def _run(self, timeout: float, settled: asyncio.Event) -> None:
        failure: Exception | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open_transport(stack)
                from mcp import ClientSession

                session = await stack.enter_async_context(ClientSession(read, write))
                async with asyncio.timeout(timeout):
                    await session.initialize()
                    tools = await _list_tools(session, self.config.name)
                self._session = session
                self._set(ServerState.READY, None, tools)
                log.info("MCP server %s is ready with %d tools", self.config.name, len(tools))
                settled.set()
                await self._wait_for_stop_or_exit()
        except Exception as exc:  # what the SDK, the process or the network raised: the server has failed
            failure = exc
        finally:
            self._session = None
            if self._stderr is not None:
                await self._stderr.close()  # after the process ended: its last lines are read first
            if failure is not None and (not self._stopping or self.state is ServerState.STARTING):
                self._fail(self._with_stderr(_reason(failure, timeout, self.config.cwd)))
            settled.set()

    async def _wait_for_stop_or_exit(self) -> None:
        ended = self._stderr.ended if self._stderr else None
        while not self._stopping and self.state is ServerState.READY:  # a failed call ends it too (``_fail``)
            if ended is not None and ended.is_set():
                self._fail(self._with_stderr("the server exited"))
                return
            waiters = [asyncio.ensure_future(self._wake.wait())]
            if ended is not None:
                waiters.append(asyncio.ensure_future(ended.wait()))
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def _open_transport(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        config = self.config
        if config.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            log.info(
                "connecting to MCP server %s at %s (headers %s)", config.name, config.url, redacted(config.headers)
            )
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0))
            )
            transport = streamable_http_client(config.url, http_client=client, max_sse_event_size=MAX_HTTP_EVENT_BYTES)
            read, write = await stack.enter_async_context(transport)
            return read, write
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command, args, env = _argv_and_env(config)
        log.info("starting MCP server %s: %s %s (env %s)", config.name, command, " ".join(args), redacted(env))
        self._stderr = StderrPipe(config.name)
        params = StdioServerParameters(command=command, args=list(args), env=env, cwd=config.cwd or None)
        try:
            read, write = await stack.enter_async_context(stdio_client(params, errlog=self._stderr.writer))
        finally:
            await self._stderr.start()  # the child has its copy of the write end (or was never started)
        return read, write

    # --- calls --------------------------------------------------------------------------------------------------
    async def call_tool(self, tool: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Call ``tool``; a ``McpCallError`` when the server is not ready, stops during the call, or does not
        answer within ``timeout`` seconds. Cancelling the caller cancels the call (the server is told)."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        session, name = self._session, self.config.name
        if session is None or self.state is not ServerState.READY:
            why = f"{self.state}: {self.error}" if self.error else str(self.state)
            raise McpCallError(f"the MCP server {name!r} is not running ({why})", kind=ErrorKind.UNAVAILABLE)
        if tool not in {t.name for t in self.tools}:
            raise McpCallError(f"the MCP server {name!r} has no tool named {tool!r}", kind=ErrorKind.NOT_FOUND)
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                reason = self._with_stderr(f"the server stopped during the call to {tool}")
                self._fail(reason)
                raise McpCallError(f"MCP server {name!r}: {reason}", kind=ErrorKind.UNAVAILABLE) from None
            if exc.code == REQUEST_TIMEOUT:
                message = f"MCP server {name!r} did not answer the call to {tool} within {timeout:g} s"
                raise McpCallError(message, kind=ErrorKind.ENGINE_FAILED) from None
            raise McpCallError(f"MCP server {name!r} refused the call to {tool}: {exc.message}") from None
        return ToolResult(name, tool, result_text(result), bool(result.is_error))

    # --- state --------------------------------------------------------------------------------------------------
    def _set(self, state: ServerState, error: str | None, tools: tuple[ToolInfo, ...]) -> None:
        self.state, self.error, self.tools = state, error, tools
        if self._on_change is not None:
            self._on_change(self.config.name)

    def _fail(self, reason: str) -> None:
        if self.state is not ServerState.FAILED:
            log.error("MCP server %s failed: %s", self.config.name, reason)
            self._set(ServerState.FAILED, reason, ())
        self._wake.set()  # the connection task ends and closes the transport

    def _with_stderr(self, reason: str) -> str:
        last = self._stderr.last_line() if self._stderr else ""
        return f"{reason} (its last output: {last})" if last else reason


def _argv_and_env(config: ServerConfig) -> tuple[str, tuple[str, ...], dict[str, str]]:
    """What starts the server: the built-in one is this Python running :data:`BUILTIN_MODULE`."""
    if not config.builtin:
        return config.command, config.args, dict(config.env)
    args = ("-m", BUILTIN_MODULE, *(("--root", config.root) if config.root else ()))
    if getattr(sys, "frozen", False):  # the bundle's executable stands in for ``python -m`` (see app/__main__.py)
        return sys.executable, args, {"PYTHONUNBUFFERED": "1"}
    package_root = str(Path(__file__).resolve().parents[3])
    return sys.executable, args, {"PYTHONPATH": package_root, "PYTHONUNBUFFERED": "1"}


async def _list_tools(session: Any, server: str) -> tuple[ToolInfo, ...]:
    tools, cursor = [], None
    while True:
        from mcp_types import PaginatedRequestParams

        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += [ToolInfo(server, t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
        cursor = page.next_cursor
        if not cursor or len(tools) > 1000:
            return tuple(tools)


def _reason(exc: BaseException, timeout: float, cwd: str = "") -> str:
    """One line saying why the server could not be started or spoken to."""
    exc = _innermost(exc)
    if isinstance(exc, TimeoutError):
        return f"it did not answer within {timeout:g} s"
    if isinstance(exc, FileNotFoundError) and cwd and exc.filename == cwd:
        return f"its working folder {cwd} does not exist"
    if isinstance(exc, FileNotFoundError):
        return f"the program {exc.filename or ''} was not found; check the command and PATH".replace("  ", " ")
    if isinstance(exc, PermissionError):
        return f"the program {exc.filename or ''} cannot be run (permission denied)".replace("  ", " ")
    name = type(exc).__name__
    if name in ("ConnectError", "ConnectTimeout"):
        return f"cannot connect ({exc}); check the URL and that the server is running"
    text = str(exc).strip() or name
    if name == "MCPError" and text == "Connection closed":
        return "the server closed the connection before it was ready"
    return text if len(text) <= 300 else text[:299] + "…"


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return _innermost(exc.exceptions[0])
    return exc
