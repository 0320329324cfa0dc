"""What the indexer reports while it works: one event per file, totals at the end; and how embedding the chunks
for vector search is going (``EmbeddingProgress``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STARTED, INDEXED, FAILED, UNCHANGED, REMOVED = "started", "indexed", "failed", "unchanged", "removed"


@dataclass(frozen=True)
class FileEvent:
    kind: str  # one of STARTED, INDEXED, FAILED, UNCHANGED, REMOVED
    path: str
    position: int = 0  # 1-based among the files found in this run (0 for a removed file)
    total: int = 0
    chunks: int = 0
    pages: int | None = None
    reason: str | None = None


@dataclass
class IndexTotals:
    found: int = 0
    indexed: int = 0
    failed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    cancelled: bool = False

    def count(self, event: FileEvent) -> None:
        if event.kind == INDEXED:
            self.indexed += 1
            self.chunks += event.chunks
        elif event.kind == FAILED:
            self.failed += 1
        elif event.kind == UNCHANGED:
            self.unchanged += 1
        elif event.kind == REMOVED:
            self.removed += 1


IndexListener = Callable[[FileEvent | IndexTotals], None]


# what background embedding is doing (``EmbeddingProgress.state``)
EMBED_OFF, EMBEDDING, EMBED_PAUSED, EMBED_DONE = "off", "embedding", "paused", "done"
EMBED_WAITING, EMBED_FAILED, EMBED_CANCELLED, EMBED_UNAVAILABLE = "waiting", "failed", "cancelled", "unavailable"


@dataclass(frozen=True)
class EmbeddingProgress:
    """Where embedding the chunks stands: ``embedded`` of ``total`` chunks have a vector from ``model``."""

    model: str | None = None  # the embedding model chosen (a library entry); None: keyword search only
    state: str = EMBED_OFF
    embedded: int = 0
    total: int = 0
    reason: str | None = None  # why it is waiting, failed or unavailable
    rate: float | None = None  # chunks per second in this run

    @property
    def running(self) -> bool:
        return self.state in (EMBEDDING, EMBED_PAUSED)
