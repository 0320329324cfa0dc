"""Why a file could not be indexed, in words a person can act on."""

from __future__ import annotations

import errno

from app.core.units import format_bytes


class UnreadableFile(Exception):
    """A file the index cannot read; ``str()`` is the reason shown to the user."""


def reason_for_os_error(exc: OSError) -> str:
    """The reason for an ``OSError`` met while reading a file."""
    if isinstance(exc, PermissionError):
        return "permission denied"
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if isinstance(exc, FileNotFoundError):
        return "file not found (deleted, or a broken link)"
    if isinstance(exc, IsADirectoryError):
        return "a folder, not a file"
    return f"could not read it: {exc.strerror or exc}"


def too_large(size: int, limit: int) -> str:
    return f"too large ({format_bytes(size)}; the limit is {format_bytes(limit)})"
