"""Reads confined to one folder, for the built-in server's file tools.

A path is relative to the folder; it is resolved (``..`` and every symbolic link followed) and must still lie
inside the resolved folder, so ``../x``, an absolute path and a link that leads out are all refused. The file is
then opened without following a link at its last component, and what is read is capped."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import InvalidInputError

MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 500


class FolderAccessError(InvalidInputError):
    """A path outside the folder, or one that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class FileChunk:
    data: bytes
    offset: int
    size: int  # the whole file's

    @property
    def complete(self) -> bool:
        return self.offset + len(self.data) >= self.size


def resolve_inside(root: Path, relative: str) -> Path:
    """The real path of ``relative`` inside ``root``; a ``FolderAccessError`` when it is not inside."""
    if "\0" in relative:
        raise FolderAccessError("the path contains a NUL character")
    if Path(relative).is_absolute() or relative.startswith("~"):
        raise FolderAccessError(f"{relative!r} is not relative to the folder; give a path inside it, e.g. 'notes.txt'")
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / relative))
    if target != base and base not in target.parents:
        raise FolderAccessError(f"{relative!r} leads outside the folder; only files inside it can be read")
    return target


def list_folder(root: Path, relative: str = ".", max_entries: int = MAX_LIST_ENTRIES) -> list[str]:
    """One line per entry of a folder inside ``root``: its name, and ``/`` for a folder or the size of a file;
    a link leading outside is named as such. At most ``max_entries`` lines, then one saying how many more."""
    folder = resolve_inside(root, relative)
    try:
        names = sorted(os.listdir(folder), key=str.casefold)
    except NotADirectoryError:
        raise FolderAccessError(f"{relative!r} is a file, not a folder") from None
    except FileNotFoundError:
        raise FolderAccessError(f"there is no folder {relative!r}") from None
    except OSError as exc:
        raise FolderAccessError(f"cannot list {relative!r}: {exc.strerror or exc}") from None
    lines = [_entry_line(root, folder, name) for name in names[:max_entries]]
    if len(names) > max_entries:
        lines.append(f"… and {len(names) - max_entries} more entries")
    return lines


def read_chunk(root: Path, relative: str, offset: int = 0, max_bytes: int = MAX_READ_BYTES) -> FileChunk:
    """At most ``max_bytes`` (itself capped at ``MAX_READ_BYTES``) of a regular file inside ``root``."""
    if offset < 0:
        raise FolderAccessError("the offset cannot be negative")
    path = resolve_inside(root, relative)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FolderAccessError(f"there is no file {relative!r}") from None
    except OSError as exc:
        raise FolderAccessError(f"cannot read {relative!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise FolderAccessError(f"{relative!r} is {kind}")
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, max(0, min(max_bytes, MAX_READ_BYTES)))
        return FileChunk(data, offset, info.st_size)
    finally:
        os.close(fd)


def _entry_line(root: Path, folder: Path, name: str) -> str:
    path = folder / name
    if path.is_symlink():
        try:
            resolve_inside(root, str(path.relative_to(os.path.realpath(root))))
        except FolderAccessError:
            return f"{name}  (a link leading outside the folder: not readable)"
    try:
        info = path.stat()
    except OSError:
        return f"{name}  (unreadable)"
    if stat.S_ISDIR(info.st_mode):
        return f"{name}/"
    if stat.S_ISREG(info.st_mode):
        return f"{name}  ({info.st_size:,} bytes)"
    return f"{name}  (not a regular file)"
