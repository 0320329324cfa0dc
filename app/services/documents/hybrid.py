"""Hybrid search: the keyword ranking (BM25, ``search.py``) and the vector ranking (cosine, ``vectors.py``), each
``DEPTH`` deep, fused by reciprocal rank fusion: a chunk scores the sum of 1 / (K + rank) over the rankings it is
in (K = 60), so agreement between the two lifts a passage and either alone can still bring one in. A hit keeps
``SearchHit``'s fields; its score is the fused score. A passage only the vectors found has no matched words, so
its snippet is its opening words.

Latency (``python -m app.services.documents.hybrid_bench CHUNKS``: the keyword bench's index plus a random
normalized 384-dimensional vector per chunk, the same 200 queries run first with vec0 scanning the vectors and then
with their in-memory copy (``vectors._Cache``), top 10, the query vector given; one process on this machine's 2 CPU
cores, shared with other work at load averages 2.8–3.0), two runs each:

=========  ====================  ====================
chunks     vec0 scan p50 / p95   in memory p50 / p95
=========  ====================  ====================
10,000     11.0–12.2 / 14.9–17.8 3.0–3.3 / 5.9
100,000    94–97 / 133           20–22 / 40–44
=========  ====================  ====================

So vec0's scan was most of it (p50 ~90 ms at 100,000 vectors); the copy ranks them in ~11 ms and costs ~154 MB
(100,000 × 384 × 4 B) plus one read of 1.6–2.3 s on the first search after a change (and a hold-off while they
keep changing: vectors.py). What is left is mostly the keyword half (alone, p95 28–41 ms at 100,000 chunks).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from app.core.documents.query import fts_query
from app.services.documents import vectors
from app.services.documents.search import _RANKED_ALL, _RANKED_IN, _ROWS, _SNIPPETS, SearchHit, _hit

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
    deep, match = max(top, depth), fts_query(query)
    keyword = _keyword_ranking(db, match, collection, deep)
    near = [chunk_id for chunk_id, _ in vectors.nearest(db, vector, collection_id, deep)]
    fused = fuse([keyword, near])[:top]
    if not fused:
        return []
    ids = [chunk_id for chunk_id, _ in fused]
    marks = ",".join("?" * len(ids))
    rows = {row[0]: row for row in db.execute(_ROWS.format(ids=marks), ids).fetchall()}
    snippets: dict[int, str] = {}
    if match is not None and set(ids) & set(keyword):  # snippets for the fused hits only, not every ranked one
        snippets = dict(db.execute(_SNIPPETS.format(ids=marks), (match, *ids)).fetchall())
    return [
        _hit(rows[chunk_id], score, snippets.get(chunk_id) or _opening(rows[chunk_id][5]))
        for chunk_id, score in fused
        if chunk_id in rows
    ]


def _keyword_ranking(db: sqlite3.Connection, match: str | None, collection: str | None, deep: int) -> list[int]:
    """BM25's best ``deep`` chunk ids (search.py's ranking, without its snippets)."""
    if match is None:
        return []
    if collection is None:
        return [row[0] for row in db.execute(_RANKED_ALL, (match, deep))]
    return [row[0] for row in db.execute(_RANKED_IN, (match, collection, deep))]


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
