"""Configurations of the real MCP test server (tests/support/mcp_test_server.py), over stdio or Streamable HTTP,
and the HTTP one served by uvicorn in its own process on a free port of 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from app.core.mcp.config import ServerConfig

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.support.mcp_test_server"


def stdio_server(name: str = "test", *extra: str, env: dict[str, str] | None = None) -> ServerConfig:
    """The test server started over stdio (``python -m``, from the repository so the module is found)."""
    return ServerConfig(name, command=sys.executable, args=("-m", MODULE, *extra), env=env or {}, cwd=str(REPO))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def http_server(timeout: float = 30.0) -> Iterator[str]:
    """The test server on Streamable HTTP; yields its URL and stops it afterwards."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", MODULE, "--http", str(port)], cwd=REPO)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the HTTP test server did not start (exit code {process.poll()})")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)
