"""Markdown tables too large to lay out, and where a table's rows end, found without parsing cells.

markdown-it's table rule splits every row into cells in Python and makes three tokens per cell: a 5000×50 table
takes seconds, and Qt takes longer still to lay it out. :func:`big_table` runs before that rule: it finds where a
table ends with the same per-line tests (:func:`table_rows`, which counts cells only for the rule's limit on
padded cells) and, above :data:`MAX_TABLE_CELLS`, makes one ``table_text`` token of the table's lines, shown as
preformatted text (the first :data:`TABLE_TEXT_CHARS` of it) under a note with a "Copy table" link.

This mirrors the row loop of ``markdown_it.rules_block.table`` (markdown-it-py 4); the tests compare the two.
"""

from __future__ import annotations

import functools
import html
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the rules run inside markdown-it, which the chat imports on its first render
    from markdown_it.rules_block.state_block import StateBlock
    from markdown_it.token import Token

__all__ = ["MAX_TABLE_CELLS", "TABLE_TEXT_CHARS", "big_table", "row_cells", "table_rows", "table_text_html"]

MAX_TABLE_CELLS = 1000  # above this (header included) a table is shown as text: Qt takes ~0.1 ms a cell
TABLE_TEXT_CHARS = 64_000  # how much of a table shown as text is put in the document (the rest: Copy table)


@functools.cache
def _table_module() -> Any:
    """markdown-it's table rule module (not the function ``markdown_it.rules_block`` exports under that name)."""
    return importlib.import_module("markdown_it.rules_block.table")


def _autocomplete_limit() -> int | None:
    return getattr(_table_module(), "MAX_AUTOCOMPLETED_CELLS", None)


def row_cells(text: str) -> int:
    """How many cells markdown-it's table rule finds in a trimmed line (outer pipes dropped)."""
    parts = _table_module().escapedSplit(text) if "\\" in text else text.split("|")
    low, high = 0, len(parts)
    if high > low and parts[low] == "":
        low += 1
    if high > low and parts[high - 1] == "":
        high -= 1
    return high - low


def _line(state: StateBlock, line: int) -> str:
    from markdown_it.common.utils import mdTrim  # loaded already: the caller is markdown-it

    return mdTrim(state.src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]])


def table_rows(state: StateBlock, first: int, stop: int, columns: int, padded: int = 0) -> tuple[int, int, bool]:
    """Scan body rows from line ``first`` up to (not including) ``stop``, as the table rule does.

    ``padded`` is the running count of cells the rule pads (it ends a table past a limit). Returns the line
    where the rows end (``stop`` when all are rows), the new padded count, and whether that limit ended it.
    """
    terminators = state.md.block.ruler.getRules("blockquote")
    limit = _autocomplete_limit()
    parent, state.parentType = state.parentType, "table"
    line = first
    try:
        while line < stop:
            if state.sCount[line] < state.blkIndent:
                break
            if any(rule(state, line, stop, True) for rule in terminators):  # these look at one line
                break
            text = _line(state, line)
            if not text or state.is_code_block(line):
                break
            count = padded + columns - row_cells(text)
            if limit is not None and count > limit:
                return line, padded, True
            padded = count
            line += 1
    finally:
        state.parentType = parent
    return line, padded, False


def big_table(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """Block rule: a table above MAX_TABLE_CELLS cells becomes one ``table_text`` token of its lines."""
    if not _table_module().table(state, start, end, True):
        return False
    columns = row_cells(_line(state, start))
    stop = table_rows(state, start + 2, end, columns)[0]
    if (stop - start - 1) * columns <= MAX_TABLE_CELLS:
        return False  # small enough: markdown-it's table rule makes a real table of it
    if silent:
        return True
    token = state.push("table_text", "", 0)
    token.map = [start, stop]
    token.content = state.getLines(start, stop, state.blkIndent, False)
    token.meta = {"rows": stop - start - 2, "columns": columns}
    state.line = stop
    return True


def table_text_html(token: Token, index: int, pre_style: str) -> str:
    """A ``table_text`` token's HTML; ``index`` numbers its "Copy table" link (``copy-code:N``)."""
    text = token.content
    shown = text if len(text) <= TABLE_TEXT_CHARS else text[: text.rfind("\n", 0, TABLE_TEXT_CHARS) + 1]
    rows, columns = token.meta["rows"], token.meta["columns"]
    note = f"Table of {rows:,} rows × {columns} columns, shown as text: too large to lay out."
    out = [
        f'<p class="code-actions">{html.escape(note)} <a href="copy-code:{index}">Copy table</a></p>\n',
        f'<pre class="code" style="{html.escape(pre_style)}">{html.escape(shown.rstrip())}</pre>\n',
    ]
    if rest := text[len(shown) :]:
        hidden = rest.count("\n") + 1  # the token's text has no final newline
        out.append(f'<p class="note">{hidden:,} more rows not shown: Copy table copies the whole table.</p>\n')
    return "".join(out)
