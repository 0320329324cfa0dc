"""What the library service tells its listeners (on the services' loop)."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.library.index import LibraryScan


@dataclass(frozen=True)
class LibraryScanning:
    """A scan is under way; ``files_seen`` so far (0 as it begins, then every few dozen files)."""

    files_seen: int


@dataclass(frozen=True)
class LibraryChanged:
    """A scan finished: ``scan`` is the library now (``LibraryService.snapshot()`` returns it too)."""

    scan: LibraryScan


@dataclass(frozen=True)
class LibraryScanFailed:
    """A scan broke off (a bug, not a file it found: those are entries with an error); the last scan stays."""

    message: str


LibraryEvent = LibraryScanning | LibraryChanged | LibraryScanFailed
