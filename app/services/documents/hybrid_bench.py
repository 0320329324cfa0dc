"""Hybrid search latency over a synthetic index: ``python -m app.services.documents.hybrid_bench [CHUNKS]``.

The keyword bench's index (``search_bench.build``) plus a random normalized 384-dimensional vector per chunk
(sqlite-vec), then 200 hybrid searches of 1–4 words (top 10) with a random query vector — the time to embed a
query is the model's, not the index's, and is left out. The same 200 searches run twice on the same index: with
vec0 scanning the vectors (``vectors.CACHE_LIMIT = 0``), then with the in-memory copy (its one-off read timed on
its own, before). Prints p50/p95 in milliseconds for each; the figures are in hybrid.py's docstring."""

from __future__ import annotations

import functools
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from app.services.documents import search_bench, vectors
from app.services.documents.hybrid import hybrid_search
from app.services.documents.store import DocumentStore

DIMENSION = 384
BATCH = 2000


def add_vectors(store: DocumentStore, generator: np.random.Generator) -> None:
    store.write(lambda db: vectors.use_model(db, "bench"))
    after = 0
    while batch := store.read(functools.partial(vectors.missing, after=after, limit=BATCH)):
        found = _unit(generator.standard_normal((len(batch), DIMENSION)))
        store.write(functools.partial(vectors.put, model="bench", chunks=batch, vectors=found))
        after = batch[-1][0]


def queries(rng: random.Random, words: list[str], generator: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    found = []
    for _ in range(search_bench.QUERIES):
        query = " ".join(rng.choices(words[50:2000], k=rng.randint(1, 4)))
        found.append((query, _unit(generator.standard_normal((1, DIMENSION)))[0]))
    return found


def measure(store: DocumentStore, searches: list[tuple[str, np.ndarray]]) -> list[float]:
    timings = []
    for query, vector in searches:
        start = time.perf_counter()
        store.read(lambda db: hybrid_search(db, query, vector, None, 10))  # noqa: B023 (called at once)
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def _unit(matrix: np.ndarray) -> np.ndarray:
    matrix = matrix.astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def main(argv: list[str]) -> int:
    chunks = int(argv[0]) if argv else 10_000
    rng, generator = random.Random(28), np.random.default_rng(28)
    words = search_bench._words(rng)
    with tempfile.TemporaryDirectory() as folder:
        store = DocumentStore(Path(folder) / "bench.sqlite3")
        try:
            problem = store.read(vectors.load_extension)
            if problem is not None:
                print(problem)
                return 1
            started = time.perf_counter()
            search_bench.build(store, chunks, rng, words)
            add_vectors(store, generator)
            built_s = time.perf_counter() - started
            searches = queries(rng, words, generator)
            limit, vectors.CACHE_LIMIT = vectors.CACHE_LIMIT, 0
            try:
                scanned = measure(store, searches)
            finally:
                vectors.CACHE_LIMIT = limit
            started = time.perf_counter()
            store.read(lambda db: vectors.nearest(db, searches[0][1], None, 1))  # reads the copy
            read_s = time.perf_counter() - started
            cached = measure(store, searches)
        finally:
            store.close()
    print(f"{chunks:,} chunks: built in {built_s:.1f} s; vectors read into memory in {read_s:.2f} s")
    for name, timings in (("vec0 scan", scanned), ("in memory", cached)):
        p50, p95 = statistics.median(timings), statistics.quantiles(timings, n=100)[94]
        print(f"  hybrid, {name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
