"""Splitting a document's extracted text into chunks for the index.

A chunk is a run of whole sentences of about ``target_chars`` characters. Sentences are never cut, except one longer
than ``max_chars`` on its own, which is cut at spaces. A heading starts a new chunk once the current one is at least
half full, and is never split; each chunk carries the heading in effect where it starts. Consecutive chunks overlap
by whole sentences of at most ``overlap_chars`` characters.

Offsets: ``start``/``end`` index into the text the chunker was given, that is the file's extracted text — for a
paged format (PDF) the text of that one page: chunks never cross a page, so a citation names one page and a viewer
can show the passage in its page's text."""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

TARGET_CHARS = 1200
OVERLAP_CHARS = 150
MAX_CHARS = 1600

# A sentence ends after . ! ? (with closing quotes/brackets) followed by white space, or at a blank line / line break
# before a heading or list item.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n[ \t]*\n\s*|\n(?=[ \t]*(?:[-*+•]|\d+[.)]|#)\s)")


@dataclass(frozen=True)
class Chunk:
    text: str
    page: int | None  # 1-based page of a paged format; None otherwise
    heading: str | None
    start: int  # offsets into the page's (or the file's) extracted text
    end: int


@dataclass(frozen=True)
class PageText:
    """One page of extracted text (or the whole text of an unpaged file, ``page`` None), with the headings found in
    it as (offset, heading) pairs in order."""

    text: str
    page: int | None = None
    headings: tuple[tuple[int, str], ...] = ()


def chunk_pages(
    pages: Sequence[PageText],
    target_chars: int = TARGET_CHARS,
    overlap_chars: int = OVERLAP_CHARS,
    max_chars: int = MAX_CHARS,
) -> list[Chunk]:
    """The chunks of every page, in order; a heading carries over from one page to the next."""
    chunks: list[Chunk] = []
    heading: str | None = None
    for page in pages:
        chunks.extend(chunk_text(page, target_chars, overlap_chars, max_chars, heading))
        if page.headings:
            heading = page.headings[-1][1]
    return chunks


def chunk_text(
    page: PageText,
    target_chars: int = TARGET_CHARS,
    overlap_chars: int = OVERLAP_CHARS,
    max_chars: int = MAX_CHARS,
    heading_before: str | None = None,
) -> list[Chunk]:
    """The chunks of one page (see the module's docstring)."""
    heading_starts = [offset for offset, _ in page.headings]
    spans = _sentence_spans(page.text, heading_starts, max(max_chars, target_chars))
    chunks: list[Chunk] = []
    heading_set = frozenset(heading_starts)
    current: list[tuple[int, int]] = []
    for span in spans:
        size = span[1] - current[0][0] if current else 0
        at_heading = bool(current) and span[0] in heading_set and size >= target_chars // 2
        if current and (at_heading or span[1] - current[0][0] > target_chars):
            heading_last = len(current) > 1 and current[-1][0] in heading_set  # it goes with what follows it
            carried = [current.pop()] if heading_last else []
            chunks.append(_make_chunk(page, current, heading_before))
            current = carried if (at_heading or heading_last) else _overlap(current, overlap_chars)
        current.append(span)
    if current:
        chunks.append(_make_chunk(page, current, heading_before))
    return chunks


def _make_chunk(page: PageText, spans: list[tuple[int, int]], heading_before: str | None) -> Chunk:
    start, end = spans[0][0], spans[-1][1]
    return Chunk(page.text[start:end], page.page, _heading_at(page, start, end, heading_before), start, end)


def _heading_at(page: PageText, start: int, end: int, heading_before: str | None) -> str | None:
    """The heading in effect at ``start``; a chunk that begins before its page's first heading but holds it gets
    that one."""
    offsets = [offset for offset, _ in page.headings]
    index = bisect.bisect_right(offsets, start) - 1
    if index >= 0:
        return page.headings[index][1]
    if offsets and offsets[0] < end and heading_before is None:
        return page.headings[0][1]
    return heading_before


def _overlap(spans: list[tuple[int, int]], overlap_chars: int) -> list[tuple[int, int]]:
    """The trailing whole sentences of ``spans`` that fit in ``overlap_chars`` (never all of them)."""
    kept: list[tuple[int, int]] = []
    for span in reversed(spans[1:]):
        if spans[-1][1] - span[0] > overlap_chars:
            break
        kept.insert(0, span)
    return kept


def _sentence_spans(text: str, heading_starts: list[int], max_chars: int) -> list[tuple[int, int]]:
    """(start, end) of each sentence, white space trimmed; headings start a span; long ones cut at spaces."""
    cuts = sorted({0, len(text), *heading_starts, *(m.end() for m in _BOUNDARY.finditer(text))})
    spans: list[tuple[int, int]] = []
    for left, right in itertools.pairwise(cuts):
        trimmed = _trim(text, left, right)
        if trimmed is not None:
            spans.extend(_cut_long(text, *trimmed, max_chars))
    return spans


def _trim(text: str, left: int, right: int) -> tuple[int, int] | None:
    while left < right and text[left].isspace():
        left += 1
    while right > left and text[right - 1].isspace():
        right -= 1
    return (left, right) if left < right else None


def _cut_long(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    pieces: list[tuple[int, int]] = []
    while end - start > max_chars:
        cut = text.rfind(" ", start + max_chars // 2, start + max_chars)
        cut = cut if cut > start else start + max_chars
        pieces.append((start, cut))
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces
