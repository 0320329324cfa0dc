"""The one JSON loader for everything the app reads: files, lines, server replies and the worker protocol.

``json.loads`` raises ``RecursionError`` (not ``ValueError``) on deeply nested input, and reads any size; here
both, and every decode error, become one ``JsonError`` (a ``ValueError``) that names what was being read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.errors import InvalidInputError
from app.core.user_files import human_limit, read_user_bytes

MiB = 1024 * 1024
MAX_JSON_BYTES = 16 * MiB  # one document; a caller that needs more passes max_bytes and says why


class JsonError(InvalidInputError):
    """Malformed, too deeply nested or too large JSON."""


def loads(data: str | bytes | bytearray, *, what: str = "JSON", max_bytes: int | None = MAX_JSON_BYTES) -> Any:
    """Parse ``data``; ``what`` names the source in the error (e.g. "the settings file")."""
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) and max_bytes is not None else None
    if max_bytes is not None and (size if size is not None else len(data)) > max_bytes:
        raise JsonError(f"{what} is larger than {human_limit(max_bytes)}; refusing to read it")
    try:
        return json.loads(data)
    except RecursionError:
        raise JsonError(f"{what} is nested too deeply to be valid JSON") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise JsonError(f"{what} is not valid JSON: {exc}") from None


def load_file(path: Path, *, what: str | None = None, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read and parse a JSON file; FIFOs and devices are refused, the size is bounded.

    ``FileNotFoundError`` passes through (callers treat a missing file as empty); other read errors are
    ``OSError``s as usual."""
    name = what or f"{path}"
    return loads(read_user_bytes(path, max_bytes=max_bytes, what=name), what=name, max_bytes=None)


def loads_object(data: str | bytes | bytearray, *, what: str = "JSON", max_bytes: int | None = MAX_JSON_BYTES) -> dict:
    """``loads``, and the result must be a JSON object."""
    value = loads(data, what=what, max_bytes=max_bytes)
    if not isinstance(value, dict):
        raise JsonError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value
