"""Markdown rendering, whole and streamed: same HTML, and per-feed work that does not grow with the reply."""

from __future__ import annotations

import random
import re
import statistics

import pytest

from app.core.markdown_stream import MarkdownStream, StreamUpdate, render_markdown

SECTION = """## Part {i}

Paragraph {i} has `inline code`, **bold**, *emphasis* and ~~strike~~,
and a second line that belongs to the same paragraph.

- first point of {i}
- second point with `code`
  continued lazily

1. step one
2. step two

   still step two

```python
def f{i}(x):

    return x * {i}
```
Setext heading {i}
------------------

> a quote
that continues

| name | value |
|------|------:|
| a{i} | {i} |

    indented code

    more indented code

---
"""


def long_document(sections: int) -> str:
    return "".join(SECTION.format(i=i) for i in range(sections)) + "The end, without a final newline"


def stream(text: str, seed: int, max_chunk: int = 9) -> tuple[str, list[StreamUpdate], MarkdownStream]:
    """Feed ``text`` in random chunks; return completed HTML + final tail HTML, the updates and the stream."""
    rnd = random.Random(seed)
    md = MarkdownStream()
    updates, i = [], 0
    while i < len(text):
        n = rnd.randint(1, max_chunk)
        updates.append(md.feed(text[i : i + n]))
        i += n
    html = "".join(u.completed_html for u in updates) + updates[-1].tail_html
    return html, updates, md


# -- render_markdown ------------------------------------------------------------------------------------


def test_raw_html_is_escaped() -> None:
    out = render_markdown("hi <script>alert(1)</script> <b>bold</b>\n\n<div onclick='x'>block</div>")
    assert "<script>" not in out and "<b>" not in out and "<div" not in out
    assert "&lt;script&gt;" in out and "&lt;div onclick=" in out


def test_only_web_links_become_links() -> None:
    out = render_markdown("[a](https://example.com) [b](javascript:alert(1)) [c](edit:0) [d](regenerate) <copy:1>")
    assert '<a href="https://example.com">a</a>' in out
    assert re.findall(r"<a ", out) == ["<a "]


def test_commonmark_with_tables_and_strikethrough() -> None:
    out = render_markdown("# Title\n\n~~gone~~ *em*\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "<h1>Title</h1>" in out
    assert "<s>gone</s>" in out and "<em>em</em>" in out
    assert "<table>" in out and "<td>1</td>" in out


def test_code_blocks_get_copy_links_and_collected_text() -> None:
    blocks: list[str] = ["earlier block"]
    out = render_markdown("```python\nx = 1 < 2\n\ny = 3\n```\n\ntext\n\n    indented\n", blocks)
    assert blocks == ["earlier block", "x = 1 < 2\n\ny = 3", "indented"]
    assert out.index('<a href="copy-code:1">Copy code</a>') < out.index("<pre")
    assert '<a href="copy-code:2">Copy code</a>' in out
    assert "x = 1 &lt; 2" in out  # escaped in the HTML, exact in the collected text
    assert re.search(r'<pre class="code" style="font-family: monospace;[^"]*">', out)


def test_code_font_is_configurable() -> None:
    out = render_markdown("```\nx\n```\n", code_font="'DejaVu Sans Mono', monospace")
    assert "font-family: &#x27;DejaVu Sans Mono&#x27;, monospace;" in out


# -- MarkdownStream: same result as rendering in one go ------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_streamed_long_document_matches_whole_render(seed: int) -> None:
    text = long_document(12)
    html, _, md = stream(text, seed)
    whole_blocks: list[str] = []
    assert html == render_markdown(text, whole_blocks)
    assert md.code_blocks == whole_blocks


@pytest.mark.parametrize(
    "text",
    [
        "para\n- list right after\n- x\n# heading\ntext\n",
        "x\na | b\n|-|-|\n| 1 | 2 |\nrow\n\ny\n",  # a table interrupting a paragraph
        "- a\n\n  b\n\n- c\n\nd\n* e\n+ f\n",  # loose list, list type changes
        "Intro:\n\n1. **Step**\n   ```bash\n   ls\n\n   pwd\n   ```\n2. Next\n\nDone.\n",  # fence in a list
        "````\n```\ninner\n```\n````\n~~~\nt\n~~~\nafter\n",
        "[ref]: https://example.com\n\nSee [ref] and [ref][].\n",  # reference defined before use
        "Title\n=====\nText\n***\n> quote\n# h\n",
    ],
)
def test_streamed_tricky_documents_match_whole_render(text: str) -> None:
    for seed in range(30):
        assert stream(text, seed, max_chunk=4)[0] == render_markdown(text)


def test_finish_completes_the_tail() -> None:
    md = MarkdownStream()
    tail = md.feed("Some *text* still growing").tail_html
    final = md.finish()
    assert final == StreamUpdate(tail, "")
    assert md.tail_text == ""


def test_crlf_split_across_deltas() -> None:
    text = "para one\r\n\r\n```\r\ncode\r\n```\r\nend"
    md = MarkdownStream()
    updates = [md.feed(text[i : i + 1]) for i in range(len(text))]
    html = "".join(u.completed_html for u in updates) + updates[-1].tail_html
    assert html == render_markdown(text.replace("\r\n", "\n"))


# -- MarkdownStream: what counts as completed ------------------------------------------------------------


def test_open_fence_keeps_everything_in_the_tail() -> None:
    md = MarkdownStream()
    first = md.feed("Before.\n\n```\ncode\n\n# not a heading\n\nmore\n")
    assert first.completed_html == "<p>Before.</p>\n"
    assert md.tail_text.startswith("```")
    second = md.feed("\nstill code\n")
    assert second.completed_html == ""
    closed = md.feed("```\n\nAfter.\n")
    assert "still code" in closed.completed_html and "<p>After.</p>" in closed.tail_html


def test_paragraph_completes_only_after_next_block_starts() -> None:
    md = MarkdownStream()
    assert md.feed("One paragraph\n").completed_html == ""
    assert md.feed("\n").completed_html == ""  # nothing follows yet
    assert md.feed("Next").completed_html == ""  # the next line may still become anything
    assert md.feed(" one\n").completed_html == "<p>One paragraph</p>\n"
    assert md.tail_text == "Next one\n"


def test_list_stays_open_across_blank_lines() -> None:
    md = MarkdownStream()
    assert md.feed("- a\n\n- b\n\n").completed_html == ""
    done = md.feed("after\n").completed_html
    assert done == render_markdown("- a\n\n- b\n")  # one loose list, not two lists


def test_code_blocks_of_the_tail_are_replaced() -> None:
    blocks = ["from an earlier message"]
    md = MarkdownStream(blocks)
    md.feed("```\nfirst")
    assert blocks == ["from an earlier message", "first"]
    md.feed(" line\n```\n\nText\n")
    assert blocks == ["from an earlier message", "first line"]
    md.feed("```\nsecond\n")
    assert blocks == ["from an earlier message", "first line", "second"]


# -- MarkdownStream: cost --------------------------------------------------------------------------------


def test_work_per_feed_does_not_grow_with_the_reply() -> None:
    text = long_document(40)
    tokens = re.findall(r"\S+\s*|\s+", text)
    assert len(tokens) > 3000
    md = MarkdownStream()
    work = []
    for token in tokens:
        before = md.rendered_chars
        md.feed(token)
        work.append(md.rendered_chars - before)
    early, late = statistics.median(work[:200]), statistics.median(work[-200:])
    assert late <= 2 * early + 50
    # no feed ever touches more than a couple of sections' worth of text, however long the reply grows
    assert max(work) <= 3 * len(SECTION)
    assert sum(work) < 40 * len(text)
