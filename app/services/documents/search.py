"""Keyword search over the chunks: SQLite FTS5 with BM25.

Score: FTS5's ``bm25()`` is lower-is-better (negative for a match); the score reported is its negation, so a
higher score is a better match and every hit's score is positive. The user's text never reaches FTS5 as syntax
(app/core/documents/query.py quotes each word).

Latency (``python -m app.services.documents.search_bench``, 10,000 chunks of ~1,200 characters from a 5,000-word
vocabulary, 200 queries of 1–4 words, top 10, 2 shared CPU cores): see that module's docstring for the figures."""

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


_SEARCH = (
    "SELECT k.id, c.name, f.path, k.page, k.heading, k.text, -bm25(chunks_fts, 1.0, 0.5) AS score, "
    f"snippet(chunks_fts, 0, '[', ']', '…', {SNIPPET_TOKENS}), k.start, k.\"end\" "
    "FROM chunks_fts JOIN chunks k ON k.id = chunks_fts.rowid JOIN files f ON f.id = k.file_id "
    "JOIN collections c ON c.id = f.collection_id WHERE chunks_fts MATCH ? {collection} "
    "ORDER BY bm25(chunks_fts, 1.0, 0.5) LIMIT ?"
)


def search_chunks(db: sqlite3.Connection, query: str, collection: str | None, top: int) -> list[SearchHit]:
    match = fts_query(query)
    if match is None or top <= 0:
        return []
    if collection is None:
        rows = db.execute(_SEARCH.format(collection=""), (match, top))
    else:
        rows = db.execute(_SEARCH.format(collection="AND c.name = ?"), (match, collection, top))
    return [SearchHit(*row) for row in rows.fetchall()]
