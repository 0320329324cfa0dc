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

Searches read an in-memory copy of the vectors (``_Cache``): a float32 matrix, one row per chunk, with each row's
chunk id, collection id and squared norm, built on a connection's first search (in the search's own worker thread,
under the store's lock: 1.6–2.3 s at 100,000 × 384), then ranked by one matrix-vector product and
``np.argpartition``: ~11 ms at 100,000 × 384 where vec0's scan takes ~90 ms (figures in hybrid.py). The order is
vec0's L2 order (ranked by 2·a·b − ‖b‖², the same order as ‖a − b‖² in exact arithmetic) and the distance is the
same ‖a − b‖² / 2. It costs 4 bytes per dimension per vector: 100,000 × 384 × 4 B ≈ 154 MB. Above
``CACHE_LIMIT`` vectors (250,000: ~384 MB at 384 dimensions) there is no copy and vec0 scans instead.

The copy is rebuilt at the next search after any change, found out cheaply at each search: ``_generation`` is
bumped by every write here (``put``, and a model change or a drop through ``_create``/``_drop``); vec0's row count
catches the delete trigger (between two bumps the trigger can only remove rows, so the same set has the same
count); ``PRAGMA data_version`` catches commits from other connections (it does not move for the connection's own
writes, hence the other two). Inside a transaction the search asks vec0 and leaves the copy alone, so the copy only
ever holds committed rows (a rolled-back write cannot leave it stale). Not seen: rows written into ``chunk_vectors``
on the same connection by anything but this module and the trigger (there is no such writer).

While the vectors keep changing (a backfill commits a batch every few seconds) a copy is not read again until
``REREAD_GAP`` (10) times its last read's length has passed since that read — vec0 answers meanwhile, with the same
ranking — so reading takes at most about a tenth of the time, and a search during a backfill mostly costs what
vec0's scan does.

Every function takes the store's connection (``store.read``/``store.write``) and blocks: call it off the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
import time
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


CACHE_LIMIT = 250_000  # the most vectors held in memory for search; above it vec0 scans (0: always vec0)
_CACHED_CONNECTIONS = 4  # copies kept at once (one per open store); the oldest goes first
_READ_BATCH = 4096  # rows fetched at a time while reading the copy
REREAD_GAP = 10.0  # a copy that took t seconds to read is not read again within REREAD_GAP × t of its read
_clock = time.monotonic
_generation = 0  # bumped (``_changed``) by every write of vectors made here, on any connection
_caches: dict[int, _Cache] = {}  # by id(connection); each holds its connection, so the id is not reused meanwhile
_caches_lock = threading.Lock()


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
    _changed()
    db.executemany(f"INSERT OR REPLACE INTO {TABLE}(chunk_id, collection_id, embedding) VALUES (?, ?, ?)", rows)
    return len(rows)


def nearest(db: sqlite3.Connection, vector: np.ndarray, collection_id: int | None, k: int) -> list[tuple[int, float]]:
    """The ``k`` chunks nearest ``vector`` by cosine distance (chunk id, distance), nearest first."""
    if k <= 0 or not _has_table(db):
        return []
    cache = _cache(db)
    if cache is not None:
        return cache.nearest(vector, collection_id, k)
    return _scan(db, vector, collection_id, k)


def _scan(db: sqlite3.Connection, vector: np.ndarray, collection_id: int | None, k: int) -> list[tuple[int, float]]:
    """``nearest`` by vec0's scan of every vector."""
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


@dataclass(frozen=True)
class _Cache:
    """One connection's vectors in memory, as of ``version``: row i is chunk ``ids[i]`` in ``collections[i]``."""

    db: sqlite3.Connection
    version: tuple[int, int, int]  # (_generation, PRAGMA data_version, row count) when read
    ids: np.ndarray  # int64
    collections: np.ndarray  # int64
    matrix: np.ndarray  # float32, (rows, dimension)
    norms: np.ndarray  # float32, each row's squared norm
    reread_from: float = 0.0  # _clock() time before which, once out of date, it is not read again (vec0 answers)

    def nearest(self, vector: np.ndarray, collection_id: int | None, k: int) -> list[tuple[int, float]]:
        """``nearest``'s answer: vec0's order (least ‖a − b‖² first; ties by chunk id) and its distance."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        # numpy's own loop, not BLAS: as fast on one core, and OpenBLAS's threads stall when the cores are busy
        # (p95 22 ms against 12 at 100,000 × 384 on this machine at load ~2)
        product = np.einsum("ij,j->i", self.matrix, query, optimize=False)
        score = 2 * product - self.norms  # larger is nearer: ‖a − b‖² = ‖a‖² − score
        if collection_id is not None:
            inside = self.collections == collection_id
            score = np.where(inside, score, -np.inf)
            k = min(k, int(np.count_nonzero(inside)))
        if k <= 0:
            return []
        top = np.argpartition(-score, k - 1)[:k] if k < len(score) else np.arange(len(score))
        top = top[np.lexsort((self.ids[top], -score[top]))]
        squared = float(np.dot(query, query))
        return [(int(self.ids[i]), max(squared - float(score[i]), 0.0) / 2) for i in top]


def _changed() -> None:
    """Vectors written or dropped on some connection: every in-memory copy is out of date."""
    global _generation
    with _caches_lock:
        _generation += 1


def _cache(db: sqlite3.Connection) -> _Cache | None:
    """``db``'s in-memory vectors, read again when they changed since; None where vec0 is to scan instead (inside a
    transaction, more than ``CACHE_LIMIT`` vectors, or changed again too soon after the last read)."""
    if db.in_transaction:
        return None
    count = int(db.execute(f"SELECT count(*) FROM {TABLE}_rowids").fetchone()[0])
    version = (_generation, int(db.execute("PRAGMA data_version").fetchone()[0]), count)
    with _caches_lock:
        _prune()
        found = _caches.get(id(db))
        if found is not None and found.db is db and count <= CACHE_LIMIT:
            if found.version == version:
                return found
            if _clock() < found.reread_from:  # changing while it is read (a backfill): vec0 for now
                return None
        _caches.pop(id(db), None)  # a stale copy goes before the new one is read: never two at once
    found = None
    if count > CACHE_LIMIT:
        return None
    started = _clock()
    fresh = _read(db, version, count)
    finished = _clock()
    fresh = dataclasses.replace(fresh, reread_from=finished + REREAD_GAP * (finished - started))
    with _caches_lock:
        _caches[id(db)] = fresh
        while len(_caches) > _CACHED_CONNECTIONS:
            del _caches[next(iter(_caches))]
    return fresh


def _read(db: sqlite3.Connection, version: tuple[int, int, int], count: int) -> _Cache:
    """Every vector into one matrix, filled a batch at a time (no second copy of the whole while reading)."""
    dimension = meta(db).dimension or 0
    ids, collections = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    matrix = np.empty((count, dimension), dtype=np.float32)
    cursor, filled = db.execute(f"SELECT chunk_id, collection_id, embedding FROM {TABLE}"), 0
    while rows := cursor.fetchmany(_READ_BATCH):
        end = filled + len(rows)
        if end > len(matrix):  # another connection added rows since the count: room for them
            grow = end - len(matrix)
            matrix = np.concatenate([matrix, np.empty((grow, dimension), dtype=np.float32)])
            ids = np.concatenate([ids, np.empty(grow, dtype=np.int64)])
            collections = np.concatenate([collections, np.empty(grow, dtype=np.int64)])
        ids[filled:end] = [row[0] for row in rows]
        collections[filled:end] = [row[1] for row in rows]
        matrix[filled:end] = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32).reshape(-1, dimension)
        filled = end
    ids, collections, matrix = ids[:filled], collections[:filled], matrix[:filled]
    return _Cache(db, version, ids, collections, matrix, np.einsum("ij,ij->i", matrix, matrix))


def _prune() -> None:
    """Forget the copies of closed connections (caller holds ``_caches_lock``)."""
    for key, cache in list(_caches.items()):
        try:
            cache.db.total_changes  # noqa: B018 (raises once closed)
        except Exception:  # sqlite3.ProgrammingError, from whichever driver
            del _caches[key]


def _create(db: sqlite3.Connection, dimension: int) -> None:
    _changed()
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING vec0(chunk_id INTEGER PRIMARY KEY, "
        f"collection_id INTEGER, embedding float[{dimension}])"
    )
    db.execute(_TRIGGER)
    db.execute("UPDATE vector_meta SET dimension = ? WHERE id = 1", (dimension,))


def _drop(db: sqlite3.Connection) -> None:
    _changed()
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
