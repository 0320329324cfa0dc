"""Markdown to HTML for chat replies, whole or incrementally while tokens stream in.

Model output is untrusted: raw HTML in it is escaped (but for the bare inline tags models write, ``<b>``, ``<i>``,
``<br>`` …, see :mod:`app.core.chat.inline_html`), and links may only point to http(s) or mailto, so a reply
cannot forge the view's own action links (``copy-code:N``, ``edit:N``, ...).

Fenced and indented code blocks become ``<pre class="code">`` preceded by a ``copy-code:N`` link; N is the
index of the block's text in a caller-supplied list, so one list can number every block of a document. A fence
that names its language is coloured by :mod:`app.core.chat.code_highlight` (classes; the colours are the
palette's style sheet) once the block is complete: a block still streaming is shown plain.

Nothing in a reply loads anything: an image becomes a link to it (``[image: alt]``), never ``<img>``. A table
above :data:`~app.core.markdown_tables.MAX_TABLE_CELLS` cells is shown as text with a "Copy table" link.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # markdown-it (~90 ms) is imported on the first render, not with the window
    from markdown_it import MarkdownIt
    from markdown_it.rules_core.state_core import StateCore
    from markdown_it.token import Token

from app.core.chat import code_highlight
from app.core.chat.inline_html import safe_inline_html
from app.core.markdown_tables import TABLE_TEXT_CHARS, big_table, row_cells, table_rows, table_text_html

__all__ = ["LIVE_TABLE_ROWS", "MarkdownStream", "StreamUpdate", "render_markdown"]

_SAFE_LINK_PREFIXES = ("http://", "https://", "mailto:")
# Blocks that nothing on a following line can extend or turn into something else.
_CLOSED_BLOCKS = frozenset({"heading_open", "hr", "fence", "code_block"})
_TABLE_TOKENS = frozenset({"table_open", "table_text"})
_CODE_BLOCKS_KEY = "code_blocks"
_CODE_FONT_KEY = "code_font"
_HIGHLIGHT_KEY = "highlight"  # colour fenced code with a language (complete blocks only)
# A streamed table with more body rows than this is shown as text while it grows (rows appended, never
# re-rendered) and rendered once, when it is complete: re-rendering a table costs in proportion to its size.
LIVE_TABLE_ROWS = 10


def _safe_link(url: str) -> bool:
    return url.strip().lower().startswith(_SAFE_LINK_PREFIXES)


def _pre_style(font: str, extra: str = "") -> str:
    return f"font-family: {font}; white-space: pre-wrap;{extra}"


def _add_block(env: dict[str, Any], text: str) -> int:
    """Keep ``text`` for a copy link; returns its index."""
    blocks: list[str] = env.setdefault(_CODE_BLOCKS_KEY, [])
    blocks.append(text)
    return len(blocks) - 1


def _render_code(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, env: dict[str, Any]) -> str:
    """A code block with a "Copy code" link above it; its text goes to ``env["code_blocks"]``."""
    token = tokens[idx]
    code = token.content.removesuffix("\n")
    n = _add_block(env, code)
    style = html.escape(_pre_style(env.get(_CODE_FONT_KEY, "monospace")))
    body = _code_html(code.rstrip(), token.info.split(maxsplit=1)[0] if token.info.strip() else "", env)
    return (
        f'<p class="code-actions"><a href="copy-code:{n}">Copy code</a></p>\n'
        f'<pre class="code" style="{style}">{body}</pre>\n'
    )


def _code_html(code: str, language: str, env: dict[str, Any]) -> str:
    """A block's text as HTML: coloured when its language is known and highlighting is on, else escaped."""
    if language and env.get(_HIGHLIGHT_KEY):
        coloured = code_highlight.highlight(code, language)
        if coloured is not None:
            return coloured
    return html.escape(code)


def _render_table_text(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, env: dict[str, Any]) -> str:
    """A table too large to lay out (see :mod:`app.core.markdown_tables`); its text goes to the code blocks."""
    return table_text_html(
        tokens[idx], _add_block(env, tokens[idx].content), _pre_style(env.get(_CODE_FONT_KEY, "monospace"))
    )


def _plain_text(tokens: list[Token]) -> str:
    """The text of inline tokens, markup dropped (an image's alt text)."""
    parts = []
    for token in tokens:
        if token.type in ("text", "code_inline"):
            parts.append(token.content)
        elif token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.children:
            parts.append(_plain_text(token.children))
    return "".join(parts)


def _images_as_links(state: StateCore) -> None:
    """Core rule: each image becomes a link to it labelled ``[image: alt]`` (inside a link, just the label)."""
    from markdown_it.token import Token

    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        out: list[Token] = []
        depth = 0  # links open around the current token
        for token in block.children:
            depth += token.nesting if token.type in ("link_open", "link_close") else 0
            if token.type != "image":
                out.append(token)
                continue
            alt = _plain_text(token.children or [])
            label = Token("text", "", 0, content=f"[image: {alt}]" if alt else "[image]")
            if depth:
                out.append(label)
            else:
                href = str(token.attrGet("src") or "")
                out += [Token("link_open", "a", 1, attrs={"href": href}), label, Token("link_close", "a", -1)]
        block.children = out


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.validateLink = _safe_link  # type: ignore[method-assign]
    md.block.ruler.before("table", "big_table", big_table)
    md.core.ruler.after("inline", "images_as_links", _images_as_links)
    md.core.ruler.after("images_as_links", "safe_inline_html", safe_inline_html)
    md.add_render_rule("fence", _render_code)
    md.add_render_rule("code_block", _render_code)
    md.add_render_rule("table_text", _render_table_text)
    return md


def render_markdown(
    text: str, code_blocks: list[str] | None = None, *, code_font: str = "monospace", highlight: bool = True
) -> str:
    """Render ``text`` (CommonMark + tables + strikethrough, raw HTML escaped) to HTML.

    The text of each code block (without its final newline) is appended to ``code_blocks`` when given; the
    block's "Copy code" link is ``copy-code:N`` with N its index in that list. ``code_font`` is the CSS
    ``font-family`` of code blocks; ``highlight`` colours fenced code that names its language.
    """
    env: dict[str, Any] = {
        _CODE_BLOCKS_KEY: code_blocks if code_blocks is not None else [],
        _CODE_FONT_KEY: code_font,
        _HIGHLIGHT_KEY: highlight,
    }
    return _parser().render(text, env)


@dataclass(frozen=True)
class StreamUpdate:
    """What one :meth:`MarkdownStream.feed` changed. The document reads: completed HTML, preview, tail.

    ``completed_html`` is appended once, after earlier completed HTML, and replaces the preview if there is one;
    ``preview_html`` is appended after the preview so far (a long table's rows, shown as text while it grows);
    ``tail_html`` replaces the previous tail. Any may be empty.
    """

    completed_html: str
    tail_html: str
    preview_html: str = ""


@dataclass
class _OpenTable:
    """A table streamed as text: its header lines and the body rows seen so far."""

    head: str
    columns: int
    rows: list[str] = field(default_factory=list)
    padded: int = 0  # cells the table rule pads so far (it ends a table past a limit)
    shown_chars: int = 0  # row text put in the preview so far
    hidden_rows: int = 0  # rows past TABLE_TEXT_CHARS: counted, not shown


class MarkdownStream:
    """Render a growing Markdown text incrementally.

    The text is split into completed top-level blocks, rendered once and never looked at again, and the
    tail: the last block(s), which the next delta may still change, re-rendered on every feed. A block is
    completed only when a full line of the next block follows it and nothing later can change how it
    renders (an open code fence keeps everything after it in the tail). Work per feed is proportional to
    the tail plus the delta, not to the whole text.

    A top-level table with more than ``live_table_rows`` (:data:`LIVE_TABLE_ROWS`) body rows leaves the tail:
    its complete rows go to the preview as text, each once (``tail_text`` is then only the line being
    written), and the table is rendered once, when a line that is not a row (or :meth:`finish`) ends it.

    Code block texts are kept in ``code_blocks`` (the list passed in, or a new one), numbered as by
    :func:`render_markdown`: entries of completed blocks stay; entries past them belong to the tail and are
    replaced on every feed. ``rendered_chars`` counts the characters handed to the Markdown parser, a
    measure of the work done.
    """

    live_table_rows = LIVE_TABLE_ROWS

    def __init__(self, code_blocks: list[str] | None = None, *, code_font: str = "monospace") -> None:
        self.code_blocks: list[str] = code_blocks if code_blocks is not None else []
        self._code_font = code_font
        self._committed_code = len(self.code_blocks)
        self._references: dict[str, Any] = {}  # link reference definitions from completed blocks
        self._tail = ""
        self._table: _OpenTable | None = None
        self._pending_cr = False
        self.rendered_chars = 0

    @property
    def tail_text(self) -> str:
        """The still-open part of the text (after a long table's complete rows, while it streams)."""
        return self._tail

    def feed(self, delta: str) -> StreamUpdate:
        """Add ``delta`` to the text; return the newly completed HTML, new preview HTML and the tail HTML."""
        self._tail += self._normalize(delta)
        completed: list[str] = []
        preview: list[str] = []
        while True:
            if self._table is not None:
                done = self._advance_table(preview)
                if done is None:
                    return StreamUpdate("".join(completed), self._table_tail_html(), "".join(preview))
                completed.append(done)
                preview.clear()  # the rendered table replaces its preview
                continue
            env, tokens = self._parse_tail()
            if split := self._split_offset(tokens):
                done, self._tail = self._tail[:split], self._tail[split:]
                completed.append(self._commit(done))
                env, tokens = self._parse_tail()
            if not self._open_table(tokens, preview):
                tail_html = _parser().renderer.render(tokens, _parser().options, env)
                return StreamUpdate("".join(completed), tail_html, "".join(preview))

    def finish(self) -> StreamUpdate:
        """End the stream: the tail becomes completed. Returns the final tail as ``completed_html``."""
        if self._pending_cr:
            self._pending_cr = False
            self._tail += "\n"
        done, self._tail = self._tail, ""
        if self._table is not None:
            done = self._table.head + "".join(self._table.rows) + done
            self._table = None
        return StreamUpdate(self._commit(done) if done else "", "")

    # -- internals ---------------------------------------------------------------------------------

    def _normalize(self, delta: str) -> str:
        """Line endings as markdown-it sees them (CRLF and CR become LF), even when split across deltas."""
        if self._pending_cr and delta.startswith("\n"):
            delta = delta[1:]
        self._pending_cr = delta.endswith("\r")
        return delta.replace("\r\n", "\n").replace("\r", "\n")

    def _tail_env(self, highlight: bool = False) -> dict[str, Any]:
        """A render environment: code blocks cut back to the completed ones, a copy of known references; code is
        coloured only in completed blocks (the tail is re-rendered on every feed)."""
        del self.code_blocks[self._committed_code :]
        return {
            _CODE_BLOCKS_KEY: self.code_blocks,
            _CODE_FONT_KEY: self._code_font,
            _HIGHLIGHT_KEY: highlight,
            "references": dict(self._references),
        }

    def _parse_tail(self) -> tuple[dict[str, Any], list[Token]]:
        env = self._tail_env()
        self.rendered_chars += len(self._tail)
        return env, _parser().parse(self._tail, env)

    def _commit(self, done: str) -> str:
        """Render completed text for good, keeping its code blocks and link references."""
        env = self._tail_env(highlight=True)
        self.rendered_chars += len(done)
        out = _parser().render(done, env)
        self._references = env.get("references", {})
        self._committed_code = len(self.code_blocks)
        return out

    def _split_offset(self, tokens: list[Token]) -> int:
        """Offset in the tail of the start of its last block whose predecessors are all final; 0 if none."""
        blocks = [t for t in tokens if t.level == 0 and t.nesting >= 0 and t.map]
        if len(blocks) < 2:
            return 0
        lines = self._tail.split("\n")
        complete = len(lines) - 1  # the last piece has no newline yet
        for prev, block in zip(reversed(blocks[:-1]), reversed(blocks[1:]), strict=True):
            start = block.map[0] if block.map else 0
            if start < complete and self._is_final(prev, start, lines, complete):
                return sum(len(line) + 1 for line in lines[:start])
        return 0

    @staticmethod
    def _is_final(prev: Token, start: int, lines: list[str], complete: int) -> bool:
        """Whether the block before line ``start`` (itself complete) can no longer change."""
        if not lines[start - 1].strip(" \t"):
            return True  # only lists and indented code span blank lines, and line ``start`` decided those
        if prev.map is None or prev.map[1] != start:
            return False  # lines no token covers (a link reference definition) may still grow
        # A table can interrupt a paragraph and is only recognised with its next line: wait for that too.
        return prev.type in _CLOSED_BLOCKS or start + 1 < complete

    # -- long tables: streamed as text, rendered once ------------------------------------------------------

    def _open_table(self, tokens: list[Token], preview: list[str]) -> bool:
        """Stream the tail's first block as text if it is a table past ``live_table_rows`` body rows."""
        first = tokens[0] if tokens else None
        if first is None or first.type not in _TABLE_TOKENS or first.level != 0 or not first.map:
            return False
        start, end = first.map
        if end - start - 2 <= self.live_table_rows:
            return False
        lines = self._tail.split("\n", start + 2)
        if any(line.strip(" \t") for line in lines[:start]):
            return False  # a link reference definition before it: left to the general path
        head = f"{lines[start]}\n{lines[start + 1]}\n"
        self._tail = lines[start + 2]
        from markdown_it.common.utils import mdTrim

        self._table = _OpenTable(head, row_cells(mdTrim(lines[start])))
        note = '<p class="note">A long table: shown as text while it streams.</p>\n'
        preview.append(note + self._preview_html(head))
        return True

    def _advance_table(self, preview: list[str]) -> str | None:
        """Move the tail's complete rows to the preview; once a line ends the table, return its HTML."""
        table = self._table
        assert table is not None
        complete = self._tail.count("\n")
        if not complete:
            return None
        from markdown_it.rules_block.state_block import StateBlock

        state = StateBlock(self._tail, _parser(), {}, [])
        self.rendered_chars += len(self._tail)
        end, table.padded, _ = table_rows(state, 0, complete, table.columns, table.padded)
        if end:
            cut = state.eMarks[end - 1] + 1
            rows, self._tail = self._tail[:cut], self._tail[cut:]
            table.rows.append(rows)
            preview.append(self._show_rows(table, rows))
        if end == complete:
            return None
        self._table = None  # a complete line that is no row: the table has ended
        return self._commit(table.head + "".join(table.rows))

    def _show_rows(self, table: _OpenTable, rows: str) -> str:
        """Preview HTML for new rows, up to TABLE_TEXT_CHARS of them in all; later ones are only counted."""
        room = TABLE_TEXT_CHARS - table.shown_chars
        if table.hidden_rows or len(rows) > room:
            cut = 0 if table.hidden_rows else rows.rfind("\n", 0, room) + 1
            table.hidden_rows += rows.count("\n", cut)
            rows = rows[:cut]
        table.shown_chars += len(rows)
        return self._preview_html(rows) if rows else ""

    def _table_tail_html(self) -> str:
        table = self._table
        assert table is not None
        if table.hidden_rows:
            return f'<p class="note">… {table.hidden_rows:,} more rows so far.</p>\n'
        return self._preview_html(self._tail) if self._tail.strip() else ""

    def _preview_html(self, text: str) -> str:
        style = html.escape(_pre_style(self._code_font, " margin-top: 0px; margin-bottom: 0px;"))
        body = html.escape(text.removesuffix("\n"))
        return f'<pre class="table-stream" style="{style}">{body}</pre>\n'
