"""The chat transcript: a whole conversation in one read-only rich-text document.

Assistant replies render as Markdown; while a reply streams, only its still-growing last block is re-rendered
(see :class:`app.core.chat.markdown.MarkdownStream`), so showing a token costs the same early and late; a long
table's rows are appended as text while it grows and the table rendered once, when complete.

A reply never makes the view load anything: images are links (see :func:`app.core.chat.markdown.render_markdown`)
and :meth:`ChatView.loadResource` answers nothing but the app's own ``qrc:`` resources.
"""

from __future__ import annotations

import html
import re
from typing import Any

from PySide6.QtCore import QEvent, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QDesktopServices,
    QFontDatabase,
    QGuiApplication,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import QTextBrowser, QWidget

from app.core.chat.conversation import Message, MessageStatus, Role
from app.core.chat.markdown import MarkdownStream, StreamUpdate, render_markdown
from app.ui.widgets.palette import error_color, mix, muted_color

__all__ = ["ChatView"]

_ROLE_NAMES = {Role.USER: "You", Role.ASSISTANT: "Assistant", Role.SYSTEM: "System"}
_EXTERNAL_SCHEMES = frozenset({"http", "https", "mailto"})
_PLACEHOLDER = "x"
_EMPTY_ELEMENT = re.compile(r"<(t[dh]|pre|li|h[1-6]|p|blockquote)((?: [^>]*)?)>\s*</\1>")


def _plain_html(text: str) -> str:
    """User text shown as typed: escaped, line breaks kept."""
    return html.escape(text).replace("\n", "<br />")


def _qt_html(block_html: str) -> str:
    """Markdown HTML adjusted for Qt: outer whitespace dropped, empty elements filled.

    Qt's importer drops or merges empty blocks (an empty code block, a table whose last cell is empty)
    depending on what follows, so the same HTML would lay out differently whole and in pieces; a no-break
    space keeps every block regular.
    """
    filled = _EMPTY_ELEMENT.sub(r"<\1\2>&nbsp;</\1>", block_html.strip())
    return filled.replace("<table>", '<table border="1" cellspacing="0" cellpadding="4">')  # Qt draws no grid


def _partial_mark(message: Message) -> str:
    if message.status is MessageStatus.STOPPED:
        return "Stopped — partial reply"
    if message.status is MessageStatus.INTERRUPTED:
        return "Interrupted — the app closed mid-reply"
    if message.status is MessageStatus.FAILED:
        return f"Failed: {message.error or 'unknown error'}"
    return ""


def _append_blocks(cursor: QTextCursor, block_html: str) -> int:
    """Append block-level HTML at the end of the document, each block keeping its own format.

    Qt merges an inserted fragment's first block into the block at the cursor, dropping its format (a
    heading would lose its size). So a throw-away paragraph goes first, in a new block, and is removed
    together with the separator before it: the document then reads exactly as if set in one go.
    Returns the end position, where the next append (or replacement) starts.
    """
    cursor.movePosition(QTextCursor.MoveOperation.End)
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
    start = cursor.position()
    cursor.insertHtml(f"<p>{_PLACEHOLDER}</p>{_qt_html(block_html)}")
    cursor.setPosition(start - 1)
    cursor.setPosition(start + 1, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()
    cursor.movePosition(QTextCursor.MoveOperation.End)
    return cursor.position()


class ChatView(QTextBrowser):
    """Read-only transcript of a conversation, with per-message actions and a streaming reply.

    Links in the document: ``edit:N`` emits :attr:`edit_requested`, ``regenerate`` emits
    :attr:`regenerate_requested`, ``copy:N`` copies message N's raw text and ``copy-code:N`` code block N to
    the clipboard; http(s) and mailto links open in the desktop's handler.
    """

    edit_requested = Signal(int)
    regenerate_requested = Signal()

    FLUSH_INTERVAL_MS = 30
    _ready = False  # set once __init__ is done: Qt may send change events before

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.document().setUndoRedoEnabled(False)  # edits are ours; an undo history would only grow
        self.anchorClicked.connect(self._on_anchor)
        self._messages: list[Message] = []
        self._system_note = ""
        self._code_blocks: list[str] = []
        self._stream: MarkdownStream | None = None
        self._pending: list[str] = []
        self._reply: list[str] = []  # the streamed reply's raw text
        self._tail_start = 0  # where the reply's preview (if any) and tail begin
        self._preview_end = 0  # where its tail begins
        self._tail_html = ""
        self._follow = True  # keep the view at the bottom while streaming
        self._scrolling = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.FLUSH_INTERVAL_MS)
        self._timer.timeout.connect(self.flush)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range_changed)
        self._apply_style()
        self._ready = True

    # -- public API ----------------------------------------------------------------------------------

    def show_messages(self, messages: list[Message], system_note: str = "") -> None:
        """Render the whole conversation anew (ends any reply being streamed)."""
        self._stop_stream()
        self._messages = list(messages)
        self._system_note = system_note
        self._code_blocks.clear()
        parts = [f'<p class="note">{_plain_html(system_note)}</p>'] if system_note else []
        last_reply = max((i for i, m in enumerate(messages) if m.role is Role.ASSISTANT), default=-1)
        parts.extend(self._message_html(i, m, i == last_reply) for i, m in enumerate(messages))
        self.setHtml("".join(parts))
        self._follow = True
        self._scroll_to_bottom()

    def begin_reply(self) -> None:
        """Append an assistant header and an empty body that :meth:`append_reply` fills."""
        self._stop_stream()
        header = self._header_html(Role.ASSISTANT)
        if self.document().isEmpty():
            self.setHtml(header)
            self._tail_start = self._end_cursor().position()
        else:
            self._tail_start = _append_blocks(QTextCursor(self.document()), header)
        self._preview_end = self._tail_start
        self._tail_html = ""
        self._reply = []
        self._stream = MarkdownStream(self._code_blocks, code_font=self._code_font())
        self._follow = self._at_bottom()
        self._scroll_to_bottom_if_following()

    def append_reply(self, delta: str) -> None:
        """Add streamed text to the reply; the document is updated at most every ``FLUSH_INTERVAL_MS``."""
        if self._stream is None or not delta:
            return
        self._pending.append(delta)
        self._reply.append(delta)
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Apply the buffered reply text to the document now."""
        self._timer.stop()
        if self._stream is None or not self._pending:
            return
        delta, self._pending = "".join(self._pending), []
        self._update_body(self._stream.feed(delta))

    def end_reply(self) -> None:
        """Show everything streamed so far and close the reply.

        Until the next :meth:`show_messages` the reply counts as the conversation's last message (for
        ``copy:N`` and re-rendering on a theme change), without stats.
        """
        self.flush()
        if self._stream is None:
            return
        final = self._stream.finish()
        if final.completed_html != self._tail_html or self._preview_end != self._tail_start:
            self._update_body(final)  # else the tail already reads as the final HTML
        self._stream = None
        self._messages.append(Message(Role.ASSISTANT, "".join(self._reply)))

    @property
    def is_streaming(self) -> bool:
        """Whether a reply is open (between :meth:`begin_reply` and :meth:`end_reply`)."""
        return self._stream is not None

    # -- rendering ------------------------------------------------------------------------------------

    def _message_html(self, index: int, message: Message, last_reply: bool) -> str:
        if message.role is Role.ASSISTANT:
            body = _qt_html(render_markdown(message.content, self._code_blocks, code_font=self._code_font()))
        else:
            body = f'<p class="plain">{_plain_html(message.content)}</p>'
        parts = [self._header_html(message.role), body]
        if message.role is Role.ASSISTANT:
            parts.append(self._meta_html(message))
        links = []
        if message.role is Role.USER:
            links.append(f'<a href="edit:{index}">Edit</a>')
        links.append(f'<a href="copy:{index}">Copy</a>')
        if last_reply:
            links.append('<a href="regenerate">Regenerate</a>')
        parts.append(f'<p class="actions">{" · ".join(links)}</p>')
        return "".join(parts)

    @staticmethod
    def _header_html(role: Role) -> str:
        return f'<p class="role">{_ROLE_NAMES[role]}</p>'

    @staticmethod
    def _meta_html(message: Message) -> str:
        out = []
        stats = [message.stats.summary()] if message.stats else []
        if message.model:
            stats.append(message.model)
        if stats:
            out.append(f'<p class="stats">{html.escape(" · ".join(stats))}</p>')
        mark = _partial_mark(message)
        if mark:
            out.append(f'<p class="partial">{html.escape(mark)}</p>')
        return "".join(out)

    @staticmethod
    def _code_font() -> str:
        family = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family().replace("'", "")
        return f"'{family}', monospace"

    def _apply_style(self) -> None:
        """Document styles from the current palette, so light and dark themes both read well."""
        pal = self.palette()
        text, base = pal.color(QPalette.ColorRole.Text), pal.color(QPalette.ColorRole.Base)
        muted, warn = muted_color(pal).name(), error_color(pal).name()
        self.document().setDefaultFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.GeneralFont))
        self.document().setDefaultStyleSheet(
            f"""
            p.role {{ font-weight: bold; margin-top: 14px; }}
            p.note, p.stats, p.actions, p.code-actions {{ color: {muted}; font-size: small; }}
            p.note {{ font-style: italic; }}
            p.partial {{ color: {warn}; font-weight: bold; }}
            p.plain {{ white-space: pre-wrap; }}
            code {{ font-family: {self._code_font()}; }}
            pre {{ background-color: {mix(base, text, 0.08).name()}; }}
            p.code-actions {{ margin-bottom: 0px; }}
            """
        )

    def changeEvent(self, event: QEvent) -> None:
        """Re-style (and re-render when idle) on a palette or theme change."""
        super().changeEvent(event)
        if self._ready and event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._apply_style()
            if self._stream is None and self._messages:
                self.show_messages(self._messages, self._system_note)

    # -- streaming internals ------------------------------------------------------------------------

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _update_body(self, update: StreamUpdate) -> None:
        """Replace the tail (completed blocks: the preview too), append what is new, then the new tail."""
        self._scrolling = True  # shrinking the tail may clamp the scroll bar: that is not the user moving
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.setPosition(self._tail_start if update.completed_html else self._preview_end)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if update.completed_html:
            self._tail_start = self._preview_end = _append_blocks(cursor, update.completed_html)
        if update.preview_html:
            self._preview_end = _append_blocks(cursor, update.preview_html)
        if update.tail_html:
            _append_blocks(cursor, update.tail_html)
        cursor.endEditBlock()
        self._scrolling = False
        self._tail_html = update.tail_html
        self._scroll_to_bottom_if_following()

    def _stop_stream(self) -> None:
        self._timer.stop()
        self._pending.clear()
        self._stream = None

    # -- scrolling --------------------------------------------------------------------------------------

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _scroll_to_bottom(self) -> None:
        self._scrolling = True
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
        self._scrolling = False

    def _scroll_to_bottom_if_following(self) -> None:
        if self._follow:
            self._scroll_to_bottom()

    def _on_scrolled(self, _value: int) -> None:
        if not self._scrolling:  # the user moved: follow again only once they are back at the bottom
            self._follow = self._at_bottom()

    def _on_range_changed(self, _low: int, _high: int) -> None:
        self._scroll_to_bottom_if_following()  # the layout grows after show_messages and while streaming

    # -- resources and links ----------------------------------------------------------------------------

    def loadResource(self, type: int, name: QUrl | str) -> Any:
        """Only the app's own ``qrc:`` resources: nothing a reply names is fetched or read (no http, no files)."""
        if QUrl(name).scheme() == "qrc":
            return super().loadResource(type, name)
        return None

    def _on_anchor(self, url: QUrl) -> None:
        target = url.toString()
        kind, _, arg = target.partition(":")
        if target == "regenerate":
            self.regenerate_requested.emit()
        elif kind == "edit" and arg.isdigit():
            self.edit_requested.emit(int(arg))
        elif kind == "copy" and arg.isdigit() and int(arg) < len(self._messages):
            QGuiApplication.clipboard().setText(self._messages[int(arg)].content)
        elif kind == "copy-code" and arg.isdigit() and int(arg) < len(self._code_blocks):
            QGuiApplication.clipboard().setText(self._code_blocks[int(arg)])
        elif url.scheme() in _EXTERNAL_SCHEMES:
            QDesktopServices.openUrl(url)
