"""Keyword search latency over a synthetic index: ``python -m app.services.documents.search_bench [CHUNKS]``.

Builds a throw-away store (a temporary folder) with CHUNKS chunks of ~1,200 characters drawn from a 5,000-word
vocabulary (Zipf-like word frequencies, 100 chunks per file), then times 200 searches of 1–4 words (top 10) and
prints p50/p95 in milliseconds. The figures are in search.py's docstring."""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.core.documents.chunking import Chunk
from app.services.documents.store import DocumentStore

VOCABULARY = 5000
CHUNK_CHARS = 1200
CHUNKS_PER_FILE = 100
QUERIES = 200


def _words(rng: random.Random) -> list[str]:
    return [f"w{n}{''.join(rng.choices('abcdefghij', k=4))}" for n in range(VOCABULARY)]


def build(store: DocumentStore, chunks: int, rng: random.Random, words: list[str]) -> None:
    weights = [1 / (rank + 1) for rank in range(len(words))]
    collection = store.collection_id("bench")
    for file_number in range(max(1, chunks // CHUNKS_PER_FILE)):
        batch = []
        for ordinal in range(CHUNKS_PER_FILE):
            text = " ".join(rng.choices(words, weights, k=CHUNK_CHARS // 9))
            batch.append(Chunk(text, ordinal // 3 + 1, None, 0, len(text)))
        store.commit_indexed(collection, f"/bench/file{file_number}.pdf", (1, 1), "", CHUNKS_PER_FILE // 3, batch)


def measure(store: DocumentStore, rng: random.Random, words: list[str]) -> tuple[float, float]:
    timings = []
    for _ in range(QUERIES):
        query = " ".join(rng.choices(words[50:2000], k=rng.randint(1, 4)))
        start = time.perf_counter()
        store.search(query, top=10)
        timings.append((time.perf_counter() - start) * 1000)
    cuts = statistics.quantiles(timings, n=100)
    return statistics.median(timings), cuts[94]


def main(argv: list[str]) -> int:
    chunks = int(argv[0]) if argv else 10_000
    rng = random.Random(28)
    words = _words(rng)
    with tempfile.TemporaryDirectory() as folder:
        store = DocumentStore(Path(folder) / "bench.sqlite3")
        try:
            started = time.perf_counter()
            build(store, chunks, rng, words)
            built_s = time.perf_counter() - started
            p50, p95 = measure(store, rng, words)
        finally:
            store.close()
    print(f"{chunks:,} chunks: built in {built_s:.1f} s; search p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
