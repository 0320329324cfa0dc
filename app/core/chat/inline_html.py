"""The few inline HTML tags models write in replies (``<b>``, ``<i>``, ``<em>``, ``<strong>``, ``<sub>``, ``<sup>``,
``<code>``, ``<br>``), kept as formatting; every other tag stays escaped text.

A markdown-it core rule (the parser keeps ``html`` off, so raw HTML arrives as text): in each paragraph's text, a
tag is taken only in its bare form (no attribute is ever honoured, so ``<b onclick=…>`` stays text) and only when
it pairs up with its closing tag in the same paragraph (``<br>`` needs none); an unpaired tag stays text, so a
stray ``<b>`` cannot embolden the rest of the reply. Text a backslash escaped (``\\<b>``) stays text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it.rules_core.state_core import StateCore
    from markdown_it.token import Token

PAIRED_TAGS = frozenset({"b", "i", "em", "strong", "sub", "sup", "code"})
_TAG = re.compile(r"<(/?)(b|i|em|strong|sub|sup|code)>|<br\s*/?>", re.IGNORECASE)


def safe_inline_html(state: StateCore) -> None:
    """Core rule: the safe tags in inline text become ``html_inline`` tokens; the rest is left as text."""
    for block in state.tokens:
        if block.type == "inline" and block.children and "<" in block.content:
            block.children = _with_tags(block.children)


def _with_tags(children: list[Token]) -> list[Token]:
    pieces = [_split(token) if token.type == "text" else [token] for token in children]
    flat = [piece for group in pieces for piece in group]
    paired = _paired(flat)
    return [_as_html(piece) if index in paired else _as_text(piece) for index, piece in enumerate(flat)]


def _split(token: Token) -> list[Token]:
    """A text token cut at each tag: text pieces and tag pieces (tag pieces are marked with ``meta["tag"]``)."""
    from markdown_it.token import Token

    out: list[Token] = []
    at = 0
    for match in _TAG.finditer(token.content):
        if match.start() > at:
            out.append(Token("text", "", 0, content=token.content[at : match.start()]))
        name = (match.group(2) or "br").lower()
        closing = bool(match.group(1))
        out.append(Token("text", "", 0, content=match.group(0), meta={"tag": name, "closing": closing}))
        at = match.end()
    if at < len(token.content):
        out.append(Token("text", "", 0, content=token.content[at:]))
    return out or [token]


def _paired(pieces: list[Token]) -> set[int]:
    """The indexes of the tag pieces to honour: every ``<br>``, and each open tag with the close that matches it,
    properly nested among themselves and with the Markdown around them (``*<b>x*</b>`` stays text)."""
    honoured: set[int] = set()
    open_tags: list[tuple[str, int]] = []  # ("", -1) marks a Markdown span (emphasis, a link) opened
    for index, piece in enumerate(pieces):
        name = piece.meta.get("tag") if piece.meta else None
        if name is None:
            if piece.nesting == 1:
                open_tags.append(("", -1))
            elif piece.nesting == -1:
                while open_tags and open_tags.pop()[0]:  # a tag opened inside the span and not closed there
                    pass
        elif name == "br":
            honoured.add(index)
        elif not piece.meta["closing"]:
            open_tags.append((name, index))
        elif open_tags and open_tags[-1][0] == name:
            honoured |= {open_tags.pop()[1], index}
    return honoured


def _as_html(piece: Token) -> Token:
    from markdown_it.token import Token

    name, closing = piece.meta["tag"], piece.meta.get("closing", False)
    return Token("html_inline", "", 0, content="<br>" if name == "br" else f"<{'/' if closing else ''}{name}>")


def _as_text(piece: Token) -> Token:
    if piece.meta:
        piece.meta = {}
    return piece
