"""Bounded reads of files a user (or a server) hands the app: never a FIFO or a device, never unbounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from app.core.errors import InvalidInputError

MiB = 1024 * 1024


class UserFileError(InvalidInputError):
    """A file that is not a regular file, or larger than the limit for its kind."""


def human_limit(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit >= MiB else f"{limit // 1024} KiB" if limit >= 1024 else f"{limit} bytes"


def read_user_bytes(path: Path | str, *, max_bytes: int, what: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``.

    Opened non-blocking so a FIFO cannot hang the caller; anything but a regular file (after following links,
    so a link to ``/dev/zero`` is refused) is a ``UserFileError``; so is a file larger than the limit — checked
    on the size and again on what is read, since a file can grow. ``FileNotFoundError`` and other ``OSError``s
    pass through."""
    name = what or str(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe or a device)"
            raise UserFileError(f"{name} is {kind}; give the path of a regular file")
        if info.st_size > max_bytes:
            raise UserFileError(_too_large(name, info.st_size, max_bytes))
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise UserFileError(_too_large(name, None, max_bytes))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_user_text(path: Path | str, *, max_bytes: int, what: str | None = None, encoding: str = "utf-8") -> str:
    """``read_user_bytes`` decoded; undecodable bytes are a ``UserFileError`` naming the file."""
    data = read_user_bytes(path, max_bytes=max_bytes, what=what)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UserFileError(f"{what or path} is not {encoding} text (byte {exc.start})") from None


def _too_large(name: str, size: int | None, limit: int) -> str:
    got = f" ({size / MiB:.1f} MiB)" if size is not None else ""
    return f"{name} is larger than {human_limit(limit)}{got}, more than a file of this kind should be; check the path"


def open_user_file(path: Path | str, *, what: str | None = None) -> BinaryIO:
    """A regular file opened for binary reading, for a caller that streams it and bounds what it reads itself.

    As in ``read_user_bytes``, a FIFO, a device (or a link to one) or a folder is a ``UserFileError`` before
    anything is read (the open cannot hang on a FIFO); ``OSError``s pass through."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe or a device)"
            raise UserFileError(f"{what or path} is {kind}; give the path of a regular file")
        if hasattr(os, "O_NONBLOCK"):  # POSIX: reads of a regular file block as usual
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
