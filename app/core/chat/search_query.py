"""What a person types into a chat search, as an SQLite FTS5 query that cannot fail.

Each word becomes a quoted FTS5 string, so ``AND``, ``OR``, ``NOT``, ``NEAR``, ``*``, ``^``, column filters,
parentheses and unbalanced quotes are plain words; the last word (3 letters or more) also matches as a
prefix (search as you type).
"""

from __future__ import annotations

MAX_TERMS = 16  # words beyond this are ignored: a pasted paragraph is not a search
MIN_PREFIX = 3  # a shorter last word matches only itself ("a*" would match most of the history)


def fts_query(text: str) -> str | None:
    """The FTS5 MATCH expression for ``text``; None when it holds no word to look for."""
    words = [word for word in text.split() if any(ch.isalnum() for ch in word)][:MAX_TERMS]
    if not words:
        return None
    quoted = ['"' + word.replace('"', '""') + '"' for word in words]
    last = words[-1]
    if len(last) >= MIN_PREFIX and last[-1].isalnum():
        quoted[-1] += "*"
    return " ".join(quoted)
