"""Chunking keeps sentences and headings whole and records offsets; user text never becomes FTS5 syntax."""

from __future__ import annotations

import itertools
import re

from app.core.documents.chunking import PageText, chunk_pages, chunk_text
from app.core.documents.file_types import document_kind, is_ignored_dir, parse_extensions
from app.core.documents.query import fts_query, query_terms


def _sentences(count: int, word: str = "Sentence") -> str:
    return " ".join(f"{word} number {n} says something useful here." for n in range(count))


def test_chunks_are_whole_sentences_near_the_target_with_exact_offsets() -> None:
    text = _sentences(300)
    chunks = chunk_text(PageText(text), target_chars=1000, overlap_chars=120)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.text.startswith("Sentence number ") and chunk.text.endswith("here.")
        assert len(chunk.text) <= 1000
    assert chunks[-1].end == len(text)


def test_consecutive_chunks_overlap_by_whole_sentences_within_the_limit() -> None:
    chunks = chunk_text(PageText(_sentences(200)), target_chars=1000, overlap_chars=120)
    for before, after in itertools.pairwise(chunks):
        assert after.start < before.end  # overlap
        assert before.end - after.start <= 120
        assert after.text.startswith("Sentence number ")


def test_a_heading_starts_a_chunk_and_each_chunk_carries_its_heading() -> None:
    first = "# Installing\n\n" + _sentences(40, "Install")
    second = "\n\n# Removing\n\n" + _sentences(40, "Remove")
    text = first + second
    headings = tuple((m.start(), m.group(1)) for m in re.finditer(r"^# (.+)$", text, re.MULTILINE))
    chunks = chunk_text(PageText(text, None, headings), target_chars=1200, overlap_chars=100)
    removing = [c for c in chunks if c.heading == "Removing"]
    assert removing and removing[0].text.startswith("# Removing")
    assert all("Remove" not in c.text for c in chunks if c.heading == "Installing")
    assert all("Install " not in c.text for c in removing)


def test_a_sentence_longer_than_the_maximum_is_cut_at_spaces() -> None:
    text = " ".join(["word"] * 1000)  # 4,999 characters, no sentence end
    chunks = chunk_text(PageText(text), target_chars=1000, overlap_chars=0, max_chars=1200)
    assert all(len(c.text) <= 1200 for c in chunks)
    assert all(not c.text.startswith(" ") and c.text.split() == ["word"] * len(c.text.split()) for c in chunks)


def test_paged_text_never_crosses_a_page_and_offsets_are_of_the_page() -> None:
    pages = [PageText(_sentences(30, f"Page{n}"), n) for n in (1, 2, 3)]
    chunks = chunk_pages(pages, target_chars=800)
    assert {c.page for c in chunks} == {1, 2, 3}
    for chunk in chunks:
        page = pages[chunk.page - 1]  # type: ignore[operator]
        assert page.text[chunk.start : chunk.end] == chunk.text
        assert f"Page{chunk.page}" in chunk.text


def test_empty_and_blank_text_make_no_chunks() -> None:
    assert chunk_text(PageText("")) == [] and chunk_text(PageText(" \n\n \t")) == []


def test_fts_query_quotes_every_word_so_syntax_characters_are_text() -> None:
    assert fts_query('AND OR NOT ( ) " * ^ : NEAR') == '"and" OR "or" OR "not" OR "near"'
    assert fts_query("title:secret") == '"title" OR "secret"'
    assert fts_query("  ?!  ") is None
    assert query_terms("Page page PAGE two") == ["page", "two"]


def test_file_types_and_ignored_folders() -> None:
    from pathlib import PurePath

    assert document_kind(PurePath("a/Report.PDF")) == "pdf"
    assert document_kind(PurePath("x.docx")) == "docx" and document_kind(PurePath("m.py")) == "code"
    assert document_kind(PurePath("image.png")) is None
    assert document_kind(PurePath("notes.md"), parse_extensions("pdf, .txt")) is None
    assert is_ignored_dir(".git") and is_ignored_dir("node_modules") and not is_ignored_dir("docs")


def test_a_heading_never_ends_a_chunk_apart_from_its_text() -> None:
    text = _sentences(5) + "\n\n# Late heading\n\n" + " ".join(["long"] * 250) + "."  # a 1,250-char paragraph
    offset = text.index("# Late")
    chunks = chunk_text(PageText(text, None, ((offset, "Late heading"),)), target_chars=1200, overlap_chars=100)
    assert all(not c.text.endswith("# Late heading") for c in chunks)
    assert any(c.text.startswith("# Late heading") and c.heading == "Late heading" for c in chunks)
