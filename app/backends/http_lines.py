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
from typing import TYPE_CHECKING, TypeVar

from app.core.lazy_import import lazy_import
from app.core.safe_json import MAX_JSON_BYTES, JsonError
from app.core.user_files import human_limit

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


MAX_LINE_BYTES = MAX_JSON_BYTES + 1024  # one JSON document and an SSE field name ("data: ")
T = TypeVar("T")


async def iter_byte_lines(
    response: httpx.Response, max_line_bytes: int = MAX_LINE_BYTES
) -> AsyncGenerator[bytes, None]:
    """The response body's lines as bytes, split at ``\\n`` only (a trailing ``\\r`` is dropped).

    A line longer than ``max_line_bytes`` raises ``JsonError`` (a ``ValueError``) as soon as it is that long."""
    pending: list[bytes] = []  # the unfinished line's pieces: each chunk is searched once, not the whole line
    size = 0
    async for chunk in response.aiter_bytes():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending.append(chunk[start:end])
            _check(size + end - start, max_line_bytes)
            yield b"".join(pending).removesuffix(b"\r")
            pending, size, start = [], 0, end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
            size += len(chunk) - start
            _check(size, max_line_bytes)
    if pending:
        yield b"".join(pending).removesuffix(b"\r")


async def iter_lines(response: httpx.Response, max_line_bytes: int = MAX_LINE_BYTES) -> AsyncGenerator[str, None]:
    """``iter_byte_lines`` decoded as UTF-8 (a malformed byte becomes U+FFFD)."""
    async for line in iter_byte_lines(response, max_line_bytes):
        yield line.decode("utf-8", "replace")


def _check(size: int, limit: int) -> None:
    if size > limit:
        raise JsonError(f"the server sent a line larger than {human_limit(limit)}; it was not read")


def closing_lines(response: httpx.Response) -> contextlib.AbstractAsyncContextManager[AsyncIterator[str]]:
    """The response's lines (``iter_lines``), closed when the block ends however the loop ended: the response
    first.

    Leaving the loop early drops httpx's nested generators half-read; with no async-generator hooks (qasync's
    loop installs none) each would be finalized outside the loop ("async generator ignored GeneratorExit").
    Closing the response first leaves the inner ones nothing to await.
    """
    return _closing(response, iter_lines(response))


def closing_byte_lines(response: httpx.Response) -> contextlib.AbstractAsyncContextManager[AsyncIterator[bytes]]:
    """``closing_lines`` for ``iter_byte_lines``: lines as bytes, for a reader that decodes them itself."""
    return _closing(response, iter_byte_lines(response))


@contextlib.asynccontextmanager
async def _closing(response: httpx.Response, lines: AsyncGenerator[T, None]) -> AsyncIterator[AsyncIterator[T]]:
    try:
        yield lines
    finally:
        await response.aclose()
        await lines.aclose()
