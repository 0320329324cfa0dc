"""The document index in SQLite (``documents.sqlite3`` in the app's data folder, owner-only, WAL).

Each file's row and all its chunks change in one transaction, so a kill at any moment loses at most the file in
flight. Thread-safe: one connection behind a lock (the indexer's thread writes, searches read)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from app.core.documents.chunking import Chunk
from app.services.documents import schema
from app.services.documents.search import SearchHit, search_chunks
from app.services.paths import app_paths, private_database

T = TypeVar("T")

DEFAULT_COLLECTION = "default"
INDEXED, FAILED, PENDING = "indexed", "failed", "pending"


def documents_db() -> Path:
    return app_paths().data_dir / "documents.sqlite3"


@dataclass(frozen=True)
class FileRecord:
    id: int
    collection: str
    path: str
    size: int
    mtime_ns: int
    content_hash: str | None
    state: str
    reason: str | None
    chunk_count: int
    pages: int | None


@dataclass(frozen=True)
class CollectionSummary:
    name: str
    files: int
    indexed: int
    failed: int
    pending: int
    chunks: int


_FILE_COLUMNS = "f.id, c.name, f.path, f.size, f.mtime_ns, f.content_hash, f.state, f.reason, f.chunk_count, f.pages"


class DocumentStore:
    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            app_paths().ensure()  # the app's folders, owner-only
        self.path = path or documents_db()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        private_database(self.path)
        self._db = schema.connect(str(self.path))
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """``query(connection)`` under the store's lock: how other modules (vectors, chat context) read the index."""
        with self._lock:
            return query(self._db)

    def write(self, change: Callable[[sqlite3.Connection], T]) -> T:
        """``change(connection)`` in one transaction (all of it or none)."""
        with self._transaction() as db:
            return change(db)

    # --- collections and roots -----------------------------------------------------------------------------------
    def collection_id(self, name: str) -> int:
        """The collection's id, created if new."""
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO collections(name) VALUES (?)", (name,))
            return int(db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()[0])

    def find_collection(self, name: str) -> int | None:
        with self._lock:
            row = self._db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def add_root(self, collection_id: int, path: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO roots(collection_id, path) VALUES (?, ?)", (collection_id, path))

    def roots(self, collection_id: int) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT path FROM roots WHERE collection_id = ? ORDER BY path", (collection_id,))
            return [row[0] for row in rows]

    def remove_collection(self, name: str) -> int:
        """Drop a collection with its files and chunks; the number of files it had."""
        with self._transaction() as db:
            row = db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
            if row is None:
                return 0
            count = int(db.execute("SELECT count(*) FROM files WHERE collection_id = ?", row).fetchone()[0])
            db.execute("DELETE FROM chunks WHERE file_id IN (SELECT id FROM files WHERE collection_id = ?)", row)
            db.execute("DELETE FROM collections WHERE id = ?", row)
            return count

    # --- files ---------------------------------------------------------------------------------------------------
    def file_record(self, collection_id: int, path: str) -> FileRecord | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_FILE_COLUMNS} FROM files f JOIN collections c ON c.id = f.collection_id "
                "WHERE f.collection_id = ? AND f.path = ?",
                (collection_id, path),
            ).fetchone()
        return None if row is None else FileRecord(*row)

    def files(self, collection: str | None = None) -> list[FileRecord]:
        where, params = ("WHERE c.name = ?", (collection,)) if collection is not None else ("", ())
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_FILE_COLUMNS} FROM files f JOIN collections c ON c.id = f.collection_id {where} "
                "ORDER BY c.name, f.path",
                params,
            ).fetchall()
        return [FileRecord(*row) for row in rows]

    def files_under(self, collection_id: int, root: str) -> list[FileRecord]:
        """The collection's files at ``root`` or below it."""
        return [r for r in self.files(self._collection_name(collection_id)) if _is_under(r.path, root)]

    def mark_pending(self, collection_id: int, path: str, size: int, mtime_ns: int) -> None:
        """Record a new file found by a scan (a file already known keeps its row, chunks and state)."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO files(collection_id, path, size, mtime_ns, state) VALUES (?, ?, ?, ?, ?)",
                (collection_id, path, size, mtime_ns, PENDING),
            )

    def commit_indexed(
        self,
        collection_id: int,
        path: str,
        stat: tuple[int, int],
        content_hash: str,
        pages: int | None,
        chunks: Sequence[Chunk],
    ) -> None:
        """The file's row and all its chunks, replacing the old ones, in one transaction."""
        with self._transaction() as db:
            file_id = self._upsert(db, collection_id, path, stat, content_hash, INDEXED, None, len(chunks), pages)
            db.executemany(
                'INSERT INTO chunks(file_id, ordinal, page, heading, start, "end", text) VALUES (?, ?, ?, ?, ?, ?, ?)',
                [(file_id, n, c.page, c.heading, c.start, c.end, c.text) for n, c in enumerate(chunks)],
            )

    def commit_failed(
        self, collection_id: int, path: str, stat: tuple[int, int], reason: str, content_hash: str | None = None
    ) -> None:
        """The file failed: its reason recorded, any chunks from an earlier version dropped."""
        with self._transaction() as db:
            self._upsert(db, collection_id, path, stat, content_hash, FAILED, reason, 0, None)

    def touch(self, file_id: int, stat: tuple[int, int]) -> None:
        """Same content under a new size/mtime (a copy, a ``touch``): remember them, keep the chunks."""
        with self._transaction() as db:
            db.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?", (*stat, file_id))

    def remove_files(self, file_ids: Sequence[int]) -> None:
        with self._transaction() as db:
            for file_id in file_ids:
                db.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))
                db.execute("DELETE FROM files WHERE id = ?", (file_id,))

    def remove_path(self, path: str, collection: str | None = None) -> int:
        """Drop the file ``path`` or every file under the folder ``path`` (and the folder as a root), in one
        collection or all; the number of files dropped."""
        records = [r for r in self.files(collection) if _is_under(r.path, path)]
        self.remove_files([r.id for r in records])
        with self._transaction() as db:
            db.execute("DELETE FROM roots WHERE path = ? OR path LIKE ? ESCAPE '\\'", (path, _like_prefix(path)))
        return len(records)

    def _upsert(
        self,
        db: sqlite3.Connection,
        collection_id: int,
        path: str,
        stat: tuple[int, int],
        content_hash: str | None,
        state: str,
        reason: str | None,
        chunk_count: int,
        pages: int | None,
    ) -> int:
        row = db.execute("SELECT id FROM files WHERE collection_id = ? AND path = ?", (collection_id, path)).fetchone()
        values = (*stat, content_hash, state, reason, chunk_count, pages, time.time())
        if row is None:
            cursor = db.execute(
                "INSERT INTO files(collection_id, path, size, mtime_ns, content_hash, state, reason, chunk_count, "
                "pages, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (collection_id, path, *values),
            )
            return int(cursor.lastrowid or 0)
        db.execute("DELETE FROM chunks WHERE file_id = ?", row)
        db.execute(
            "UPDATE files SET size = ?, mtime_ns = ?, content_hash = ?, state = ?, reason = ?, chunk_count = ?, "
            "pages = ?, indexed_at = ? WHERE id = ?",
            (*values, row[0]),
        )
        return int(row[0])

    def _collection_name(self, collection_id: int) -> str:
        with self._lock:
            return str(self._db.execute("SELECT name FROM collections WHERE id = ?", (collection_id,)).fetchone()[0])

    # --- reading -------------------------------------------------------------------------------------------------
    def summaries(self) -> list[CollectionSummary]:
        with self._lock:
            rows = self._db.execute(
                "SELECT c.name, count(f.id), count(f.id) FILTER (WHERE f.state = 'indexed'), "
                "count(f.id) FILTER (WHERE f.state = 'failed'), count(f.id) FILTER (WHERE f.state = 'pending'), "
                "coalesce(sum(f.chunk_count), 0) FROM collections c LEFT JOIN files f ON f.collection_id = c.id "
                "GROUP BY c.id ORDER BY c.name"
            ).fetchall()
        return [CollectionSummary(*row) for row in rows]

    def chunk_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def search(self, query: str, collection: str | None = None, top: int = 10) -> list[SearchHit]:
        """The ``top`` chunks that best match ``query`` (BM25; see search.py)."""
        with self._lock:
            return search_chunks(self._db, query, collection, top)


def _is_under(path: str, root: str) -> bool:
    root = root.rstrip("/\\") or root
    return path == root or path.startswith(root.rstrip("/\\") + "/") or path.startswith(root.rstrip("/\\") + "\\")


def _like_prefix(path: str) -> str:
    escaped = path.rstrip("/\\").replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"
