"""The in-memory copy of the document vectors (``vectors._Cache``) against vec0 itself (real SQLite, real
sqlite-vec): the same ranking and distances on random vectors, in all collections or one; and every way the
vectors change — new vectors, a file's chunks deleted (the trigger), a file indexed again, another embedding model,
another connection's commit — is seen by the very next search; while the vectors keep changing, vec0 answers
between reads of the copy."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.documents.chunking import Chunk
from app.services.documents import vectors
from app.services.documents.store import DocumentStore

pytestmark = pytest.mark.timeout(120)
DIMENSION = 32
MODEL = "random"


def _unit(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


@pytest.fixture(autouse=True)
def read_again_at_once(monkeypatch):
    """Out of date means read again at the next search (the hold-off after a read has its own test)."""
    monkeypatch.setattr(vectors, "REREAD_GAP", 0.0)


@pytest.fixture
def store(tmp_path):
    store = DocumentStore(tmp_path / "d.sqlite3")
    if store.read(vectors.load_extension) is not None:
        store.close()
        pytest.skip("sqlite-vec cannot load here")
    store.write(lambda db: vectors.use_model(db, MODEL))
    yield store
    store.close()


def index_file(store: DocumentStore, collection: str, path: str, texts: list[str]) -> None:
    chunks = [Chunk(text, None, None, 0, len(text)) for text in texts]
    store.commit_indexed(store.collection_id(collection), path, (1, 1), "", None, chunks)


def embed_missing(store: DocumentStore, generator: np.random.Generator, model: str = MODEL) -> int:
    """Random vectors for every chunk without one; the number written."""
    batch = store.read(lambda db: vectors.missing(db, 0, 100_000))
    found = _unit(generator.standard_normal((len(batch), DIMENSION)))
    return store.write(lambda db: vectors.put(db, model, batch, found))


def filled(store: DocumentStore, generator: np.random.Generator) -> DocumentStore:
    """600 chunks in 12 files, half in collection "a" and half in "b", each with a random vector."""
    for number in range(12):
        collection = "a" if number % 2 else "b"
        index_file(store, collection, f"/notes/file{number}.txt", [f"file {number} part {n}" for n in range(50)])
    assert embed_missing(store, generator) == 600
    return store


def scanned(store: DocumentStore, vector: np.ndarray, collection_id: int | None, k: int) -> list[tuple[int, float]]:
    """vec0's own answer (no copy in memory)."""
    return store.read(lambda db: vectors._scan(db, vector, collection_id, k))


def cached(store: DocumentStore, vector: np.ndarray, collection_id: int | None, k: int) -> list[tuple[int, float]]:
    found = store.read(lambda db: vectors.nearest(db, vector, collection_id, k))
    assert store.read(lambda db: vectors._caches[id(db)].db is db)  # the copy answered
    return found


def assert_same(store: DocumentStore, vector: np.ndarray, collection_id: int | None, k: int) -> list[int]:
    scan, memory = scanned(store, vector, collection_id, k), cached(store, vector, collection_id, k)
    assert [chunk for chunk, _ in memory] == [chunk for chunk, _ in scan]
    assert [distance for _, distance in memory] == pytest.approx([distance for _, distance in scan], abs=1e-5)
    return [chunk for chunk, _ in memory]


@pytest.fixture
def reads(monkeypatch):
    """How many times the copy was read from the database."""
    count = [0]
    read = vectors._read

    def counted(*args):
        count[0] += 1
        return read(*args)

    monkeypatch.setattr(vectors, "_read", counted)
    return count


def test_the_copy_ranks_as_vec0_does_in_all_collections_and_in_one(store, reads):
    generator = np.random.default_rng(7)
    filled(store, generator)
    a, b = store.find_collection("a"), store.find_collection("b")
    in_a = set(store.read(lambda db: [r[0] for r in db.execute("SELECT id FROM chunks WHERE file_id % 2 = 0")]))
    for vector in _unit(generator.standard_normal((20, DIMENSION))):
        for k in (1, 10, 40):
            assert len(assert_same(store, vector, None, k)) == k
            assert set(assert_same(store, vector, a, k)) <= in_a
            assert not set(assert_same(store, vector, b, k)) & in_a
    assert reads[0] == 1  # read once, then every search from memory
    vector = _unit(generator.standard_normal(DIMENSION))
    assert len(assert_same(store, vector, None, 1000)) == 600  # more asked for than there are: all of them
    assert len(assert_same(store, vector, a, 1000)) == 300
    assert cached(store, vector, 999, 10) == scanned(store, vector, 999, 10) == []  # no such collection
    assert cached(store, vector, None, 0) == []
    own = store.read(lambda db: db.execute(f"SELECT embedding FROM {vectors.TABLE} LIMIT 1").fetchone()[0])
    nearest = cached(store, np.frombuffer(own, dtype=np.float32), None, 1)
    assert nearest[0][1] == pytest.approx(0.0, abs=1e-6)  # a chunk's own vector: distance 0, as vec0 says


def test_new_vectors_are_found_by_the_next_search(store, reads):
    generator = np.random.default_rng(8)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    assert_same(store, vector, None, 10)
    index_file(store, "a", "/notes/new.txt", ["a new note"])
    new_id = store.read(lambda db: db.execute("SELECT max(id) FROM chunks").fetchone()[0])
    batch = store.read(lambda db: vectors.missing(db, 0, 10))
    assert batch == [(new_id, "a new note")]
    store.write(lambda db: vectors.put(db, MODEL, batch, vector.reshape(1, -1)))  # exactly the query
    assert cached(store, vector, None, 1)[0][0] == new_id
    assert assert_same(store, vector, store.find_collection("a"), 5)[0] == new_id
    assert reads[0] == 2


def test_chunks_deleted_through_the_trigger_leave_the_next_search(store, reads):
    generator = np.random.default_rng(10)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    before = assert_same(store, vector, None, 600)
    file_of = dict(store.read(lambda db: db.execute("SELECT id, file_id FROM chunks").fetchall()))
    gone = file_of[before[0]]  # the file of the nearest chunk
    store.remove_files([gone])  # chunks deleted; vec0's rows go by the trigger alone, nothing in vectors.py runs
    after = assert_same(store, vector, None, 600)
    assert after == [chunk for chunk in before if file_of[chunk] != gone] and len(after) == 550
    assert reads[0] == 2


def test_a_file_indexed_again_with_reused_chunk_ids_is_seen(store, reads):
    generator = np.random.default_rng(11)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    assert_same(store, vector, None, 10)
    last_file = "/notes/file11.txt"  # holds the highest chunk ids: indexed again, its new chunks take the same ids
    old_ids = store.read(lambda db: [r[0] for r in db.execute("SELECT id FROM chunks WHERE file_id = 12")])
    index_file(store, "a", last_file, [f"rewritten {n}" for n in range(50)])
    new_ids = store.read(lambda db: [r[0] for r in db.execute("SELECT id FROM chunks WHERE file_id = 12")])
    assert new_ids == old_ids  # the same ids, their vectors gone with the old chunks
    assert not set(assert_same(store, vector, None, 600)) & set(new_ids)
    assert embed_missing(store, generator) == 50  # new vectors under the same ids: the same count as before
    assert set(assert_same(store, vector, None, 600)) >= set(new_ids)
    index_file(store, "a", last_file, [f"rewritten again {n}" for n in range(50)])
    assert embed_missing(store, generator) == 50  # no search between: as many vectors, under the same ids, as before
    assert assert_same(store, vector, None, 600)  # other vectors than the copy had: read again all the same
    assert reads[0] == 4


def test_another_embedding_model_replaces_the_copy(store, reads):
    generator = np.random.default_rng(12)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    assert_same(store, vector, None, 10)
    store.write(lambda db: vectors.use_model(db, "other"))
    assert store.read(lambda db: vectors.nearest(db, vector, None, 10)) == []  # no vectors of the new model yet
    batch = store.read(lambda db: vectors.missing(db, 0, 100_000))
    wider = _unit(generator.standard_normal((len(batch), 2 * DIMENSION)))
    store.write(lambda db: vectors.put(db, "other", batch, wider))
    query = _unit(generator.standard_normal(2 * DIMENSION))
    assert len(assert_same(store, query, None, 40)) == 40
    assert store.read(lambda db: vectors._caches[id(db)].matrix.shape) == (600, 2 * DIMENSION)


def test_another_connections_commit_is_seen(store, reads, tmp_path):
    generator = np.random.default_rng(13)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    assert_same(store, vector, None, 10)
    other = DocumentStore(tmp_path / "d.sqlite3")
    try:
        assert other.read(vectors.load_extension) is None
        nearest = store.read(lambda db: vectors.nearest(db, vector, None, 1))[0][0]
        text = other.read(lambda db: db.execute("SELECT text FROM chunks WHERE id = ?", (nearest,)).fetchone()[0])
        far = -vector.reshape(1, -1)
        with other._transaction() as db:  # in place, and bypassing vectors.py: only data_version tells
            db.execute(f"UPDATE {vectors.TABLE} SET embedding = ? WHERE chunk_id = ?", (far.tobytes(), nearest))
        assert nearest not in assert_same(store, vector, None, 10)
        assert text and reads[0] == 2  # (the chunk is still there)
    finally:
        other.close()


def test_inside_a_transaction_vec0_answers_and_the_copy_keeps_what_is_committed(store, reads):
    generator = np.random.default_rng(14)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    before = assert_same(store, vector, None, 5)

    class Undo(Exception):
        pass

    def delete_then_undo(db):
        db.execute("DELETE FROM chunks WHERE id = ?", (before[0],))  # its vector goes by the trigger
        inside = [chunk for chunk, _ in vectors.nearest(db, vector, None, 5)]  # vec0, seeing the uncommitted delete
        assert inside == before[1:] + inside[4:] and before[0] not in inside
        raise Undo

    with pytest.raises(Undo):
        store.write(delete_then_undo)
    assert assert_same(store, vector, None, 5) == before  # rolled back: the copy, untouched, still right
    assert reads[0] == 1


def test_above_the_limit_vec0_scans_and_no_copy_is_kept(store, reads, monkeypatch):
    generator = np.random.default_rng(15)
    filled(store, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    assert_same(store, vector, None, 10)
    monkeypatch.setattr(vectors, "CACHE_LIMIT", 599)
    assert len(store.read(lambda db: vectors.nearest(db, vector, None, 10))) == 10
    assert store.read(lambda db: id(db) not in vectors._caches)  # the old copy freed, none read
    assert reads[0] == 1


def test_a_closed_stores_copy_is_forgotten(tmp_path):
    generator = np.random.default_rng(16)
    first = DocumentStore(tmp_path / "one.sqlite3")
    if first.read(vectors.load_extension) is not None:
        first.close()
        pytest.skip("sqlite-vec cannot load here")
    first.write(lambda db: vectors.use_model(db, MODEL))
    filled(first, generator)
    vector = _unit(generator.standard_normal(DIMENSION))
    first.read(lambda db: vectors.nearest(db, vector, None, 1))
    closed = first.read(lambda db: db)
    assert vectors._caches[id(closed)].db is closed
    first.close()
    second = DocumentStore(tmp_path / "two.sqlite3")
    try:
        second.read(lambda db: vectors.nearest(db, vector, None, 1))  # no table: nothing cached, but a look around
        second.write(lambda db: vectors.use_model(db, MODEL))
        filled(second, generator)
        second.read(lambda db: vectors.nearest(db, vector, None, 1))
        assert all(cache.db is not closed for cache in vectors._caches.values())  # its matrix freed
    finally:
        second.close()


def test_changed_again_soon_after_a_read_vec0_answers_until_the_gap_has_passed(store, monkeypatch):
    generator = np.random.default_rng(17)
    filled(store, generator)
    now, reads, read = [100.0], [0], vectors._read

    def one_second_read(*args):
        reads[0] += 1
        now[0] += 1.0  # the read takes a second on the fake clock
        return read(*args)

    monkeypatch.setattr(vectors, "_clock", lambda: now[0])
    monkeypatch.setattr(vectors, "_read", one_second_read)
    monkeypatch.setattr(vectors, "REREAD_GAP", 10.0)
    vector = _unit(generator.standard_normal(DIMENSION))
    assert_same(store, vector, None, 10)  # read from 100 to 101: not read again before 111
    index_file(store, "a", "/notes/new.txt", ["a new note"])
    batch = store.read(lambda db: vectors.missing(db, 0, 10))
    store.write(lambda db: vectors.put(db, MODEL, batch, vector.reshape(1, -1)))
    now[0] = 110.5
    assert store.read(lambda db: vectors.nearest(db, vector, None, 1))[0][0] == batch[0][0]  # vec0: seen all the same
    assert reads[0] == 1
    now[0] = 111.0
    assert assert_same(store, vector, None, 10)[0] == batch[0][0]
    assert reads[0] == 2
