"""A small, real MCP server (the ``mcp`` SDK's ``MCPServer``) for the MCP tests.

``python -m tests.support.mcp_test_server`` speaks MCP on stdio; ``--http PORT`` serves Streamable HTTP on
127.0.0.1:PORT at ``/mcp`` with uvicorn. Tools: ``add``, ``env_value`` (what the server's environment holds),
``big`` (a result of N bytes), ``slow`` (sleeps), ``meet`` (answers once N calls of it are in flight together:
proof that calls overlap, whatever the machine's speed), ``exit_later`` (exits while idle), ``crash`` (the process
exits in the middle of the call); with ``--chat-tools`` also tools whose arguments are bounded, for the chat's tool
loop: ``pick`` (one of three colours), ``ten_mb`` (10 MB), ``hang`` (ten minutes). It writes a line to stderr when
it starts; ``--fail-at-start`` makes it exit with a message instead."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from typing import Literal

STARTED_LINE = "test server: up and listening"
FAILED_LINE = "test server: cannot open its database (config missing)"
SLOW_STARTED_LINE = "test server: a slow call started"
HANG_STARTED_LINE = "test server: a hanging call started"


CHAT_TOOLS_FLAG = "--chat-tools"


def build_server(chat_tools: bool = False):
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("test server", log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def env_value(name: str) -> str:
        """The value of an environment variable in the server's process, or <unset>."""
        return os.environ.get(name, "<unset>")

    @server.tool()
    def big(size: int) -> str:
        """A text of ``size`` bytes."""
        return "0123456789" * (size // 10) + "x" * (size % 10)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answer after ``seconds`` (its start is a line on stderr: the call is in flight)."""
        print(SLOW_STARTED_LINE, file=sys.stderr, flush=True)
        await asyncio.sleep(seconds)
        return "done"

    arrived: list[asyncio.Event] = []

    @server.tool()
    async def meet(party: int, seconds: float) -> str:
        """ "met" once ``party`` calls of meet are in flight at the same time; "alone" if ``seconds`` pass first."""
        everyone = asyncio.Event()
        arrived.append(everyone)
        if len(arrived) >= party:
            for event in arrived:
                event.set()
            arrived.clear()
        try:
            await asyncio.wait_for(everyone.wait(), seconds)
        except TimeoutError:
            return "alone"
        return "met"

    @server.tool()
    def exit_later(seconds: float) -> str:
        """Answer, then exit the process ``seconds`` later (while it is idle)."""

        def leave() -> None:
            print("test server: leaving", file=sys.stderr, flush=True)
            os._exit(4)

        threading.Timer(seconds, leave).start()
        return "bye"

    if chat_tools:
        _add_chat_tools(server)

    @server.tool()
    def crash() -> str:
        """Exit the server's process in the middle of the call."""
        print("test server: crashing now", file=sys.stderr, flush=True)
        os._exit(3)

    return server


def _add_chat_tools(server) -> None:
    @server.tool()
    def pick(color: Literal["red", "green", "blue"]) -> str:
        """Pick a colour (arguments a model with random weights can only write correctly under a grammar)."""
        return f"picked {color}"

    @server.tool()
    def ten_mb() -> str:
        """A result of 10,000,000 bytes."""
        return "0123456789" * 1_000_000

    @server.tool()
    async def hang() -> str:
        """Answer after ten minutes (a call to cancel; its start is a line on stderr: the call is in flight)."""
        print(HANG_STARTED_LINE, file=sys.stderr, flush=True)
        await asyncio.sleep(600)
        return "too late"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    parser.add_argument("--fail-at-start", action="store_true")
    parser.add_argument(CHAT_TOOLS_FLAG, action="store_true")
    args = parser.parse_args()
    if args.fail_at_start:
        print(FAILED_LINE, file=sys.stderr, flush=True)
        return 1
    print(STARTED_LINE, file=sys.stderr, flush=True)
    server = build_server(args.chat_tools)
    if args.http is None:
        server.run()
        return 0
    import uvicorn

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=args.http, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
