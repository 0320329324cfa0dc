"""Finding the documents under the paths a user adds: folders recursively (hidden files, hidden and ignored folders
skipped, links to folders below a root not followed, so no cycle), the file-type filter applied; a file that cannot
even be stat'ed (a link loop, a broken link, no permission) is found with its reason."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.core.documents.file_types import document_kind, is_ignored_dir
from app.services.documents.failures import reason_for_os_error


@dataclass(frozen=True)
class FoundFile:
    path: str  # absolute, links not resolved (the name the user knows)
    kind: str | None  # the parser kind; None when not a document type
    size: int = 0
    mtime_ns: int = 0
    reason: str | None = None  # why it cannot be read, found without opening it

    @property
    def stat(self) -> tuple[int, int]:
        return self.size, self.mtime_ns


def absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def scan(root: str, extensions: frozenset[str] | None = None) -> Iterator[FoundFile]:
    """The documents at ``root``: the file itself (named explicitly, so reported even when not a document type)
    or the documents below the folder (a link to a folder given as the root is followed), in path order; nothing
    when ``root`` is gone (its files are then dropped from the index)."""
    if not is_present(root):
        return
    if os.path.isdir(root):
        yield from _walk(root, extensions)
    else:
        found = _found(root, extensions)
        yield found if found.kind else FoundFile(root, None, reason=f"not a file type it reads ({Path(root).name})")


def is_present(path: str) -> bool:
    """``path`` exists (a link loop counts: it is reported); False when it is gone or a link to what is gone."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno != errno.ENOENT
    return True


def _walk(root: str, extensions: frozenset[str] | None) -> Iterator[FoundFile]:
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(name for name in dirs if not is_ignored_dir(name))
        for name in sorted(files):
            if name.startswith("."):
                continue
            found = _found(os.path.join(folder, name), extensions)
            if found.kind:
                yield found


def _found(path: str, extensions: frozenset[str] | None) -> FoundFile:
    kind = document_kind(Path(path), extensions)
    try:
        info = os.stat(path)
    except OSError as exc:
        return FoundFile(path, kind, reason=reason_for_os_error(exc))
    if not stat.S_ISREG(info.st_mode):
        return FoundFile(path, kind, reason="not a regular file")
    return FoundFile(path, kind, info.st_size, info.st_mtime_ns)
