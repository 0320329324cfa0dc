"""Documents in a chat: what a chat has attached, the numbered sources a reply cites, and how both are written into
the prompt.

A chat's documents go to the model one of two ways (``WHOLE``, ``PASSAGES``): the full text of every attached
document at the start of the prompt (stable between turns, so the engine's prefix cache keeps it), or the best
passages for each new question. Either way they are numbered [1], [2]… and the model is asked to cite them so."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any

WHOLE, PASSAGES = "whole", "passages"
MODE_KEY = "documents_mode"  # in a reply's settings: how its documents were sent
MISSING_KEY = "documents_missing"  # attached documents the index does not hold (labels)
COUNT_KEY = "documents_count"  # documents (whole) or passages sent
PREVIEW_CHARS = 600  # a whole document's source keeps this much of its start to show

CITE_INSTRUCTION = (
    "Answer from the numbered sources below. After each statement taken from them, cite the source's number in "
    "square brackets, like [1] or [2]. If the sources do not hold the answer, say so."
)

NO_PASSAGES = "(No passage of the attached documents matched this question; say that the documents do not answer it.)"


@dataclass(frozen=True)
class ChatDocument:
    """Something attached to a chat: a whole collection (``path`` None) or a file or folder indexed in
    ``collection``."""

    collection: str
    path: str | None = None

    @property
    def label(self) -> str:
        return PurePath(self.path).name or self.path if self.path else f"{self.collection} (collection)"

    def to_dict(self) -> dict[str, Any]:
        return {"collection": self.collection, "path": self.path}

    @classmethod
    def from_dict(cls, data: Any) -> ChatDocument:
        if not isinstance(data, dict) or not isinstance(data.get("collection"), str):
            raise TypeError("a chat document needs a collection")
        path = data.get("path")
        return cls(data["collection"], path if isinstance(path, str) else None)


@dataclass(frozen=True)
class Source:
    """One numbered source of a reply: a passage (or, sent whole, a document) with where it comes from."""

    number: int
    path: str
    page: int | None  # 1-based; None for an unpaged format or a whole document
    text: str  # the passage (a whole document: its start)
    heading: str | None = None
    chunk_id: int | None = None
    start: int = 0  # offsets of the passage in its page's (or file's) text
    end: int = 0

    @property
    def name(self) -> str:
        return PurePath(self.path).name or self.path

    @property
    def label(self) -> str:
        """``report.pdf, p. 3``; the file name alone when there is no page."""
        return f"{self.name}, p. {self.page}" if self.page else self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Source:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Passage:
    """A passage found for a question (a search hit, say), before it is numbered."""

    path: str
    page: int | None
    text: str
    heading: str | None = None
    chunk_id: int | None = None
    start: int = 0
    end: int = 0


@dataclass(frozen=True)
class FullText:
    """One document's whole text, for sending whole."""

    path: str
    text: str
    pages: int | None = None


def numbered(passages: Iterable[Passage]) -> list[Source]:
    """The passages as sources [1], [2]… in the order given."""
    return [
        Source(n, p.path, p.page, p.text, p.heading, p.chunk_id, p.start, p.end)
        for n, p in enumerate(passages, start=1)
    ]


def whole_sources(documents: Sequence[FullText]) -> list[Source]:
    """One source per document sent whole, numbered in order; each keeps the start of its text to show."""
    return [Source(n, d.path, None, _preview(d.text)) for n, d in enumerate(documents, start=1)]


def whole_block(documents: Sequence[FullText]) -> str:
    """The system-prompt part that holds the documents' full text, numbered as ``whole_sources`` numbers them."""
    parts = [CITE_INSTRUCTION]
    for n, document in enumerate(documents, start=1):
        parts.append(f"[{n}] {PurePath(document.path).name}\n{document.text.strip()}\n[end of {n}]")
    return "\n\n".join(parts)


def passages_block(sources: Sequence[Source]) -> str:
    """The passages found for a question, numbered, to put after it."""
    parts = [CITE_INSTRUCTION]
    for source in sources:
        parts.append(f"[{source.number}] {source.label}\n{source.text.strip()}")
    return "\n\n".join(parts)


def with_system(system_prompt: str, block: str) -> str:
    """The chat's own system prompt, then the documents."""
    return f"{system_prompt.rstrip()}\n\n{block}" if system_prompt.strip() else block


def mode_caption(mode: str | None, count: int, missing: Sequence[str] = ()) -> str:
    """What a reply was given: "full text of 2 documents" / "5 passages" ("" for none), and which attached
    documents the index does not hold (an imported chat's, a removed collection's) with what to do."""
    if mode == WHOLE:
        caption = f"full text of {count} document{'' if count == 1 else 's'}"
    elif mode == PASSAGES:
        caption = f"{count} passage{'' if count == 1 else 's'}"
    else:
        return ""
    if missing:
        is_, them = ("is", "it") if len(missing) == 1 else ("are", "them")
        caption += f" ({', '.join(missing)} {is_} not in your document index: index {them} again)"
    return caption


def page_joined(pieces: Iterable[tuple[int, int, str]]) -> str:
    """A page's text from its chunks (``start``, ``end``, ``text``) in order, their overlaps taken once."""
    out: list[str] = []
    reached = 0
    for start, end, text in pieces:
        if start >= reached:
            if out:
                out.append(" " if start > reached else "")
            out.append(text)
        elif end > reached:
            out.append(text[reached - start :])
        reached = max(reached, end)
    return "".join(out)


def document_text(pages: Iterable[tuple[int | None, str]]) -> str:
    """A document's whole text from its pages' texts (page None: an unpaged file), page numbers marked."""
    parts = [f"(page {page})\n{text}" if page else text for page, text in pages]
    return "\n\n".join(parts)


_CITATION = re.compile(r"\[(\d{1,3})\]")
_PRE = re.compile(r"(<pre\b.*?</pre>)", re.DOTALL)


def linked_citations(html: str, numbers: Collection[int]) -> str:
    """A reply's HTML with each citation of a known source ("[2]") made a link (``source:2``), code left alone."""
    if not numbers:
        return html

    def link(match: re.Match[str]) -> str:
        number = int(match.group(1))
        return f'<a href="source:{number}">[{number}]</a>' if number in numbers else match.group(0)

    parts = _PRE.split(html)
    return "".join(part if part.startswith("<pre") else _CITATION.sub(link, part) for part in parts)


def _preview(text: str) -> str:
    text = text.strip()
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1].rstrip() + "…"
