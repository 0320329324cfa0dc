"""Markdown rendering, whole and streamed: same HTML, and per-feed work that does not grow with the reply."""

from __future__ import annotations

import random
import re
import statistics

import pytest
from markdown_it import MarkdownIt

from app.core import markdown_tables
from app.core.chat import markdown as markdown_stream
from app.core.chat.markdown import LIVE_TABLE_ROWS, MarkdownStream, StreamUpdate, render_markdown
from app.core.markdown_tables import MAX_TABLE_CELLS, TABLE_TEXT_CHARS, row_cells

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
    out = render_markdown("hi <script>alert(1)</script> <b class='x'>bold</b>\n\n<div onclick='x'>block</div>")
    assert "<script>" not in out and "<b" not in out and "<div" not in out  # the safe inline tags: test_inline_html
    assert "&lt;script&gt;" in out and "&lt;div onclick=" in out and "&lt;b class=" in out


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
    assert "&lt;" in out and "1 < 2" not in out  # escaped in the HTML (coloured: in spans), exact in the text
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


# -- images: never loaded ------------------------------------------------------------------------------------


def test_images_become_links_never_img() -> None:
    out = render_markdown(
        "![a *cat*](http://127.0.0.1:9/cat.png) ![](https://example.com/x.png)\n\n"
        "[![badge](https://example.com/b.svg)](https://example.com/) ![local](file:///etc/passwd)"
    )
    assert "<img" not in out
    assert '<a href="http://127.0.0.1:9/cat.png">[image: a cat]</a>' in out
    assert '<a href="https://example.com/x.png">[image]</a>' in out
    assert '<a href="https://example.com/">[image: badge]</a>' in out  # inside a link: no nested <a>
    assert "![local](file:///etc/passwd)" in out  # not a web link: plain text, as before


# -- tables too large to lay out -------------------------------------------------------------------------------


def table(rows: int, columns: int, first: int = 0) -> str:
    head = "| " + " | ".join(f"h{j}" for j in range(columns)) + " |\n|" + "---|" * columns + "\n"
    return head + "".join("| " + " | ".join(f"{i}.{j}" for j in range(columns)) + " |\n" for i in range(first, rows))


def test_huge_table_is_bounded_text_with_a_copy_link() -> None:
    text = table(5000, 50)
    blocks: list[str] = ["earlier"]
    out = render_markdown(text, blocks)  # its cost is `llm-workstation bench render`; here, what it renders
    assert "<table" not in out and "<td" not in out
    assert "Table of 5,000 rows × 50 columns, shown as text" in out
    assert '<a href="copy-code:1">Copy table</a>' in out
    assert blocks == ["earlier", text.removesuffix("\n")]  # Copy table copies all of it
    assert len(out) < TABLE_TEXT_CHARS + 2000  # only the first rows go into the document
    shown = int(re.search(r"<p class=\"note\">([\d,]+) more rows not shown", out)[1].replace(",", ""))
    assert out.count("\n| ") + shown == 5000  # every row is shown or counted


def test_tables_up_to_the_limit_stay_tables() -> None:
    columns = 10
    rows = MAX_TABLE_CELLS // columns - 1  # header + rows = the limit
    assert "<table>" in render_markdown(table(rows, columns))
    assert "<table>" not in render_markdown(table(rows + 1, columns))
    assert "shown as text" in render_markdown(table(rows + 1, columns))


TABLE_ENDINGS = [
    "| a | b |\n|---|:-:|\n| 1 | 2 |\nno pipe row\n\nafter",
    "| a | b |\n|---|---|\n| 1 |\n| 1 | 2 | 3 |\n# heading\n| x |",
    "| a | b |\n|---|---|\n| 1 \\| 2 | 3 |\n> quote\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n```\ncode\n```\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n- item\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n***\n",
    "| a | b |\n|---|---|\n| 1 | 2 |\n    | indented |\n",
    "| a | b |\n|---|---|\n`| x` | y\n|\n",
    "para\n| a | b |\n|---|---|\n| 1 | 2 |\n",  # a table interrupting a paragraph
    "- item\n\n  | a | b |\n  |---|---|\n  | 1 | 2 |\n  | 3 | 4 |\nlazy?\n",  # in a list
    "> | a | b |\n> |---|---|\n> | 1 | 2 |\n> # h\n",  # in a blockquote
    "| " + " | ".join("c" * 300) + " |\n" + "|-" * 300 + "|\n" + "| x |\n" * 300,  # padded-cell limit
]


@pytest.mark.parametrize("text", TABLE_ENDINGS)
def test_large_table_rule_ends_tables_where_markdown_it_does(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = MarkdownIt("commonmark").enable("table")
    expected = [t.map for t in plain.parse(text) if t.type == "table_open"]
    monkeypatch.setattr(markdown_tables, "MAX_TABLE_CELLS", 0)  # every table counts as large
    tokens = markdown_stream._parser().parse(text)
    assert not [t for t in tokens if t.type == "table_open"]
    assert [t.map for t in tokens if t.type == "table_text"] == expected
    assert expected  # the case has a table


def test_row_cells_counts_as_the_table_rule_does() -> None:
    assert [row_cells(t) for t in ["|", "a", "|a|", "a|b", "|a|b|c|", "a \\| b | c", "||", "| |"]] == [
        0,
        1,
        1,
        2,
        3,
        2,
        1,
        1,
    ]


# -- streamed tables: rows appended as text, rendered once -----------------------------------------------------


def feed_all(md: MarkdownStream, text: str, seed: int, max_chunk: int) -> list[StreamUpdate]:
    rnd = random.Random(seed)
    updates, i = [], 0
    while i < len(text):
        n = rnd.randint(1, max_chunk)
        updates.append(md.feed(text[i : i + n]))
        i += n
    return updates


STREAMED_TABLES = [
    "Intro\n\n" + table(30, 4) + "\nAfter.\n",
    table(30, 4) + "# Heading\ntext",
    table(30, 4) + "> quote\n" + table(12, 3) + "```\ncode\n```\n",
    table(600, 5) + "\n" + table(40, 2) + "\n\n" + table(40, 2),  # text, then two tables in a row
    "x\n" + table(25, 3) + "    indented\nmore",
    table(20, 3) + "no pipes row\n\npara",
    "```\nfirst\n```\n" + table(40, 3) + "```\nsecond\n```\n",  # code blocks numbered around a table
    table(15, 2),  # ended by the end of the stream, no final newline
    TABLE_ENDINGS[-1] + "more lazy\n\nend",  # the padded-cell limit ends it mid-way
]


@pytest.mark.parametrize("text", STREAMED_TABLES)
def test_streamed_tables_match_whole_render(text: str) -> None:
    for seed in range(4):
        md = MarkdownStream()
        updates = [*feed_all(md, text, seed, 40), md.finish()]
        blocks: list[str] = []
        assert "".join(u.completed_html for u in updates) == render_markdown(text, blocks)
        assert md.code_blocks == blocks


def test_long_table_streams_as_text_and_renders_once() -> None:
    md = MarkdownStream()
    head = table(0, 3)
    assert md.feed("Intro\n\n" + head).completed_html == "<p>Intro</p>\n"
    rows = [f"| {i} | **{i}** | <{i}> |\n" for i in range(LIVE_TABLE_ROWS + 30)]
    live = [md.feed(row) for row in rows[:LIVE_TABLE_ROWS]]
    assert "<table>" in live[-1].tail_html  # a short table is live: re-rendered as it grows
    enter = md.feed(rows[LIVE_TABLE_ROWS])
    assert enter.completed_html == "" and "<table>" not in enter.tail_html
    assert "shown as text while it streams" in enter.preview_html and "| 0 | **0** | &lt;0&gt; |" in enter.preview_html
    for i, row in enumerate(rows[LIVE_TABLE_ROWS + 1 :], LIVE_TABLE_ROWS + 1):
        update = md.feed(row[:5])
        assert update.preview_html == "" and md.tail_text == row[:5]  # the row being written: tail only
        update = md.feed(row[5:])
        assert update.completed_html == "" and update.tail_html == ""
        assert re.findall(r"\| (\d+) \|", update.preview_html) == [str(i)]  # only the new row
    done = md.feed("\nAfter.\n")
    assert done.completed_html == render_markdown(head + "".join(rows))  # the whole table, rendered once
    assert done.preview_html == "" and done.tail_html == "<p>After.</p>\n"


def test_streamed_table_work_per_row_does_not_grow() -> None:
    md = MarkdownStream()
    md.feed("Some text first.\n\n" + table(0, 6))
    work = []
    for i in range(400):
        row = "| " + " | ".join(f"cell {i}.{j} with *words*" for j in range(6)) + " |\n"
        for piece in re.findall(r"\S+\s*", row):  # token by token
            before = md.rendered_chars
            md.feed(piece)
            work.append(md.rendered_chars - before)
    per_row = len(work) // 400
    early, late = sum(work[20 * per_row : 30 * per_row]), sum(work[390 * per_row :])
    assert late <= 1.2 * early  # the 400th row costs what the 20th did
    assert max(work[20 * per_row :]) < 200  # never the table so far, only the row being written


def test_rows_past_the_text_limit_are_counted_not_shown() -> None:
    md = MarkdownStream()
    row = "| " + " | ".join("x" * 40 for _ in range(5)) + " |\n"
    rows_shown = TABLE_TEXT_CHARS // len(row)
    updates = [md.feed(table(0, 5))] + [md.feed(row) for _ in range(rows_shown + 50)]
    shown = "".join(u.preview_html for u in updates)
    assert shown.count("x" * 40) == 5 * rows_shown
    assert updates[-1].tail_html == '<p class="note">… 50 more rows so far.</p>\n'
    final = md.finish().completed_html
    assert "more rows not shown" in final  # rendered once, as text: the table is too large to lay out
