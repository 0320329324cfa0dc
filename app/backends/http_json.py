"""JSON from HTTP answers through the app's one safe loader (:mod:`app.core.safe_json`).

``httpx.Response.json()`` raises ``RecursionError`` on a deeply nested body and parses any size; these raise
``JsonError`` (a ``ValueError``) naming what was being read instead, with the 16 MiB bound per document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.core import safe_json

if TYPE_CHECKING:
    import httpx


def response_json(response: httpx.Response, *, what: str, max_bytes: int | None = safe_json.MAX_JSON_BYTES) -> Any:
    """The body of a read response, parsed; ``JsonError`` when it is not JSON, too deep or too large."""
    return safe_json.loads(response.content, what=what, max_bytes=max_bytes)


def response_json_or_none(response: httpx.Response, *, what: str = "the answer") -> Any:
    """The body's JSON, or None when it is not (valid, bounded) JSON: for error bodies read on a best-effort basis."""
    try:
        return response_json(response, what=what)
    except safe_json.JsonError:
        return None
