"""Numbering and writing a chat's document sources (pure)."""

from __future__ import annotations

import json

from app.core.chat import chat_json
from app.core.chat.conversation import Conversation, Message, Role
from app.core.chat.export_html import to_html
from app.core.chat.export_markdown import to_markdown
from app.core.documents.citations import (
    CITE_INSTRUCTION,
    COUNT_KEY,
    MODE_KEY,
    PASSAGES,
    ChatDocument,
    FullText,
    Passage,
    Source,
    document_text,
    linked_citations,
    mode_caption,
    numbered,
    page_joined,
    passages_block,
    whole_block,
    whole_sources,
)


def test_overlapping_chunks_join_into_the_page_once() -> None:
    page = "One sentence. Two sentence. Three sentence."
    pieces = [(0, 27, page[0:27]), (14, 43, page[14:43])]
    assert page_joined(pieces) == page
    assert page_joined([(0, 3, "One"), (10, 14, "Four")]) == "One Four"


def test_document_text_marks_pages_and_sources_are_numbered_in_order() -> None:
    assert document_text([(1, "a"), (2, "b")]) == "(page 1)\na\n\n(page 2)\nb"
    assert document_text([(None, "plain")]) == "plain"
    sources = numbered([Passage("/d/a.pdf", 3, "first"), Passage("/d/b.md", None, "second")])
    assert [(s.number, s.label) for s in sources] == [(1, "a.pdf, p. 3"), (2, "b.md")]
    block = passages_block(sources)
    assert block.startswith(CITE_INSTRUCTION) and "[1] a.pdf, p. 3\nfirst" in block and "[2] b.md\nsecond" in block


def test_whole_documents_are_numbered_like_their_sources() -> None:
    texts = [FullText("/d/one.pdf", "x" * 2000), FullText("/d/two.md", "short")]
    block = whole_block(texts)
    assert "[1] one.pdf\n" in block and "[2] two.md\nshort\n[end of 2]" in block
    sources = whole_sources(texts)
    assert [s.number for s in sources] == [1, 2] and len(sources[0].text) == 600 and sources[0].text.endswith("…")


def test_mode_captions() -> None:
    assert mode_caption("whole", 2) == "full text of 2 documents"
    assert mode_caption("whole", 1) == "full text of 1 document"
    assert mode_caption("passages", 5) == "5 passages"
    assert mode_caption(None, 0) == ""


def _chat() -> Conversation:
    source = Source(1, "/d/a.pdf", 3, "The <b>passage</b>.", "Intro", 7, 10, 29)
    reply = Message(Role.ASSISTANT, "It says so [1].", sources=[source], settings={MODE_KEY: PASSAGES, COUNT_KEY: 1})
    return Conversation(
        title="Docs", messages=[Message(Role.USER, "What?"), reply], documents=[ChatDocument("notes", "/d")]
    )


def test_sources_and_documents_round_trip_through_the_json_export() -> None:
    chat = _chat()
    (back,) = chat_json.read_document(json.loads(chat_json.dumps([chat])))
    assert back.documents == chat.documents
    assert back.messages[1].sources == chat.messages[1].sources


def test_markdown_and_html_exports_list_the_sources_escaped() -> None:
    chat = _chat()
    markdown = to_markdown(chat)
    assert (
        "**Sources**" in markdown and "[1] a.pdf, p. 3 — `/d/a.pdf`" in markdown and "> The <b>passage</b>." in markdown
    )
    assert "answered from 1 passage" in markdown
    page = to_html(chat)
    assert "The &lt;b&gt;passage&lt;/b&gt;." in page and "<b>passage</b>" not in page


def test_citations_in_a_reply_become_links_to_known_sources_outside_code() -> None:
    html = "<p>Yes [1], and [3].</p><pre><code>a[1]</code></pre>"
    linked = linked_citations(html, {1, 2})
    assert linked == '<p>Yes <a href="source:1">[1]</a>, and [3].</p><pre><code>a[1]</code></pre>'
    assert linked_citations(html, ()) == html
