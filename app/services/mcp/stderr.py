"""A stdio server's stderr: read on the event loop from a pipe the app owns, each line sent to the app's log and
the last ones kept for the message that says why the server failed."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from typing import TextIO

log = logging.getLogger("app.services.mcp")

MAX_LINE_CHARS = 2000
TAIL_LINES = 40


class StderrPipe:
    """``writer`` is the file the server's stderr goes to: hand it to the spawn, then ``start()`` (which closes
    the app's copy of it). ``ended`` is set when every copy of the write end is closed: the server exited."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.ended = asyncio.Event()
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._reader_file = os.fdopen(read_fd, "rb", buffering=0)
        self._transport: asyncio.ReadTransport | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Close the app's copy of the write end and read what the server writes."""
        self.writer.close()
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._reader_file
        )
        self._task = asyncio.create_task(self._read(reader), name=f"mcp stderr {self.server}")

    def last_line(self) -> str:
        return next((line for line in reversed(self.tail) if line.strip()), "")

    async def close(self) -> None:
        """Stop reading (what is left in the pipe after a short wait is dropped) and close the pipe."""
        self.writer.close()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), 1.0)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._transport is not None:
            self._transport.close()
        else:
            self._reader_file.close()
        self.ended.set()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        pending = b""
        try:
            while chunk := await reader.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._line(line)
                if len(pending) > MAX_LINE_CHARS:  # a line without an end: keep its start
                    self._line(pending)
                    pending = b""
            if pending:
                self._line(pending)
        finally:
            self.ended.set()

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")[:MAX_LINE_CHARS]
        self.tail.append(text)
        log.info("MCP server %s: %s", self.server, text)
