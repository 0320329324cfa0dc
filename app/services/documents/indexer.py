"""The document indexer: adds files and folders to a collection, file by file, off any UI thread.

Per file: unchanged (same size and mtime as recorded, or the same content hash) → never read again; otherwise its
text is extracted by the parse worker (a child process with a time and memory bound), chunked, and committed with
its row in one transaction. A file that cannot be read is recorded with its reason and the others go on. A file
under an added folder that is gone is dropped. A failed file is not retried until it changes.

Control (thread-safe): :meth:`pause` (after the file in flight), :meth:`resume`, :meth:`cancel` (kills the parse in
flight at once; nothing of that file is committed). A run after a kill or a cancel resumes: what was committed is
unchanged and skipped. No folder watching: a later :meth:`rescan` finds what changed."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from app.core.documents.chunking import chunk_pages
from app.services.documents import events as ev
from app.services.documents.failures import reason_for_os_error, too_large
from app.services.documents.parse_client import ParseWorker
from app.services.documents.scan import FoundFile, absolute, scan
from app.services.documents.store import DEFAULT_COLLECTION, FAILED, INDEXED, DocumentStore

log = logging.getLogger(__name__)
HASH_BLOCK = 1 << 20


@dataclass(frozen=True)
class IndexLimits:
    max_file_bytes: int = 200 * 10**6
    parse_timeout_s: float = 120.0
    parser_memory_bytes: int = 3 * 2**30


class DocumentIndexer:
    def __init__(
        self, store: DocumentStore, limits: IndexLimits | None = None, listener: ev.IndexListener | None = None
    ) -> None:
        self.store = store
        self.limits = limits or IndexLimits()
        self._listeners: list[ev.IndexListener] = [listener] if listener else []
        self._worker = ParseWorker(self.limits.parse_timeout_s, self.limits.parser_memory_bytes)
        self._running = threading.Event()
        self._running.set()
        self._cancelled = threading.Event()
        self._run = 0  # which call of ``add`` is running (a late kill must not reach the next one)

    def subscribe(self, listener: ev.IndexListener) -> None:
        self._listeners.append(listener)

    # --- control (any thread) ------------------------------------------------------------------------------------
    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cancel(self) -> None:
        self.kill_parse(self.stop_soon())

    def stop_soon(self) -> int:
        """Stop the run in flight after its file (never blocks); returns the run, for :meth:`kill_parse`."""
        self._cancelled.set()
        self._running.set()
        return self._run

    def kill_parse(self, run: int) -> None:
        """Kill the parse in flight if ``run`` is still the one running (blocks until the child is gone)."""
        if run == self._run:
            self._worker.kill()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def close(self) -> None:
        self._worker.kill()

    # --- work ----------------------------------------------------------------------------------------------------
    async def index(
        self, paths: Iterable[str], collection: str = DEFAULT_COLLECTION, extensions: frozenset[str] | None = None
    ) -> ev.IndexTotals:
        """:meth:`add` in a worker thread (begun here: a cancel from now on reaches this run)."""
        self._begin()
        return await asyncio.to_thread(self._add, list(paths), collection, extensions)

    def rescan(self, collection: str = DEFAULT_COLLECTION) -> ev.IndexTotals:
        """Everything added to ``collection`` again: new and changed files indexed, deleted ones dropped."""
        return self.add(self.store.roots(self.store.collection_id(collection)), collection)

    def add(
        self, paths: Iterable[str], collection: str = DEFAULT_COLLECTION, extensions: frozenset[str] | None = None
    ) -> ev.IndexTotals:
        """Index ``paths`` (files and folders) into ``collection``; blocking, so call it off the UI thread."""
        self._begin()
        return self._add(paths, collection, extensions)

    def _begin(self) -> None:
        self._run += 1
        self._cancelled.clear()

    def _add(self, paths: Iterable[str], collection: str, extensions: frozenset[str] | None) -> ev.IndexTotals:
        collection_id = self.store.collection_id(collection)
        roots = [absolute(path) for path in paths]
        found = [item for root in roots for item in scan(root, extensions)]
        totals = ev.IndexTotals(found=len(found))
        for root in roots:
            self.store.add_root(collection_id, root)
        self._drop_deleted(collection_id, roots, {item.path for item in found}, totals)
        for position, item in enumerate(found, 1):
            if not self._wait_while_paused():
                break
            self._index_one(collection_id, item, position, len(found), totals)
        totals.cancelled = self._cancelled.is_set()
        self._emit(totals)
        return totals

    def _wait_while_paused(self) -> bool:
        self._running.wait()
        return not self._cancelled.is_set()

    def _drop_deleted(self, collection_id: int, roots: list[str], present: set[str], totals: ev.IndexTotals) -> None:
        gone = {r.id: r.path for root in roots for r in self.store.files_under(collection_id, root)}
        gone = {file_id: path for file_id, path in gone.items() if path not in present}
        self.store.remove_files(list(gone))
        for path in gone.values():
            self._report(ev.FileEvent(ev.REMOVED, path), totals)

    def _index_one(self, collection_id: int, item: FoundFile, position: int, total: int, t: ev.IndexTotals) -> None:
        record = self.store.file_record(collection_id, item.path)
        if record is not None and record.state in (INDEXED, FAILED) and (record.size, record.mtime_ns) == item.stat:
            self._report(ev.FileEvent(ev.UNCHANGED, item.path, position, total, record.chunk_count, record.pages), t)
            return
        reason = item.reason or self._precheck(item)
        content_hash = None
        if reason is None:
            content_hash, reason = _hash(item.path)
        if reason is None and record is not None and record.state == INDEXED and record.content_hash == content_hash:
            self.store.touch(record.id, item.stat)
            self._report(ev.FileEvent(ev.UNCHANGED, item.path, position, total, record.chunk_count, record.pages), t)
            return
        if reason is None:
            self.store.mark_pending(collection_id, item.path, *item.stat)
            self._emit(ev.FileEvent(ev.STARTED, item.path, position, total))
            reason = self._parse_and_commit(collection_id, item, content_hash or "", position, total, t)
        if reason is not None and not self._cancelled.is_set():
            self.store.commit_failed(collection_id, item.path, item.stat, reason, content_hash)
            self._report(ev.FileEvent(ev.FAILED, item.path, position, total, reason=reason), t)

    def _parse_and_commit(
        self, collection_id: int, item: FoundFile, content_hash: str, position: int, total: int, t: ev.IndexTotals
    ) -> str | None:
        """Parse, chunk and commit the file; the reason when it failed (None when done or cancelled)."""
        outcome = self._worker.parse(Path(item.path), item.kind or "")
        if self._cancelled.is_set() or outcome.pages is None:
            return None if self._cancelled.is_set() else outcome.reason
        chunks = chunk_pages(outcome.pages)
        paged = any(page.page is not None for page in outcome.pages)
        pages = len(outcome.pages) if paged else None
        self.store.commit_indexed(collection_id, item.path, item.stat, content_hash, pages, chunks)
        self._report(ev.FileEvent(ev.INDEXED, item.path, position, total, len(chunks), pages), t)
        return None

    def _precheck(self, item: FoundFile) -> str | None:
        if item.size == 0:
            return "empty file"
        if item.size > self.limits.max_file_bytes:
            return too_large(item.size, self.limits.max_file_bytes)
        return None

    def _report(self, event: ev.FileEvent, totals: ev.IndexTotals) -> None:
        totals.count(event)
        self._emit(event)

    def _emit(self, event: ev.FileEvent | ev.IndexTotals) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a listener's bug must not stop the indexing
                log.exception("document index listener failed")


def _hash(path: str) -> tuple[str | None, str | None]:
    """(blake2b hex digest, None), or (None, the reason it cannot be read)."""
    digest = hashlib.blake2b(digest_size=32)
    try:
        with open(path, "rb") as stream:
            while block := stream.read(HASH_BLOCK):
                digest.update(block)
    except OSError as exc:
        return None, reason_for_os_error(exc)
    return digest.hexdigest(), None
