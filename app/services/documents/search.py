"""Keyword search over the chunks: SQLite FTS5 with BM25.

Score: FTS5's ``bm25()`` is lower-is-better (negative for a match); the score reported is its negation, so a
higher score is a better match and every hit's score is positive. The user's text never reaches FTS5 as syntax
(app/core/documents/query.py quotes each word).

Latency (``python -m app.services.documents.search_bench CHUNKS``: chunks of ~1,200 characters from a 5,000-word
vocabulary, 200 queries of 1–4 words, top 10, one process on 2 shared CPU cores): 10,000 chunks p50 1.4 ms,
p95 2.9 ms; 100,000 chunks p50 6.3 ms, p95 20.3 ms. Ranking in FTS5 first and reading snippets and rows for the
top hits only is what makes it so: with ``bm25()`` and ``snippet()`` computed for every match it was p95 5.0 ms and
90.3 ms.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from app.core.documents.query import fts_query

SNIPPET_TOKENS = 16


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    collection: str
    path: str
    page: int | None  # 1-based; None for an unpaged format
    heading: str | None
    text: str
    score: float  # -bm25: higher is better
    snippet: str  # a few words around the matches, matched terms in [brackets]
    start: int
    end: int


# FTS5 ranks by the ``rank`` column (bm25 with the heading weighted half, set in schema.py) and stops at the limit;
# snippets and the chunks' rows are then read for those few hits only.
_RANKED_ALL = "SELECT rowid, -rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?"
_RANKED_IN = (
    "SELECT chunks_fts.rowid, -chunks_fts.rank FROM chunks_fts JOIN chunks k ON k.id = chunks_fts.rowid "
    "JOIN files f ON f.id = k.file_id JOIN collections c ON c.id = f.collection_id "
    "WHERE chunks_fts MATCH ? AND c.name = ? ORDER BY chunks_fts.rank LIMIT ?"
)
_SNIPPETS = (
    f"SELECT rowid, snippet(chunks_fts, 0, '[', ']', '…', {SNIPPET_TOKENS}) FROM chunks_fts "
    "WHERE chunks_fts MATCH ? AND rowid IN ({ids})"
)
_ROWS = (
    'SELECT k.id, c.name, f.path, k.page, k.heading, k.text, k.start, k."end" FROM chunks k '
    "JOIN files f ON f.id = k.file_id JOIN collections c ON c.id = f.collection_id WHERE k.id IN ({ids})"
)


def search_chunks(db: sqlite3.Connection, query: str, collection: str | None, top: int) -> list[SearchHit]:
    match = fts_query(query)
    if match is None or top <= 0:
        return []
    if collection is None:
        ranked = db.execute(_RANKED_ALL, (match, top)).fetchall()
    else:
        ranked = db.execute(_RANKED_IN, (match, collection, top)).fetchall()
    if not ranked:
        return []
    ids = [row[0] for row in ranked]
    marks = ",".join("?" * len(ids))
    snippets = dict(db.execute(_SNIPPETS.format(ids=marks), (match, *ids)).fetchall())
    rows = {row[0]: row for row in db.execute(_ROWS.format(ids=marks), ids).fetchall()}
    return [_hit(rows[chunk_id], score, snippets.get(chunk_id, "")) for chunk_id, score in ranked if chunk_id in rows]


def _hit(row: tuple, score: float, snippet: str) -> SearchHit:
    chunk_id, collection, path, page, heading, text, start, end = row
    return SearchHit(chunk_id, collection, path, page, heading, text, score, snippet, start, end)
