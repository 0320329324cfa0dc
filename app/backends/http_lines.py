"""Reading line-based HTTP streams (SSE, NDJSON) safely.

``httpx.Response.aiter_lines()`` splits like ``str.splitlines()``: also at U+0085, U+2028, U+2029 and
\\x1c–\\x1e, which JSON may carry unescaped inside a string. A model that emits one of those would cut a
JSON line in two. Here lines end only at ``\\n`` (with an optional ``\\r``), as SSE and NDJSON define them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

from app.core.lazy_import import lazy_import

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


async def iter_lines(response: httpx.Response) -> AsyncGenerator[str, None]:
    """The response body's lines, split at ``\\n`` only (a trailing ``\\r`` is dropped)."""
    pending = b""
    async for chunk in response.aiter_bytes():
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            yield raw.removesuffix(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.removesuffix(b"\r").decode("utf-8", "replace")


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
