"""Markdown to HTML for chat replies, whole or incrementally while tokens stream in.

Model output is untrusted: raw HTML in it is escaped, and links may only point to http(s) or mailto,
so a reply cannot forge the view's own action links (``copy-code:N``, ``edit:N``, ...).

Fenced and indented code blocks become ``<pre class="code">`` preceded by a ``copy-code:N`` link; N is the
index of the block's text in a caller-supplied list, so one list can number every block of a document.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["MarkdownStream", "StreamUpdate", "render_markdown"]

_SAFE_LINK_PREFIXES = ("http://", "https://", "mailto:")
# Blocks that nothing on a following line can extend or turn into something else.
_CLOSED_BLOCKS = frozenset({"heading_open", "hr", "fence", "code_block"})
_CODE_BLOCKS_KEY = "code_blocks"
_CODE_FONT_KEY = "code_font"


def _safe_link(url: str) -> bool:
    return url.strip().lower().startswith(_SAFE_LINK_PREFIXES)


def _render_code(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, env: dict[str, Any]) -> str:
    """A code block with a "Copy code" link above it; its text goes to ``env["code_blocks"]``."""
    code = tokens[idx].content.removesuffix("\n")
    blocks: list[str] = env.setdefault(_CODE_BLOCKS_KEY, [])
    n = len(blocks)
    blocks.append(code)
    style = html.escape(f"font-family: {env.get(_CODE_FONT_KEY, 'monospace')}; white-space: pre-wrap;")
    return (
        f'<p class="code-actions"><a href="copy-code:{n}">Copy code</a></p>\n'
        f'<pre class="code" style="{style}">{html.escape(code.rstrip())}</pre>\n'
    )


def _make_parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.validateLink = _safe_link  # type: ignore[method-assign]
    md.add_render_rule("fence", _render_code)
    md.add_render_rule("code_block", _render_code)
    return md


_MD = _make_parser()


def render_markdown(text: str, code_blocks: list[str] | None = None, *, code_font: str = "monospace") -> str:
    """Render ``text`` (CommonMark + tables + strikethrough, raw HTML escaped) to HTML.

    The text of each code block (without its final newline) is appended to ``code_blocks`` when given; the
    block's "Copy code" link is ``copy-code:N`` with N its index in that list. ``code_font`` is the CSS
    ``font-family`` of code blocks.
    """
    env: dict[str, Any] = {_CODE_BLOCKS_KEY: code_blocks if code_blocks is not None else [], _CODE_FONT_KEY: code_font}
    return _MD.render(text, env)


@dataclass(frozen=True)
class StreamUpdate:
    """What one :meth:`MarkdownStream.feed` changed.

    ``completed_html`` is appended once, after earlier completed HTML; ``tail_html`` replaces the previous
    tail. Either may be empty.
    """

    completed_html: str
    tail_html: str


class MarkdownStream:
    """Render a growing Markdown text incrementally.

    The text is split into completed top-level blocks, rendered once and never looked at again, and the
    tail: the last block(s), which the next delta may still change, re-rendered on every feed. A block is
    completed only when a full line of the next block follows it and nothing later can change how it
    renders (an open code fence keeps everything after it in the tail). Work per feed is proportional to
    the tail plus the delta, not to the whole text.

    Code block texts are kept in ``code_blocks`` (the list passed in, or a new one), numbered as by
    :func:`render_markdown`: entries of completed blocks stay; entries past them belong to the tail and are
    replaced on every feed. ``rendered_chars`` counts the characters handed to the Markdown parser, a
    measure of the work done.
    """

    def __init__(self, code_blocks: list[str] | None = None, *, code_font: str = "monospace") -> None:
        self.code_blocks: list[str] = code_blocks if code_blocks is not None else []
        self._code_font = code_font
        self._committed_code = len(self.code_blocks)
        self._references: dict[str, Any] = {}  # link reference definitions from completed blocks
        self._tail = ""
        self._pending_cr = False
        self.rendered_chars = 0

    @property
    def tail_text(self) -> str:
        """The still-open part of the text."""
        return self._tail

    def feed(self, delta: str) -> StreamUpdate:
        """Add ``delta`` to the text; return the newly completed HTML and the current tail HTML."""
        self._tail += self._normalize(delta)
        env = self._tail_env()
        tokens = _MD.parse(self._tail, env)
        self.rendered_chars += len(self._tail)
        split = self._split_offset(tokens)
        if not split:
            return StreamUpdate("", _MD.renderer.render(tokens, _MD.options, env))
        done, self._tail = self._tail[:split], self._tail[split:]
        return StreamUpdate(self._commit(done), self._render_tail())

    def finish(self) -> StreamUpdate:
        """End the stream: the tail becomes completed. Returns the final tail as ``completed_html``."""
        if self._pending_cr:
            self._pending_cr = False
            self._tail += "\n"
        done, self._tail = self._tail, ""
        return StreamUpdate(self._commit(done) if done else "", "")

    # -- internals ---------------------------------------------------------------------------------

    def _normalize(self, delta: str) -> str:
        """Line endings as markdown-it sees them (CRLF and CR become LF), even when split across deltas."""
        if self._pending_cr and delta.startswith("\n"):
            delta = delta[1:]
        self._pending_cr = delta.endswith("\r")
        return delta.replace("\r\n", "\n").replace("\r", "\n")

    def _tail_env(self) -> dict[str, Any]:
        """A render environment: code blocks cut back to the completed ones, a copy of known references."""
        del self.code_blocks[self._committed_code :]
        return {
            _CODE_BLOCKS_KEY: self.code_blocks,
            _CODE_FONT_KEY: self._code_font,
            "references": dict(self._references),
        }

    def _render_tail(self) -> str:
        self.rendered_chars += len(self._tail)
        return _MD.render(self._tail, self._tail_env())

    def _commit(self, done: str) -> str:
        """Render completed text for good, keeping its code blocks and link references."""
        env = self._tail_env()
        self.rendered_chars += len(done)
        out = _MD.render(done, env)
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
