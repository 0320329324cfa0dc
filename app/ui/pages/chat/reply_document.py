"""Markdown HTML into one message's QTextDocument: a whole message at once, or a reply as it streams.

While a reply streams, only its still-growing last block is re-rendered (see
:class:`app.core.chat.markdown.MarkdownStream`), so showing a token costs the same early and late; a long table's
rows are appended as text while it grows and the table rendered once, when complete.
"""

from __future__ import annotations

import re

from PySide6.QtGui import QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument

from app.core.chat.markdown import MarkdownStream, StreamUpdate, render_markdown

__all__ = ["ReplyDocumentStream", "message_html"]

_PLACEHOLDER = "x"
_EMPTY_ELEMENT = re.compile(r"<(t[dh]|pre|li|h[1-6]|p|blockquote)((?: [^>]*)?)>\s*</\1>")


def qt_html(block_html: str) -> str:
    """Markdown HTML adjusted for Qt: outer whitespace dropped, empty elements filled.

    Qt's importer drops or merges empty blocks (an empty code block, a table whose last cell is empty)
    depending on what follows, so the same HTML would lay out differently whole and in pieces; a no-break
    space keeps every block regular.
    """
    filled = _EMPTY_ELEMENT.sub(r"<\1\2>&nbsp;</\1>", block_html.strip())
    return filled.replace("<table>", '<table border="1" cellspacing="0" cellpadding="4">')  # Qt draws no grid


def message_html(text: str, code_blocks: list[str], code_font: str) -> str:
    """A whole assistant message as HTML for a message document; its code block texts go to ``code_blocks``."""
    return qt_html(render_markdown(text, code_blocks, code_font=code_font))


def _append_blocks(cursor: QTextCursor, block_html: str) -> int:
    """Append block-level HTML at the end of a non-empty document, each block keeping its own format.

    Qt merges an inserted fragment's first block into the block at the cursor, dropping its format (a
    heading would lose its size). So a throw-away paragraph goes first, in a new block, and is removed
    together with the separator before it: the document then reads exactly as if set in one go.
    Returns the end position, where the next append (or replacement) starts.
    """
    cursor.movePosition(QTextCursor.MoveOperation.End)
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
    start = cursor.position()
    cursor.insertHtml(f"<p>{_PLACEHOLDER}</p>{qt_html(block_html)}")
    cursor.setPosition(start - 1)
    cursor.setPosition(start + 1, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()
    cursor.movePosition(QTextCursor.MoveOperation.End)
    return cursor.position()


class ReplyDocumentStream:
    """A reply streamed into ``document``: completed blocks appended once, the tail replaced on each feed.

    The document reads: completed HTML, the preview (a long table's rows as text), the tail. Code block texts
    go to ``code_blocks`` (for "Copy code"), numbered as :func:`message_html` numbers them.
    """

    def __init__(self, document: QTextDocument, code_blocks: list[str], code_font: str) -> None:
        self.document = document
        self.markdown = MarkdownStream(code_blocks, code_font=code_font)
        self._tail_start = 0  # where the preview (if any) and the tail begin
        self._preview_end = 0  # where the tail begins
        self._tail_html = ""

    def feed(self, delta: str) -> None:
        self._apply(self.markdown.feed(delta))

    def finish(self) -> None:
        """The stream ended: render what the tail holds as final (a no-op when it already reads so)."""
        final = self.markdown.finish()
        if final.completed_html != self._tail_html or self._preview_end != self._tail_start:
            self._apply(final)

    def _apply(self, update: StreamUpdate) -> None:
        """Replace the tail (completed blocks: the preview too), append what is new, then the new tail."""
        start = self._tail_start if update.completed_html else self._preview_end
        cursor = QTextCursor(self.document)
        if start == 0:
            self.document.clear()
        else:
            cursor.beginEditBlock()
            cursor.setPosition(start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
        if update.completed_html:
            self._tail_start = self._preview_end = self._append(cursor, update.completed_html)
        if update.preview_html:
            self._preview_end = self._append(cursor, update.preview_html)
        if update.tail_html:
            self._append(cursor, update.tail_html)
        if start != 0:
            cursor.endEditBlock()
        self._tail_html = update.tail_html

    def _append(self, cursor: QTextCursor, block_html: str) -> int:
        """Append HTML; into an empty document it is set whole (an appended first block would lose its format)."""
        if not self.document.isEmpty():
            return _append_blocks(cursor, block_html)
        self.document.setHtml(qt_html(block_html))
        return self.document.characterCount() - 1
