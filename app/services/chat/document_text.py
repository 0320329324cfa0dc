"""Reading a chat's documents out of the document index (``DocumentStore.read``: these run under its lock, in a
worker thread): which indexed files a chat's attachments name, their full text from the chunks in order, and one
page's text to show a passage in context."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.documents.citations import ChatDocument, FullText, document_text, page_joined

_FILES = (
    "SELECT f.id, f.path, f.pages, c.name FROM files f JOIN collections c ON c.id = f.collection_id "
    "WHERE f.state = 'indexed' AND c.name = ? ORDER BY f.path"
)
_CHUNKS = 'SELECT page, start, "end", text FROM chunks WHERE file_id = ? ORDER BY ordinal'
_PAGE_CHUNKS = (
    'SELECT k.start, k."end", k.text FROM chunks k JOIN files f ON f.id = k.file_id '
    "WHERE f.path = ? AND k.page IS ? ORDER BY k.ordinal"
)


@dataclass(frozen=True)
class IndexedFile:
    id: int
    path: str
    pages: int | None
    collection: str


def attached_files(db: sqlite3.Connection, documents: Sequence[ChatDocument]) -> list[IndexedFile]:
    """The indexed files the chat's documents name (a collection: all of its files), each once, in order."""
    found: dict[int, IndexedFile] = {}
    for document in documents:
        for row in db.execute(_FILES, (document.collection,)):
            if document.path is None or is_under(row[1], document.path):
                found.setdefault(row[0], IndexedFile(*row))
    return list(found.values())


def total_chars(db: sqlite3.Connection, files: Sequence[IndexedFile]) -> int:
    """The characters of the files' chunks (overlaps counted twice): an upper bound of their whole text's length."""
    total = 0
    for start in range(0, len(files), 500):  # SQLite's limit on bound parameters
        ids = [f.id for f in files[start : start + 500]]
        marks = ",".join("?" * len(ids))
        total += db.execute(
            f"SELECT coalesce(sum(length(text)), 0) FROM chunks WHERE file_id IN ({marks})", ids
        ).fetchone()[0]
    return int(total)


def full_texts(db: sqlite3.Connection, files: Sequence[IndexedFile]) -> list[FullText]:
    """Each file's whole text, rebuilt page by page from its chunks (their overlaps taken once)."""
    return [FullText(f.path, document_text(_pages(db.execute(_CHUNKS, (f.id,)).fetchall())), f.pages) for f in files]


def page_text(db: sqlite3.Connection, path: str, page: int | None) -> str:
    """The text of one page of ``path`` (its whole text for an unpaged file), from its chunks."""
    return page_joined(db.execute(_PAGE_CHUNKS, (path, page)).fetchall())


def whole_text(db: sqlite3.Connection, path: str) -> str:
    """The whole text of the indexed file ``path`` ("" when the index has no such file)."""
    row = db.execute(
        "SELECT f.id, f.path, f.pages, c.name FROM files f JOIN collections c ON c.id = f.collection_id "
        "WHERE f.path = ? AND f.state = 'indexed' LIMIT 1",
        (path,),
    ).fetchone()
    return full_texts(db, [IndexedFile(*row)])[0].text if row is not None else ""


def known_paths(db: sqlite3.Connection, paths: Sequence[str]) -> dict[str, str]:
    """Of ``paths`` (files or folders), those the index already holds files at or under: path → its collection."""
    rows = db.execute(
        "SELECT f.path, c.name FROM files f JOIN collections c ON c.id = f.collection_id WHERE f.state = 'indexed'"
    ).fetchall()
    known: dict[str, str] = {}
    for path in paths:
        collection = next((name for file_path, name in rows if is_under(file_path, path)), None)
        if collection is not None:
            known[path] = collection
    return known


def collection_exists(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM collections WHERE name = ?", (name,)).fetchone() is not None


def is_under(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies in the folder ``root``."""
    root = root.rstrip("/\\") or root
    return path == root or path.startswith((root + "/", root + "\\"))


def _pages(rows: list[tuple[int | None, int, int, str]]) -> list[tuple[int | None, str]]:
    """(page, text) for each page of a file's chunk rows (page, start, end, text) in order."""
    pages: list[tuple[int | None, list[tuple[int, int, str]]]] = []
    for page, start, end, text in rows:
        if not pages or pages[-1][0] != page:
            pages.append((page, []))
        pages[-1][1].append((start, end, text))
    return [(page, page_joined(pieces)) for page, pieces in pages]
