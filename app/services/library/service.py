"""The workstation's model library: the last scan of the model folders, the Hugging Face cache and Ollama's
store, shared by every client (the Library page, the chat's picker, the API server's catalog).

Scans run off the loop and are coalesced: callers during a scan share it. The library scans again by itself when
a download finishes and when the model folders or the download folder change — once someone has asked for it: a
library nobody looks at costs nothing. Listeners hear ``LibraryScanning``, then ``LibraryChanged`` (or
``LibraryScanFailed``), on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.services.downloads.events import DownloadEvent, DownloadFinished
from app.services.events import EventHub
from app.services.library.events import LibraryChanged, LibraryEvent, LibraryScanFailed, LibraryScanning
from app.services.library.index import LibraryRoots, LibraryScan, ModelLibrary
from app.services.settings_changes import SettingsChanged

if TYPE_CHECKING:
    from app.services.downloads.service import DownloadService
    from app.services.settings_changes import SettingsOwner

log = logging.getLogger("app.services.library")
ROOT_SETTINGS = ("model_folders", "download_dir")
PROGRESS_EVERY_FILES = 25


class LibraryService:
    def __init__(self, workstation: SettingsOwner) -> None:
        self._workstation = workstation
        self._events: EventHub[LibraryEvent] = EventHub()
        self._scan: LibraryScan | None = None
        self._task: asyncio.Task[LibraryScan] | None = None
        self._again = False  # something changed during the scan in progress: one more pass after it
        self._library: ModelLibrary | None = None
        self._scanning_roots: LibraryRoots | None = None  # the roots of the pass in progress
        self._closed = False
        self._unfollow = [workstation.subscribe(self._settings_changed)]

    def subscribe(self, listener: Callable[[LibraryEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every ``LibraryEvent`` from now on; returns the function that unsubscribes."""
        return self._events.subscribe(listener)

    def snapshot(self) -> LibraryScan | None:
        """The last finished scan; None before the first."""
        return self._scan

    @property
    def scanning(self) -> bool:
        return self._task is not None and not self._task.done()

    def roots(self) -> LibraryRoots:
        """Where the library looks, from the current settings."""
        return LibraryRoots.from_settings(self._workstation.settings, self._workstation.paths)

    def library(self) -> ModelLibrary:
        """The index for the current settings' roots (kept while they stay the same). Building one reads the header
        cache file: call it off the loop."""
        return self._library_for(self.roots())

    def _library_for(self, roots: LibraryRoots) -> ModelLibrary:
        if self._library is None or self._library.roots != roots:
            self._library = ModelLibrary(roots, self._workstation.paths.library_cache)
        return self._library

    async def scan(self) -> LibraryScan:
        """Scan the library (off the loop) and return the result; a caller during a scan shares it (and one more
        pass follows when the roots have changed since that scan began)."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._scan_until_current())
        elif self._scanning_roots != self.roots():
            self._again = True
        return await asyncio.shield(self._task)

    async def delete(self, path: str | Path) -> list[Path]:
        """Delete a model's files from disk (``ModelLibrary.delete``: raises ``LibraryError`` when refused), then
        scan again; returns the paths removed."""
        loop = asyncio.get_running_loop()
        removed = await loop.run_in_executor(None, lambda: self.library().delete(path))
        await self._rescan_now()
        return removed

    def follow_downloads(self, downloads: DownloadService) -> None:
        """Scan again whenever one of ``downloads``' jobs finishes (the Workstation wires this)."""
        self._unfollow.append(downloads.subscribe(self._download_event))

    async def close(self) -> None:
        """Stop following; a scan in progress is let finish (it only reads files), its result dropped."""
        if self._closed:
            return
        self._closed = True
        while self._unfollow:
            self._unfollow.pop()()
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task], timeout=10)

    # --- internals ------------------------------------------------------------------------------------------
    async def _scan_until_current(self) -> LibraryScan:
        loop = asyncio.get_running_loop()

        def progress(count: int, _path: str) -> None:
            if count % PROGRESS_EVERY_FILES == 0:
                loop.call_soon_threadsafe(self._events.emit, LibraryScanning(count))

        try:
            while True:
                self._again = False
                self._scanning_roots = roots = self.roots()
                library = await loop.run_in_executor(None, self._library_for, roots)
                self._events.emit(LibraryScanning(0))
                scan = await loop.run_in_executor(None, library.scan, progress)
                if not self._again or self._closed:
                    break
        except Exception as exc:
            log.exception("The library scan failed")
            self._events.emit(LibraryScanFailed(f"The library could not be scanned: {exc}. The log has the details."))
            raise
        self._scan = scan
        self._events.emit(LibraryChanged(scan))
        return scan

    async def _rescan_now(self) -> None:
        self._again = self.scanning  # a scan in progress may have listed the files before the change
        await self.scan()

    def _rescan_soon(self) -> None:
        """The files or the roots changed: scan again if someone has looked at the library."""
        if self._closed or (self._scan is None and self._task is None) or not _loop_running():
            return
        if self.scanning:
            self._again = True
            return
        task = asyncio.ensure_future(self.scan())
        task.add_done_callback(_log_failure)

    def _settings_changed(self, event: SettingsChanged) -> None:
        if event.touches(*ROOT_SETTINGS):
            self._rescan_soon()

    def _download_event(self, event: DownloadEvent) -> None:
        if isinstance(event, DownloadFinished):
            self._rescan_soon()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _log_failure(task: asyncio.Future[LibraryScan]) -> None:
    if not task.cancelled():
        task.exception()  # logged by the scan itself; retrieved so asyncio does not warn again
