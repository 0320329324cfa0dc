"""Chunk vectors in the documents database: a sqlite-vec ``vec0`` table keyed by chunk id.

``chunk_vectors(chunk_id INTEGER PRIMARY KEY, collection_id INTEGER, embedding float[N])``: one vector per chunk
from one embedding model at a time, named with its dimension in ``vector_meta``. The table is made when the first
vectors of a model arrive (the dimension is the model's); choosing another model drops it.
A trigger deletes a chunk's vector with the chunk. The trigger needs the extension, so a connection that cannot
load it drops the trigger (keyword indexing goes on), and the next connection that can finds vectors without their
trigger and drops them: they may belong to deleted chunks whose ids were reused, and are embedded again.

Ranking is by cosine distance. The vectors are normalized, so vec0's default L2 metric gives the same order
(‖a − b‖² = 2 − 2·cos) with a scan about 30% faster than its cosine metric (which takes both norms per vector);
``nearest`` reports the cosine distance, ‖a − b‖² / 2.

Which chunks still need a vector is read from vec0's own rowid table (``chunk_vectors_rowids``, a plain table):
a lookup per chunk there is a B-tree probe, where asking vec0 itself would scan its vectors.

Every function takes the store's connection (``store.read``/``store.write``) and blocks: call it off the loop.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

TABLE = "chunk_vectors"
_META = "CREATE TABLE IF NOT EXISTS vector_meta (id INTEGER PRIMARY KEY CHECK (id = 1), model TEXT, dimension INTEGER)"
_TRIGGER = (
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_delete AFTER DELETE ON chunks BEGIN "
    f"DELETE FROM {TABLE} WHERE chunk_id = old.id; END"
)
_MISSING = (
    "SELECT k.id, k.text FROM chunks k WHERE k.id > ? AND NOT EXISTS "
    f"(SELECT 1 FROM {TABLE}_rowids r WHERE r.rowid = k.id) ORDER BY k.id LIMIT ?"
)


@dataclass(frozen=True)
class VectorMeta:
    model: str | None  # the embedding model the vectors are from (its library entry)
    dimension: int | None  # None until its first vectors are written


def load_extension(db: sqlite3.Connection) -> str | None:
    """Load sqlite-vec on ``db``; None when it is there, else why it is not (in words)."""
    if _loaded(db):
        return None
    if not hasattr(db, "enable_load_extension"):
        return (
            "This Python's sqlite3 module cannot load SQLite extensions (built without them; pyenv's default), "
            "and pysqlite3 is not installed: document search uses keywords only."
        )
    try:
        import sqlite_vec

        db.enable_load_extension(True)
        try:
            sqlite_vec.load(db)
        finally:
            db.enable_load_extension(False)
    except ImportError:
        return "sqlite-vec is not installed: document search uses keywords only."
    except sqlite3.Error as exc:
        return f"sqlite-vec could not be loaded ({exc}): document search uses keywords only."
    except Exception as exc:  # pysqlite3 raises its own sqlite3.Error class
        return f"sqlite-vec could not be loaded ({exc}): document search uses keywords only."
    return None


def prepare(db: sqlite3.Connection) -> str | None:
    """At connect: the meta table, the extension, and the trigger kept only where it can run; the problem, if any."""
    db.execute(_META)
    problem = load_extension(db)
    if problem is not None:
        db.execute(f"DROP TRIGGER IF EXISTS {TABLE}_delete")
        log.warning("%s", problem)
    elif _has_table(db) and not _has_trigger(db):
        log.warning("document vectors were kept without their delete trigger: dropping them to embed again")
        _drop(db)
    return problem


def meta(db: sqlite3.Connection) -> VectorMeta:
    row = db.execute("SELECT model, dimension FROM vector_meta WHERE id = 1").fetchone()
    return VectorMeta(None, None) if row is None else VectorMeta(row[0], row[1])


def use_model(db: sqlite3.Connection, model: str | None) -> bool:
    """Vectors are for ``model`` from now on (None: no vectors); True when that dropped another model's."""
    if meta(db).model == model:
        return False
    _drop(db)
    db.execute("INSERT OR REPLACE INTO vector_meta(id, model, dimension) VALUES (1, ?, NULL)", (model,))
    return True


def missing(db: sqlite3.Connection, after: int, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` chunks (id, text) past id ``after`` that have no vector, in id order."""
    if not _has_table(db):
        return db.execute("SELECT id, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?", (after, limit)).fetchall()
    return db.execute(_MISSING, (after, limit)).fetchall()


def counts(db: sqlite3.Connection) -> tuple[int, int]:
    """(chunks with a vector, chunks)."""
    chunks = int(db.execute("SELECT count(*) FROM chunks").fetchone()[0])
    if not _has_table(db):
        return 0, chunks
    return int(db.execute(f"SELECT count(*) FROM {TABLE}_rowids").fetchone()[0]), chunks


def put(db: sqlite3.Connection, model: str, chunks: Sequence[tuple[int, str]], vectors: np.ndarray) -> int:
    """Write ``vectors`` (normalized, one row per chunk) for ``model``, in the caller's transaction: only for
    chunks still there with the same text (a chunk re-indexed meanwhile waits for its own turn), and nothing when
    the model changed meanwhile. The number written."""
    current = meta(db)
    if current.model != model or not len(chunks):
        return 0
    dimension = int(vectors.shape[1])
    if current.dimension is None:
        _create(db, dimension)
    elif current.dimension != dimension:
        raise ValueError(f"{model} gave {dimension}-dimensional vectors; its earlier ones had {current.dimension}.")
    rows = []
    for (chunk_id, text), vector in zip(chunks, vectors, strict=True):
        found = db.execute(
            "SELECT f.collection_id FROM chunks k JOIN files f ON f.id = k.file_id WHERE k.id = ? AND k.text = ?",
            (chunk_id, text),
        ).fetchone()
        if found is not None:
            rows.append((chunk_id, found[0], np.asarray(vector, dtype=np.float32).tobytes()))
    db.executemany(f"INSERT OR REPLACE INTO {TABLE}(chunk_id, collection_id, embedding) VALUES (?, ?, ?)", rows)
    return len(rows)


def nearest(db: sqlite3.Connection, vector: np.ndarray, collection_id: int | None, k: int) -> list[tuple[int, float]]:
    """The ``k`` chunks nearest ``vector`` by cosine distance (chunk id, distance), nearest first."""
    if k <= 0 or not _has_table(db):
        return []
    blob = np.asarray(vector, dtype=np.float32).tobytes()
    if collection_id is None:
        query, params = f"SELECT chunk_id, distance FROM {TABLE} WHERE embedding MATCH ? AND k = ?", (blob, k)
    else:
        query = f"SELECT chunk_id, distance FROM {TABLE} WHERE embedding MATCH ? AND k = ? AND collection_id = ?"
        params = (blob, k, collection_id)  # type: ignore[assignment]
    return [(int(row[0]), float(row[1]) ** 2 / 2) for row in db.execute(query, params).fetchall()]


def ready(db: sqlite3.Connection) -> bool:
    """Whether vector search can run: the extension loaded and some vectors written."""
    return _loaded(db) and _has_table(db)


def _create(db: sqlite3.Connection, dimension: int) -> None:
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING vec0(chunk_id INTEGER PRIMARY KEY, "
        f"collection_id INTEGER, embedding float[{dimension}])"
    )
    db.execute(_TRIGGER)
    db.execute("UPDATE vector_meta SET dimension = ? WHERE id = 1", (dimension,))


def _drop(db: sqlite3.Connection) -> None:
    db.execute(f"DROP TRIGGER IF EXISTS {TABLE}_delete")
    if _has_table(db) and _loaded(db):  # without the extension it stays, triggerless: the next load drops it
        db.execute(f"DROP TABLE {TABLE}")
    db.execute("UPDATE vector_meta SET dimension = NULL WHERE id = 1")


def _loaded(db: sqlite3.Connection) -> bool:
    try:
        db.execute("SELECT vec_version()").fetchone()
    except Exception:  # sqlite3.OperationalError, from whichever driver
        return False
    return True


def _has_table(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is not None


def _has_trigger(db: sqlite3.Connection) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?"
    return db.execute(query, (f"{TABLE}_delete",)).fetchone() is not None
