"""Code blocks coloured with Pygments: classes in the HTML, colours per palette that read on the code background,
complete blocks only while a reply streams, unknown and unlabelled blocks plain."""

from __future__ import annotations

import re

import pytest

from app.core.chat import code_colours, code_highlight
from app.core.chat.code_highlight import contrast, highlight, highlight_css, readable, style_table
from app.core.chat.markdown import MarkdownStream, render_markdown

FENCE = "Here:\n\n```python\ndef area(r):\n    return 3.14 * r ** 2  # circle\n```\n\nDone.\n"


@pytest.fixture(autouse=True)
def _prepared() -> None:
    code_highlight.prepare(("python",))


def test_a_labelled_fence_is_coloured_with_classes_and_the_text_kept() -> None:
    out = render_markdown(FENCE)
    assert '<span class="hl-k">def</span>' in out and '<span class="hl-c1"># circle</span>' in out
    code = re.search(r'<pre class="code"[^>]*>(.*?)</pre>', out, re.S)
    assert code is not None
    assert re.sub(r"<[^>]+>", "", code.group(1)) == "def area(r):\n    return 3.14 * r ** 2  # circle"
    blocks: list[str] = []
    render_markdown(FENCE, blocks)
    assert blocks == ["def area(r):\n    return 3.14 * r ** 2  # circle"]  # "Copy code" copies the plain text


def test_unknown_unlabelled_and_switched_off_blocks_stay_plain() -> None:
    assert highlight("x = 1", "no-such-language") is None
    assert "<span" not in render_markdown("```\nx = 1 <b>\n```\n")  # no guessing
    assert "x = 1 &lt;b&gt;" in render_markdown("```\nx = 1 <b>\n```\n")
    assert "<span" not in render_markdown(FENCE, highlight=False)
    assert highlight("x" * (code_highlight.MAX_CODE_CHARS + 1), "python") is None


def test_model_html_inside_code_is_escaped_when_coloured() -> None:
    out = render_markdown('```python\ns = "<script>alert(1)</script>"\n```\n')
    assert "<script>" not in out and "&lt;script&gt;" in out


def test_a_streaming_block_is_plain_until_complete_then_coloured_once() -> None:
    stream = MarkdownStream()
    update = stream.feed("```python\ndef f():\n    return 1\n")
    assert "<span" not in update.tail_html and "def f():" in update.tail_html  # still open: plain
    update = stream.feed("```\n\nAfter.\n")
    assert '<span class="hl-k">def</span>' in update.completed_html  # closed and committed: coloured
    assert "<span" not in update.tail_html


@pytest.mark.parametrize(("dark", "background"), [(False, "#f2f2f2"), (True, "#2b2d31"), (True, "#000000")])
def test_every_colour_reads_on_the_code_background(dark: bool, background: str) -> None:
    css = highlight_css(dark, background)
    colours = re.findall(r"color: (#[0-9a-f]{6});", css)
    assert len(colours) > 20
    back = code_highlight._rgb(background)
    assert min(contrast(code_highlight._rgb(c), back) for c in colours) >= code_highlight.MIN_CONTRAST
    assert "span.hl-k {" in css and "font-weight: 600;" in css


def test_readable_darkens_or_lightens_only_what_is_too_faint() -> None:
    assert readable("000000", "#ffffff") == "#000000"  # already readable: unchanged
    faint = readable("dddddd", "#ffffff")
    assert contrast(code_highlight._rgb(faint), (255, 255, 255)) >= 4.5
    assert contrast(code_highlight._rgb(readable("222222", "#111111")), (17, 17, 17)) >= 4.5


def test_the_copied_style_tables_match_pygments() -> None:
    assert style_table(code_highlight.LIGHT_STYLE) == code_colours.LIGHT
    assert style_table(code_highlight.DARK_STYLE) == code_colours.DARK
