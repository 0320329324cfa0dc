"""Background embedding: every chunk without a vector gets one from the chosen model, ``BATCH`` chunks at a time,
each batch committed with its vectors, so a kill loses at most the batch in flight and the next run starts where
this one stopped (the chunks still without a vector, in id order). Chunks indexed while it runs come after the
ones it has done (ids grow), so it reaches them too. It waits while ``go`` is clear (paused) and stops when
cancelled; everything touching SQLite runs in a worker thread."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from app.services.documents import events as ev
from app.services.documents import vectors
from app.services.documents.embedder import Embedder, embed_fitting, normalized
from app.services.documents.store import DocumentStore

BATCH = 8  # small: a search's query waits for the batch in flight in the embedding model's line


class Backfill:
    def __init__(
        self, store: DocumentStore, embedder: Embedder, model: str, report: Callable[[ev.EmbeddingProgress], None]
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.model = model
        self.report = report

    async def run(self, go: asyncio.Event) -> None:
        """Embed until no chunk is left without a vector (``report`` gets each step, on the loop's thread)."""
        store, model = self.store, self.model
        after, written, began = 0, 0, time.perf_counter()
        await asyncio.to_thread(store.write, functools.partial(vectors.use_model, model=model))
        embedded, total = await asyncio.to_thread(store.read, vectors.counts)
        self.report(ev.EmbeddingProgress(model, ev.EMBEDDING, embedded, total))
        while True:
            if not go.is_set():
                self.report(ev.EmbeddingProgress(model, ev.EMBED_PAUSED, embedded, total))
                await go.wait()
            batch = await asyncio.to_thread(store.read, functools.partial(vectors.missing, after=after, limit=BATCH))
            if not batch:
                break
            found = normalized(await embed_fitting(self.embedder, [text for _, text in batch]))
            put = functools.partial(vectors.put, model=model, chunks=batch, vectors=found)
            written += await asyncio.to_thread(store.write, put)
            after = batch[-1][0]
            embedded, total = await asyncio.to_thread(store.read, vectors.counts)
            rate = written / max(time.perf_counter() - began, 1e-6)
            self.report(ev.EmbeddingProgress(model, ev.EMBEDDING, embedded, total, rate=rate))
        done_rate = written / max(time.perf_counter() - began, 1e-6) if written else None
        self.report(ev.EmbeddingProgress(model, ev.EMBED_DONE, embedded, total, rate=done_rate))
