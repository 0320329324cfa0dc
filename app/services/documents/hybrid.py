"""Hybrid search: the keyword ranking (BM25, ``search.py``) and the vector ranking (cosine, ``vectors.py``), each
``DEPTH`` deep, fused by reciprocal rank fusion: a chunk scores the sum of 1 / (K + rank) over the rankings it is
in (K = 60), so agreement between the two lifts a passage and either alone can still bring one in. A hit keeps
``SearchHit``'s fields; its score is the fused score. A passage only the vectors found has no matched words, so
its snippet is its opening words.

Latency (``python -m app.services.documents.hybrid_bench CHUNKS``: the keyword bench's index plus a random
normalized 384-dimensional vector per chunk, 200 queries, top 10, the query vector given, one process on 2 shared
CPU cores): 100,000 chunks p50 {P50} ms, p95 {P95} ms (the vector ranking alone is a brute-force vec0 scan).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from app.services.documents import vectors
from app.services.documents.search import _ROWS, SearchHit, _hit, search_chunks

RRF_K = 60
DEPTH = 40  # how deep each ranking is read before fusing
SNIPPET_CHARS = 160


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of rankings of chunk ids (best first): (chunk id, fused score), best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def hybrid_search(
    db: sqlite3.Connection, query: str, vector: np.ndarray, collection: str | None, top: int, depth: int = DEPTH
) -> list[SearchHit]:
    """The best ``top`` passages for ``query`` (and its embedding ``vector``) by both rankings fused."""
    if top <= 0:
        return []
    collection_id = _collection_id(db, collection)
    if collection is not None and collection_id is None:
        return []
    deep = max(top, depth)
    keyword = search_chunks(db, query, collection, deep)
    near = vectors.nearest(db, vector, collection_id, deep)
    fused = fuse([[hit.chunk_id for hit in keyword], [chunk_id for chunk_id, _ in near]])[:top]
    found = {hit.chunk_id: hit for hit in keyword}
    found.update(_vector_only(db, [chunk_id for chunk_id, _ in fused if chunk_id not in found]))
    return [replace(found[chunk_id], score=score) for chunk_id, score in fused if chunk_id in found]


def _vector_only(db: sqlite3.Connection, ids: list[int]) -> dict[int, SearchHit]:
    if not ids:
        return {}
    rows = db.execute(_ROWS.format(ids=",".join("?" * len(ids))), ids).fetchall()
    return {row[0]: _hit(row, 0.0, _opening(row[5])) for row in rows}


def _opening(text: str) -> str:
    words = " ".join(text.split())
    if len(words) <= SNIPPET_CHARS:
        return words
    return words[:SNIPPET_CHARS].rsplit(" ", 1)[0] + "…"


def _collection_id(db: sqlite3.Connection, collection: str | None) -> int | None:
    if collection is None:
        return None
    row = db.execute("SELECT id FROM collections WHERE name = ?", (collection,)).fetchone()
    return None if row is None else int(row[0])
