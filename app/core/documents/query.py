"""User text → an SQLite FTS5 query that cannot be a syntax error.

Every word of the user's text becomes a quoted FTS5 string (``"word"``; a ``"`` inside doubled), joined by ``OR``:
operators, column filters, parentheses, ``*`` and ``^`` in the input are plain text. BM25 then ranks the chunks
that hold more (and rarer) of the words first."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32


def query_terms(text: str) -> list[str]:
    """The distinct words of ``text``, in order, lower case, at most :data:`MAX_TERMS`."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text):
        seen.setdefault(match.group().lower(), None)
    return list(seen)[:MAX_TERMS]


def fts_query(text: str) -> str | None:
    """The FTS5 MATCH expression for ``text``; None when it has no words (nothing to search for)."""
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
