"""The documents service the Workstation owns: the index (``store.py``) and one indexer, shared by the pages.

Everything that touches SQLite or the disk runs in a worker thread (``await``-able here), so a caller on the UI's
loop never blocks. Indexing runs one request at a time, in order; its events (``FileEvent``, ``IndexTotals``) and
``IndexProgress`` snapshots reach the subscribers on the loop's thread. ``close`` cancels the run in flight (what was
committed stays) and closes the database.

With an embedding model chosen (``set_embedding_model``; the Workstation follows the ``documents_embedding_model``
setting), chunks without a vector are embedded in the background (``backfill.py``, ``EmbeddingProgress`` events),
after each indexing run too, paused and cancelled with indexing; search is then hybrid (``hybrid.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from app.core.errors import AppError, InvalidInputError
from app.services.documents import events as ev
from app.services.documents import vectors
from app.services.documents import watch as watching
from app.services.documents.backfill import Backfill
from app.services.documents.embedder import Embedder, EmbedderWaiting, normalized
from app.services.documents.hybrid import hybrid_search
from app.services.documents.indexer import DocumentIndexer, IndexLimits
from app.services.documents.search import SearchHit
from app.services.documents.store import DEFAULT_COLLECTION, CollectionSummary, DocumentStore, FileRecord
from app.services.events import EventHub

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexProgress:
    """Where indexing stands: ``running`` while a run (or a queued one) is in progress."""

    running: bool = False
    paused: bool = False
    collection: str | None = None
    done: int = 0
    total: int = 0
    current: str | None = None  # the file being parsed
    queued: int = 0  # requests waiting behind this run
    cancelled: bool = False


DocumentsEvent = ev.FileEvent | ev.IndexTotals | IndexProgress | ev.EmbeddingProgress
KEYWORD, HYBRID, AUTO = "keyword", "hybrid", "auto"


class DocumentsService:
    def __init__(
        self,
        path: Path,
        limits: IndexLimits | None = None,
        embedder_for: Callable[[str], Embedder] | None = None,
        embedding_model: str | None = None,
    ) -> None:
        self.path = path
        self.limits = limits or IndexLimits()
        self._embedder_for = embedder_for  # an embedder for a model entry (the Workstation's runs on its host)
        self._embedder: Embedder | None = None
        self._embedding = ev.EmbeddingProgress(embedding_model or None)
        self._embed_task: asyncio.Task[None] | None = None
        self._embed_go = asyncio.Event()
        self._embed_go.set()
        self.vector_problem: str | None = None  # why vector search cannot run here (no sqlite-vec), if so
        self._store: DocumentStore | None = None
        self._indexer: DocumentIndexer | None = None
        self._open_lock: asyncio.Lock | None = None
        self._run_lock: asyncio.Lock | None = None
        self._events: EventHub[DocumentsEvent] = EventHub()
        self._progress = IndexProgress()
        self._runs: set[asyncio.Task[ev.IndexTotals | None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._pause_wanted = False

    # --- opening -------------------------------------------------------------------------------------------------
    async def open(self) -> DocumentStore:
        """The store, opened (once) in a worker thread."""
        if self._store is None:
            if self._open_lock is None:
                self._open_lock = asyncio.Lock()
            async with self._open_lock:
                if self._store is None:
                    self._store = await asyncio.to_thread(DocumentStore, self.path)
                    if self.watch_interval_s is not None and await asyncio.to_thread(watching.any_watched, self._store):
                        self.start_watching()  # folders watched in an earlier session: followed from now on
                    self.vector_problem = await asyncio.to_thread(self._store.read, vectors.load_extension)
                    self._embed_soon(restart=True)
        return self._store

    # --- news ----------------------------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[DocumentsEvent], None]) -> Callable[[], None]:
        """Every event from now on, on the loop's thread; returns the function that unsubscribes."""
        return self._events.subscribe(listener)

    def progress(self) -> IndexProgress:
        return self._progress

    # --- reading (off the loop's thread) -------------------------------------------------------------------------
    async def summaries(self) -> list[CollectionSummary]:
        store = await self.open()
        return await asyncio.to_thread(store.summaries)

    async def files(self, collection: str | None = None) -> list[FileRecord]:
        store = await self.open()
        return await asyncio.to_thread(store.files, collection)

    async def search(
        self, query: str, collection: str | None = None, top: int = 10, mode: str = "auto"
    ) -> list[SearchHit]:
        """The best ``top`` passages for ``query``. ``mode``: "keyword" (BM25 only), "hybrid" (keyword and vectors
        fused; needs an embedding model), "auto" (hybrid when the collection's vectors are there, else keyword)."""
        return (await self.search_with_mode(query, collection, top, mode))[0]

    async def search_with_mode(
        self, query: str, collection: str | None = None, top: int = 10, mode: str = AUTO
    ) -> tuple[list[SearchHit], str]:
        """``search``, and how it ranked: "hybrid", or "keyword" (asked for, or no vectors or embedder to use: a
        hybrid search whose query cannot be embedded now falls back to keywords, and the log says why)."""
        if mode not in (KEYWORD, HYBRID, AUTO):
            raise InvalidInputError(f"Unknown search mode {mode!r}: use keyword, hybrid or auto.")
        store = await self.open()
        embedder = self._current_embedder() if mode != KEYWORD else None
        if embedder is not None and self.vector_problem is None and await asyncio.to_thread(store.read, vectors.ready):
            try:
                vector = normalized(await embedder.embed([query]))[0]
            except AppError as exc:
                log.warning("searching by keywords only: the query could not be embedded (%s)", exc)
            else:
                hits = await asyncio.to_thread(store.read, lambda db: hybrid_search(db, query, vector, collection, top))
                return hits, HYBRID
        return await asyncio.to_thread(store.search, query, collection, top), KEYWORD

    async def remove_collection(self, name: str) -> int:
        store = await self.open()
        return await asyncio.to_thread(store.remove_collection, name)

    # --- indexing ------------------------------------------------------------------------------------------------
    def index(
        self, paths: Iterable[str], collection: str = DEFAULT_COLLECTION, extensions: frozenset[str] | None = None
    ) -> asyncio.Task[ev.IndexTotals | None]:
        """Index ``paths`` into ``collection`` (only files of ``extensions`` when given) after the runs already asked
        for; the task's result is the totals (None when the service closed first)."""
        self._loop = asyncio.get_running_loop()
        task = self._loop.create_task(self._run(list(paths), collection, extensions))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        self._set_progress(queued=max(0, len(self._runs) - 1), running=True)
        return task

    def pause(self) -> None:
        """Stop after the file in flight (or before the first one, when the run has not begun), and embedding
        after the batch in flight."""
        if self._progress.running:
            self._indexer_paused(True)
        if self._embedding.running:
            self._embed_go.clear()

    def resume(self) -> None:
        self._indexer_paused(False)
        self._embed_go.set()

    def _indexer_paused(self, paused: bool) -> None:
        self._pause_wanted = paused
        if self._indexer is not None:
            (self._indexer.pause if paused else self._indexer.resume)()
        self._set_progress(paused=paused)

    def cancel(self) -> None:
        """Stop the run in flight (the file being parsed is dropped, the rest committed stays) and those queued."""
        for task in list(self._runs):
            if task is not self._current:
                task.cancel()
        self._pause_wanted = False
        self._cancel_embedding()
        if self._indexer is not None and self._current is not None:
            indexer = self._indexer
            run = indexer.stop_soon()  # at once, here: a run started after this one is not cancelled
            try:  # killing the parse in flight waits for the child to go: not on the loop's thread
                asyncio.get_running_loop().run_in_executor(None, indexer.kill_parse, run)
            except RuntimeError:  # no loop running
                indexer.kill_parse(run)
        self._set_progress(paused=False)

    _current: asyncio.Task[ev.IndexTotals | None] | None = None

    async def _run(
        self, paths: list[str], collection: str, extensions: frozenset[str] | None = None
    ) -> ev.IndexTotals | None:
        if self._run_lock is None:
            self._run_lock = asyncio.Lock()
        async with self._run_lock:
            if self._closed:
                return None
            store = await self.open()
            if self._indexer is None:
                self._indexer = DocumentIndexer(store, self.limits, listener=self._from_thread)
                if self._pause_wanted:
                    self._indexer.pause()
            self._current = asyncio.current_task()
            paused = self._indexer.paused
            self._set_progress(
                running=True, paused=paused, collection=collection, done=0, total=0, current=None, cancelled=False
            )
            try:
                totals = await self._indexer.index(paths, collection, extensions)
            finally:
                self._current = None
                waiting = sum(1 for task in self._runs if not task.done()) - 1
                self._set_progress(running=waiting > 0, current=None, queued=max(0, waiting))
            if totals.cancelled:
                self._set_progress(cancelled=True, paused=False)
            else:
                self._embed_soon()
            return totals

    def _from_thread(self, event: ev.FileEvent | ev.IndexTotals) -> None:
        """The indexer's thread: hand the event to the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._arrived, event)

    def _arrived(self, event: ev.FileEvent | ev.IndexTotals) -> None:
        if isinstance(event, ev.FileEvent) and event.total:
            if event.kind == ev.STARTED:
                self._set_progress(done=event.position - 1, total=event.total, current=event.path)
            else:
                self._set_progress(done=event.position, total=event.total, current=None)
        self._events.emit(event)

    def _set_progress(self, **changes: object) -> None:
        self._progress = replace(self._progress, **changes)  # type: ignore[arg-type]
        self._events.emit(self._progress)

    # --- watched folders (watch.py) ------------------------------------------------------------------------------
    watch_interval_s: float | None = watching.WATCH_INTERVAL_S  # None: never poll (a one-shot CLI command)
    _watcher: watching.FolderWatcher | None = None

    async def watch(self, root: str, on: bool = True, collection: str | None = None) -> list[watching.WatchedRoot]:
        """Watch (or stop watching) the folder ``root`` added to ``collection`` (None: every collection it was added
        to): while watching, new and changed files below it are indexed and deleted ones dropped. The roots it
        applied to; empty when ``root`` was never added."""
        store = await self.open()
        roots = await asyncio.to_thread(watching.set_watched, store, root, on, collection)
        if on and roots:
            self.start_watching()
        return roots

    async def watched(self) -> list[watching.WatchedRoot]:
        store = await self.open()
        return await asyncio.to_thread(watching.watched, store)

    async def collection_roots(self, collection: str) -> list[tuple[str, bool]]:
        """The folders and files added to ``collection``, each with whether it is watched."""
        store = await self.open()
        return await asyncio.to_thread(watching.collection_roots, store, collection)

    async def watch_collection(self, collection: str, on: bool = True) -> list[watching.WatchedRoot]:
        """Watch (or stop watching) everything added to ``collection``."""
        store = await self.open()
        roots = await asyncio.to_thread(watching.set_collection_watched, store, collection, on)
        if on and roots:
            self.start_watching()
        return roots

    def start_watching(self) -> None:
        """Poll the watched folders from now on (every ``watch_interval_s``) until ``close``; idempotent. The poller
        ends by itself while no folder is watched."""
        if self._closed or self.watch_interval_s is None:
            return
        if self._watcher is None:
            self._watcher = watching.FolderWatcher(self, self.watch_interval_s)
        self._watcher.start()

    # --- embedding (backfill.py) ----------------------------------------------------------------------------------
    def embedding(self) -> ev.EmbeddingProgress:
        return self._embedding

    def set_embedding_model(self, entry: str | None) -> None:
        """Embed with ``entry`` from now on (None: keyword search only). Another model's vectors are dropped and
        the chunks embedded again in the background; the keyword index is not touched."""
        model = entry or None
        if model == self._embedding.model and self._embed_task is not None and not self._embed_task.done():
            return
        self._embedder = None
        self._set_embedding(ev.EmbeddingProgress(model))
        self._embed_soon(restart=True)

    def _embed_soon(self, restart: bool = False) -> None:
        """Start embedding what has no vector (the job in flight, if any, goes on, or is stopped first when
        ``restart``); with no model chosen, drop the vectors. Nothing before the store is open."""
        if self._closed or self._store is None:
            return
        running = self._embed_task is not None and not self._embed_task.done()
        if running and not restart:
            return
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a CLI verb): the next open on a loop embeds
            return
        previous = self._embed_task
        if previous is not None:
            previous.cancel()
        if self._embedding.model is not None:  # running from now on, for whoever looks before its first step
            self._set_embedding(replace(self._embedding, state=ev.EMBEDDING, reason=None))
        self._embed_task = self._loop.create_task(self._embed(previous))

    async def _embed(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        store, model = await self.open(), self._embedding.model
        if model is None:
            await asyncio.to_thread(store.write, lambda db: vectors.use_model(db, None))
            return
        if self.vector_problem is not None:
            self._set_embedding(ev.EmbeddingProgress(model, ev.EMBED_UNAVAILABLE, reason=self.vector_problem))
            return
        embedder = self._current_embedder()
        if embedder is None:
            return
        try:
            await Backfill(store, embedder, model, self._set_embedding).run(self._embed_go)
        except asyncio.CancelledError:
            self._set_embedding(replace(self._embedding, state=ev.EMBED_CANCELLED))
            raise
        except EmbedderWaiting as exc:
            self._set_embedding(replace(self._embedding, state=ev.EMBED_WAITING, reason=str(exc)))
        except (AppError, ValueError) as exc:
            log.warning("embedding the documents with %s failed: %s", model, exc)
            self._set_embedding(replace(self._embedding, state=ev.EMBED_FAILED, reason=str(exc)))

    def start_embedding(self) -> None:
        """Embed what has no vector yet (after a Cancel, say); a run in flight goes on."""
        self._embed_soon()

    def memory_freed(self) -> None:
        """A model was unloaded: embedding that waited for room (``EMBED_WAITING``) tries again."""
        if self._embedding.state == ev.EMBED_WAITING:
            self._embed_soon()

    def _current_embedder(self) -> Embedder | None:
        model = self._embedding.model
        if self._embedder is None and model is not None and self._embedder_for is not None:
            self._embedder = self._embedder_for(model)
        return self._embedder

    def _cancel_embedding(self) -> None:
        self._embed_go.set()
        if self._embed_task is not None and not self._embed_task.done():
            self._embed_task.cancel()

    def _set_embedding(self, progress: ev.EmbeddingProgress) -> None:
        if progress.model != self._embedding.model and progress.state != ev.EMBED_OFF:
            return  # a report from the run of a model no longer chosen
        self._embedding = progress
        self._events.emit(progress)

    # --- closing -------------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Cancel indexing (what was committed stays), wait for it to stop, close the database. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._watcher is not None:
            await self._watcher.stop()
        self.cancel()
        if self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)
        if self._embed_task is not None:
            await asyncio.gather(self._embed_task, return_exceptions=True)
        if self._indexer is not None:
            await asyncio.to_thread(self._indexer.close)
        if self._store is not None:
            await asyncio.to_thread(self._store.close)
