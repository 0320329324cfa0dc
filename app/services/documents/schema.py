"""The document index's SQLite schema.

``chunks.id`` is the chunk's stable id: the FTS5 table is an external-content index over ``chunks`` keyed by it
(kept in step by triggers), and another table (vectors, say) can refer to it the same way. A file's chunks go with
its row (``ON DELETE CASCADE``), and the delete trigger takes them out of the FTS index too.

Vectors (``vectors.py``) live in the same file, in a sqlite-vec table keyed by chunk id; ``connect`` loads the
extension on every connection (so a chunk's delete trigger can reach its vector) or says why it could not. Python
builds without loadable SQLite extensions (pyenv's default) use ``pysqlite3`` when it is installed."""

from __future__ import annotations

import importlib
import sqlite3
from types import ModuleType

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS roots (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    PRIMARY KEY (collection_id, path)
);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    content_hash TEXT,
    state TEXT NOT NULL CHECK (state IN ('pending', 'indexed', 'failed')),
    reason TEXT,
    chunk_count INTEGER NOT NULL DEFAULT 0,
    pages INTEGER,
    indexed_at REAL,
    UNIQUE (collection_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    page INTEGER,
    heading TEXT,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    text TEXT NOT NULL,
    UNIQUE (file_id, ordinal)
);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', 'bm25(1.0, 0.5)');
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, old.heading);
END;
"""


def driver() -> ModuleType:
    """The DB-API module that can load SQLite extensions: the standard library's when its build allows it, else
    ``pysqlite3`` when installed, else the standard library's (keyword search only)."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        return importlib.import_module("pysqlite3.dbapi2")
    except ImportError:
        return sqlite3


def connect(path: str) -> sqlite3.Connection:
    """A connection with the schema in place: WAL, foreign keys on, autocommit off only inside ``with``; the
    vector extension loaded where it can be (``vectors.prepare``)."""
    from app.services.documents import vectors

    connection: sqlite3.Connection = driver().connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA foreign_keys=ON")
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version < SCHEMA_VERSION:
        connection.executescript(f"BEGIN; {SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
    vectors.prepare(connection)
    return connection
