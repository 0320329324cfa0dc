"""Reading line-based HTTP streams (SSE, NDJSON) safely.

``httpx.Response.aiter_lines()`` splits like ``str.splitlines()``: also at U+0085, U+2028, U+2029 and
\\x1c–\\x1e, which JSON may carry unescaped inside a string. A model that emits one of those would cut a
JSON line in two. Here lines end only at ``\\n`` (with an optional ``\\r``), as SSE and NDJSON define them.
A line is bounded like any JSON document the app reads (:mod:`app.core.safe_json`): a server that never sends a
newline cannot make the app hold an ever-growing line.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

from app.core.lazy_import import lazy_import
from app.core.safe_json import MAX_JSON_BYTES, JsonError

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


MAX_LINE_BYTES = MAX_JSON_BYTES + 1024  # one JSON document and an SSE field name ("data: ")


async def iter_lines(response: httpx.Response, max_line_bytes: int = MAX_LINE_BYTES) -> AsyncGenerator[str, None]:
    """The response body's lines, split at ``\\n`` only (a trailing ``\\r`` is dropped).

    A line longer than ``max_line_bytes`` raises ``JsonError`` (a ``ValueError``) as soon as it is that long."""
    pending: list[bytes] = []  # the unfinished line's pieces: each chunk is searched once, not the whole line
    size = 0
    async for chunk in response.aiter_bytes():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending.append(chunk[start:end])
            _check(size + end - start, max_line_bytes)
            yield _text(pending)
            pending, size, start = [], 0, end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
            size += len(chunk) - start
            _check(size, max_line_bytes)
    if pending:
        yield _text(pending)


def _check(size: int, limit: int) -> None:
    if size > limit:
        raise JsonError(f"the server sent a line larger than {limit // (1024 * 1024)} MiB; it was not read")


def _text(parts: list[bytes]) -> str:
    return b"".join(parts).removesuffix(b"\r").decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def closing_lines(response: httpx.Response) -> AsyncIterator[AsyncIterator[str]]:
    """The response's lines, closed when the block ends however the loop ended: the response first.

    Leaving the loop early drops httpx's nested generators half-read; with no async-generator hooks (qasync's
    loop installs none) each would be finalized outside the loop ("async generator ignored GeneratorExit").
    Closing the response first leaves the inner ones nothing to await.
    """
    lines = iter_lines(response)
    try:
        yield lines
    finally:
        await response.aclose()
        await lines.aclose()
