"""Replies keep the bare inline tags models write (<b>, <i>, <em>, <strong>, <br>, <sub>, <sup>, <code>) as
formatting, and nothing else: other tags, tags with attributes, unpaired or misnested tags and escaped ones stay
text; whole and streamed renders agree."""

from __future__ import annotations

import pytest

from app.core.chat.markdown import MarkdownStream, render_markdown


def _p(html: str) -> str:
    return html.strip().removeprefix("<p>").removesuffix("</p>")


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("<b>bold</b> and <strong>strong</strong>", "<b>bold</b> and <strong>strong</strong>"),
        ("<i>i</i><em>em</em>", "<i>i</i><em>em</em>"),
        ("H<sub>2</sub>O, x<SUP>2</SUP>", "H<sub>2</sub>O, x<sup>2</sup>"),
        ("one<br>two<br/>three<br />four", "one<br>two<br>three<br>four"),
        ("run <code>ls</code>", "run <code>ls</code>"),
        ("<b>bold *and em*</b>", "<b>bold <em>and em</em></b>"),
    ],
)
def test_the_safe_inline_tags_are_formatting(text, html):
    assert _p(render_markdown(text)) == html


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ('<b onclick="x()">no</b>', "&lt;b onclick=&quot;x()&quot;&gt;no&lt;/b&gt;"),
        ("<b style='color:red'>no</b>", "&lt;b style='color:red'&gt;no&lt;/b&gt;"),
        ("a stray <b> opens nothing", "a stray &lt;b&gt; opens nothing"),
        ("closes </i> nothing", "closes &lt;/i&gt; nothing"),
        ("<b><i>crossed</b></i>", "&lt;b&gt;<i>crossed&lt;/b&gt;</i>"),
        ("*<b>across*</b>", "<em>&lt;b&gt;across</em>&lt;/b&gt;"),
        ("\\<b>escaped</b>", "&lt;b&gt;escaped&lt;/b&gt;"),
        ("`<b>in code</b>`", "<code>&lt;b&gt;in code&lt;/b&gt;</code>"),
        ("<a href='https://x'>link</a> <img src=x>", "&lt;a href='https://x'&gt;link&lt;/a&gt; &lt;img src=x&gt;"),
    ],
)
def test_everything_else_stays_text(text, html):
    assert _p(render_markdown(text)) == html


def test_a_block_of_html_stays_text_around_safe_tags():
    out = render_markdown("<div><b>x</b></div>\n\n<table><tr><td>1</td></tr></table>")
    assert "<div" not in out and "<table" not in out and "<b>x</b>" in out


def test_a_paragraph_does_not_pair_with_the_next():
    out = render_markdown("<b>first\n\nsecond</b>")
    assert "<b>" not in out and "</b>" not in out


def test_streamed_replies_render_the_tags_as_the_whole_reply_does():
    text = "A <b>bold</b> start<br>then H<sub>2</sub>O.\n\nA <i>second</i> paragraph <u>stays</u>.\n"
    stream = MarkdownStream()
    parts = [stream.feed(text[i : i + 3]).completed_html for i in range(0, len(text), 3)]
    parts.append(stream.finish().completed_html)
    assert "".join(parts) == render_markdown(text)
