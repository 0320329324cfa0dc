"""The chat transcript: a virtualized list of message widgets that costs what is on screen, not what is in the chat.

Why widgets in a scroll area of our own rather than one rich-text document (as before) or a list-view delegate:
one document of a 3,000-message chat costs a long ``setHtml`` and its layout, and memory in proportion to the
chat; a delegate paints but cannot offer text selection, links ("Copy code") or hover buttons. Here every
message is a small widget with its own document (selectable text, Markdown with code blocks and "Copy code",
icon actions), and only the messages in (or near) the viewport have one: items come from a pool, and the rest
of the chat is a list of heights — estimated from the text's length until a message is measured on screen.
The top row on screen stays put while estimates are refined, and the view follows the bottom while a reply
streams unless the user has scrolled up.

A reply never makes the view load anything: images are links (see :func:`app.core.chat.markdown.render_markdown`)
and a message's ``loadResource`` answers nothing but the app's own ``qrc:`` resources.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections import OrderedDict

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QFontDatabase, QGuiApplication, QIcon, QResizeEvent, QShowEvent
from PySide6.QtWidgets import QAbstractScrollArea, QFrame, QLabel, QWidget

from app.core.chat.conversation import Message, MessageStatus, ReplyStats, Role
from app.ui.pages.chat.message_item import (
    ICON_NAMES,
    PAD_X,
    PAD_Y,
    USER_SHARE,
    ItemState,
    MessageItem,
    column,
    document_css,
    line_metrics,
    plain_text,
    scratch_text,
    transcript_style,
)
from app.ui.pages.chat.reply_document import ReplyDocumentStream, message_html
from app.ui.pages.chat.thinking_block import GAP_BELOW, TOGGLE_H, thinking_label
from app.ui.pages.chat.tool_card import TOOL_CARD_H
from app.ui.style.icons import icon
from app.ui.style.restyle import NextTurn, is_palette_change
from app.ui.style.theme import SPACE_L, SPACE_M, tokens

__all__ = ["ChatView", "TranscriptView"]

_EXTERNAL_SCHEMES = frozenset({"http", "https", "mailto"})
_BOTTOM = -1  # anchor row meaning "the bottom of the transcript"
TOP_PAD = SPACE_M
BOTTOM_PAD = SPACE_L
SCROLL_MARGIN = SPACE_M  # space above a message that scroll_to_message brings to the top
PARKED_Y = 10_000  # items not in use wait above the viewport, out of sight


class TranscriptView(QAbstractScrollArea):
    """A conversation's messages with per-message actions and a streaming reply.

    Signals: :attr:`edit_requested` (a user message's index), :attr:`regenerate_requested` (the last reply),
    :attr:`continue_requested` (the last reply, stopped at the token limit or by the user), :attr:`fork_requested`
    (an index; its button shows once :meth:`set_fork_enabled` is on), :attr:`copied` (an index, after its text went
    to the clipboard), :attr:`version_requested` (an index and the version slot to show: ``‹ 2/3 ›``). "Copy code"
    links copy a code block; http(s) and mailto links open in the desktop's handler.
    """

    edit_requested = Signal(int)
    regenerate_requested = Signal()
    continue_requested = Signal()
    fork_requested = Signal(int)
    version_requested = Signal(int, int)  # message index, the slot (0-based) of the version to show
    copied = Signal(int)
    note_link_activated = Signal(str)  # a link in the note above the messages (a fork's origin: "chat:ID")
    tool_decided = Signal(str, str, str)  # call id, Approval value, reason (a denial's)
    tools_continue_requested = Signal()  # the chat ends on tool calls: let the model go on
    source_requested = Signal(object)  # a reply's source (``Source``) was clicked: show it in context

    FLUSH_INTERVAL_MS = 30
    OVERSCAN_PX = 120  # messages this close to the viewport get widgets too, so small scrolls show them at once
    HTML_CACHE = 256  # rendered replies kept (scrolling back does not re-run Markdown)
    WARM_ITEMS = 14  # items made in idle time once shown: about what a tall screen of short messages needs
    _ready = False  # set once __init__ is done: Qt may send change events before
    _styling = False

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.viewport().setObjectName("transcriptViewport")
        self.verticalScrollBar().setSingleStep(24)
        self._messages: list[Message] = []
        self._heights: list[int] = []
        self._tops: list[int] = [0]
        self._tops_dirty = False
        self._live: dict[int, MessageItem] = {}
        self._pool: list[MessageItem] = []
        self._width = -1  # the viewport width the heights are for (-1: none yet)
        self._ratio = 0.0  # the device pixel ratio they are for
        self._busy = False
        self._follow = True
        self._fork = False
        self._highlight = -1
        self.icons: dict[str, QIcon] = {}
        self._html: OrderedDict[str, tuple[str, list[str]]] = OrderedDict()
        self._note = QLabel(self.viewport())
        self._note.setProperty("part", "note")
        self._note.setWordWrap(True)
        self._note.linkActivated.connect(self.note_link_activated)
        self._note.hide()
        # the reply being streamed: its own item, kept while it streams even when scrolled out of view
        self._stream: ReplyDocumentStream | None = None
        self._stream_item: MessageItem | None = None
        self._stream_message = Message(Role.ASSISTANT, "", MessageStatus.STREAMING)
        self._pending: list[str] = []
        self._reply: list[str] = []
        self._thinking_open: set[int] = set()  # rows whose thinking the person opened
        self._results_open: set[str] = set()  # tool calls whose result the person opened
        self._tools_waiting: frozenset[str] = frozenset()  # tool calls waiting for the person's decision
        self._tools_busy = False  # the chat is still working (no Continue marker)
        self._thinking = _StreamedThinking()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.FLUSH_INTERVAL_MS)
        self._timer.timeout.connect(self.flush)
        self._dots = QTimer(self)
        self._dots.setInterval(400)
        self._dots.timeout.connect(self._tick_indicator)
        self._dot_count = 0
        self._highlight_timer = QTimer(self)
        self._highlight_timer.setSingleShot(True)
        self._highlight_timer.setInterval(1500)
        self._highlight_timer.timeout.connect(self._clear_highlight)
        self._warm = QTimer(self)
        self._warm.setInterval(0)
        self._warm.timeout.connect(self._warm_pool)
        self._palette_changed = False
        self._restyle_soon = NextTurn(self, self._restyle)
        self._apply_style()
        self._ready = True

    # -- public API ----------------------------------------------------------------------------------

    def show_messages(self, messages: list[Message], system_note: str = "") -> None:
        """Show a conversation (ends any reply being streamed). Costs the messages on screen, not the chat.

        The same conversation shown again keeps the scroll position unless it grew (a message was sent);
        another conversation opens at its bottom.
        """
        self._restyle_soon.flush()  # a new palette waiting for the next turn: the messages get it now
        previous = self._messages
        same = bool(previous and messages) and _same_chat(previous[0], messages[0])
        if not same or len(messages) > len(previous):
            self._follow = True
        anchor = self._anchor()
        self._end_stream_item()
        if not same:
            self._thinking_open.clear()
        self._messages = list(messages)
        self._set_note(system_note)
        self._width = self._width_now()
        self._heights = self._estimates(self._messages)
        self._tops_dirty = True
        self._rebind_live()
        self._relayout(anchor if same and not self._follow else None)

    def begin_reply(self, model: str | None = None) -> None:
        """Add a reply that :meth:`append_reply` fills, with a streaming indicator (headed by ``model``)."""
        self._end_stream_item()
        self._follow = self._follow or self._at_bottom()
        anchor = self._anchor()
        row = len(self._messages)
        item = self._acquire(None)
        self._stream_message = Message(Role.ASSISTANT, "", MessageStatus.STREAMING, model=model)
        item.begin_stream(row, self._stream_message, self._state(row, streaming=True))
        self._stream_item = item
        self._live[row] = item
        self._stream = ReplyDocumentStream(item.body.document(), item.code_blocks, self._code_font())
        self._pending, self._reply = [], []
        self._thinking = _StreamedThinking()
        self._heights.append(item.layout_for(self._width_now()))
        self._tops_dirty = True
        self._dot_count = 0
        self._tick_indicator()
        self._dots.start()
        self._relayout(anchor)

    def append_reply(self, delta: str) -> None:
        """Add streamed text to the reply; the view is updated at most every ``FLUSH_INTERVAL_MS``."""
        if self._stream is None or not delta:
            return
        self._pending.append(delta)
        self._reply.append(delta)
        if not self._timer.isActive():
            self._timer.start()

    def append_thinking(self, delta: str) -> None:
        """Add streamed thinking to the reply's Thinking block (open while the model thinks)."""
        if self._stream is None or not delta:
            return
        self._thinking.add(delta)
        if not self._timer.isActive():
            self._timer.start()

    def recast_thinking(self, thinking: str) -> None:
        """The answer shown so far was thinking (a closing tag with no opening one followed it): it moves into the
        Thinking block, and the answer starts again."""
        if self._stream is None or self._stream_item is None:
            return
        self._timer.stop()
        self._pending, self._reply = [], []
        self._stream_item.body.clear()
        self._stream_item.code_blocks.clear()
        self._stream = ReplyDocumentStream(
            self._stream_item.body.document(), self._stream_item.code_blocks, self._code_font()
        )
        self._thinking.recast(thinking)
        self._stream_item.thinking.replace_text(thinking)
        self._stream_item.thinking.set_open(True)
        self._stream_grew()

    def flush(self) -> None:
        """Apply the buffered reply text (and thinking) now."""
        self._timer.stop()
        item = self._stream_item
        if self._stream is None or item is None:
            return
        thought = self._thinking.take()
        if thought or self._pending:  # the first token: the typing dots go
            item.show_typing(False)
        if thought:
            item.thinking.stream(thought)
            item.thinking.set_label(thinking_label(None, streaming_ms=self._thinking.ms))
        if not self._pending:
            if thought:
                self._stream_grew()
            return
        if self._thinking.thinking and self._thinking.answered_at is None:  # the answer starts: the thinking closes
            self._thinking.answered()
            item.thinking.set_open(False)
            item.thinking.set_label(thinking_label(ReplyStats(thinking_ms=self._thinking.ms)))
        delta, self._pending = "".join(self._pending), []
        self._stream.feed(delta)
        self._stream_grew()

    def end_reply(self) -> None:
        """Show everything streamed so far and close the reply.

        Until the next :meth:`show_messages` the reply counts as the conversation's last message (for copy and
        the plain text), without stats.
        """
        self.flush()
        if self._stream is None or self._stream_item is None:
            return
        self._stream.finish()
        self._stream = None
        self._dots.stop()
        message = Message(Role.ASSISTANT, "".join(self._reply), model=self._stream_message.model,
                          reasoning=self._thinking.thinking.strip())  # fmt: skip
        row = len(self._messages)
        self._messages.append(message)
        self._stream_item.bind(row, message, self._state(row))
        self._stream_item = None
        self._stream_grew()

    @property
    def is_streaming(self) -> bool:
        """Whether a reply is open (between :meth:`begin_reply` and :meth:`end_reply`)."""
        return self._stream is not None

    def scroll_to_message(self, index: int, highlight: bool = True) -> None:
        """Bring message ``index`` to the top of the view (a search hit), briefly outlined when ``highlight``."""
        if not 0 <= index < self._row_count():
            return
        self._follow = False
        if highlight:
            self._highlight = index
            self._highlight_timer.start()
            self._rebind_live()
        self._relayout((index, -SCROLL_MARGIN))

    def set_fork_enabled(self, enabled: bool) -> None:
        """Show the fork action on messages (for when forking exists)."""
        self._fork = enabled
        self._rebind_live()
        self._relayout()

    def message_count(self) -> int:
        """Messages shown, the reply being streamed included."""
        return self._row_count()

    def live_rows(self) -> list[int]:
        """The rows that have a widget now (on screen or close to it), in order."""
        return sorted(self._live)

    def message_widget(self, index: int) -> MessageItem | None:
        """The widget showing message ``index``, if it has one now."""
        return self._live.get(index)

    def message_text(self, index: int) -> str:
        """Message ``index`` as plain text, as it reads rendered (header, text, marks, figures)."""
        item = self._live.get(index)
        if item is not None and item.row == index and item.message is not None:
            return item.plain_text()
        message = self._messages[index]
        if message.role is Role.ASSISTANT:
            body = scratch_text(self.rendered(message.content)[0], self._css)
        else:
            body = message.content
        return plain_text(message, body, self._state(index))

    def toPlainText(self) -> str:
        """The whole transcript as plain text, as rendered. Costs the whole chat: for tests and "copy all"."""
        parts = [self._note.text()] if self._note.text() else []
        parts.extend(self.message_text(i) for i in range(self._row_count()))
        return "\n".join(parts)

    # -- actions -------------------------------------------------------------------------------------

    def action(self, name: str, row: int) -> None:
        """An item's button was pressed."""
        if not 0 <= row < self._row_count():
            return
        if name == "copy":
            QGuiApplication.clipboard().setText(self._message_at(row).content if row < len(self._messages) else "")
            item = self._live.get(row)
            if item is not None:
                item.copied()
            self.copied.emit(row)
        elif name == "edit" and row < len(self._messages) and self._messages[row].role is Role.USER:
            self.edit_requested.emit(row)
        elif name == "regenerate":
            self.regenerate_requested.emit()
        elif name == "continue":
            self.continue_requested.emit()
        elif name == "fork":
            self.fork_requested.emit(row)
        elif name in ("older", "newer") and row < len(self._messages):
            slot = self._messages[row].version + (1 if name == "newer" else -1)
            if 0 <= slot <= len(self._messages[row].versions):
                self.version_requested.emit(row, slot)
        elif name == "thinking":
            self._toggle_thinking(row)
        elif name == "continue_tools":
            self.tools_continue_requested.emit()
        elif name.startswith("source:"):
            number = name.removeprefix("source:")
            found = [s for s in self._message_at(row).sources if str(s.number) == number]
            if found:
                self.source_requested.emit(found[0])

    def set_tools_state(self, waiting: list[str], busy: bool) -> None:
        """The tool calls waiting for a decision, and whether the chat is still working (hides Continue)."""
        self._tools_waiting, self._tools_busy = frozenset(waiting), busy
        self._rebind_live()
        self._relayout()

    def tool_action(self, row: int, call_id: str, name: str, reason: str) -> None:
        """A tool card's button: a decision (an ``Approval`` value) or "result" (open or close the result)."""
        if name == "result":
            self._results_open.symmetric_difference_update({call_id})
            self._rebind_live()
            self._relayout()
        elif call_id in self._tools_waiting:
            self.tool_decided.emit(call_id, name, reason)

    def _toggle_thinking(self, row: int) -> None:
        """Open or close a reply's Thinking block (the one streaming too)."""
        item = self._live.get(row)
        if item is not None and item is self._stream_item:
            item.thinking.set_open(not item.thinking.open)
            if item.thinking.open:
                item.thinking.replace_text(self._thinking.thinking)
            self._stream_grew()
            return
        self._thinking_open.symmetric_difference_update({row})
        self._rebind_live()
        self._relayout()

    def link_clicked(self, item: MessageItem, url: QUrl) -> None:
        target = url.toString()
        kind, _, arg = target.partition(":")
        if kind == "copy-code" and arg.isdigit() and int(arg) < len(item.code_blocks):
            QGuiApplication.clipboard().setText(item.code_blocks[int(arg)])
        elif kind == "source" and arg.isdigit():  # a citation in the reply's text: its source in context
            self.action(target, item.row)
        elif url.scheme() in _EXTERNAL_SCHEMES:
            QDesktopServices.openUrl(url)

    def rendered(self, text: str) -> tuple[str, list[str]]:
        """A reply's HTML and code block texts, from a small cache."""
        hit = self._html.get(text)
        if hit is not None:
            self._html.move_to_end(text)
            return hit
        blocks: list[str] = []
        result = (message_html(text, blocks, self._code_font()), blocks)
        self._html[text] = result
        if len(self._html) > self.HTML_CACHE:
            self._html.popitem(last=False)
        return result

    # -- rows, heights and positions ---------------------------------------------------------------------

    def _row_count(self) -> int:
        return len(self._heights)

    def _message_at(self, row: int) -> Message:
        return self._messages[row] if row < len(self._messages) else self._stream_message

    def _state(self, row: int, streaming: bool = False) -> ItemState:
        count = self._row_count() if not streaming else row + 1
        last_reply = (
            not streaming
            and self._stream is None
            and row == len(self._messages) - 1
            and self._messages[row].role is Role.ASSISTANT
        )
        message = self._message_at(row)
        ids = {c.id for c in message.tool_calls} if message.tool_calls and not streaming else set()
        return ItemState(
            last_reply=last_reply,
            last=row == count - 1,
            streaming=streaming,
            fork=self._fork,
            highlight=row == self._highlight,
            thinking_open=row in self._thinking_open,
            tools_waiting=self._tools_waiting & ids if ids else frozenset(),
            results_open=frozenset(self._results_open & ids) if ids else frozenset(),
            tools_continue=self._offers_continue(message, last_reply) if ids else False,
        )

    def _offers_continue(self, message: Message, last_reply: bool) -> bool:
        """The chat ends on this reply's tool calls, all settled, and nothing runs: the model may go on."""
        return last_reply and not self._tools_busy and all(c.settled for c in message.tool_calls)

    def _estimates(self, messages: list[Message]) -> list[int]:
        """Messages' heights guessed from their length (refined once measured on screen): ~1 µs a message."""
        _x, col = column(self._width_now())
        line_h, chrome = self._line_h, self._chrome
        per_char = {
            Role.USER: self._char_w / max(1, int(col * USER_SHARE) - 2 * PAD_X),
            Role.ASSISTANT: self._char_w / col,
            Role.SYSTEM: self._char_w / col,
        }
        extra = {Role.USER: 2 * PAD_Y, Role.ASSISTANT: 0, Role.SYSTEM: 0}
        out = []
        for message in messages:
            text, role = message.content, message.role
            height = chrome + extra[role] + (int(len(text) * per_char[role]) + text.count("\n") + 1) * line_h
            if message.status is not MessageStatus.COMPLETE:
                height += 24
            if message.stats is not None and message.stats.finish_reason == "length":
                height += 36
            if message.reasoning:
                height += TOGGLE_H + GAP_BELOW
            height += TOOL_CARD_H * len(message.tool_calls)
            out.append(height)
        return out

    def _ensure_tops(self) -> list[int]:
        if self._tops_dirty:
            self._tops = [0, *itertools.accumulate(self._heights)]
            self._tops_dirty = False
        return self._tops

    def _inset(self) -> int:
        return TOP_PAD + (self._note.height() + SPACE_M if self._note.text() else 0)

    def _top(self, row: int) -> int:
        return self._inset() + self._ensure_tops()[row]

    def _content_height(self) -> int:
        return self._inset() + self._ensure_tops()[-1] + BOTTOM_PAD

    def _row_at(self, y: int) -> int:
        count = self._row_count()
        if count == 0:
            return -1
        row = bisect.bisect_right(self._ensure_tops(), y - self._inset()) - 1
        return min(max(row, 0), count - 1)

    def _width_now(self) -> int:
        return max(1, self.viewport().width())

    # -- scrolling ---------------------------------------------------------------------------------------

    def _anchor(self) -> tuple[int, int]:
        """What stays put while heights change: the top row on screen and how far into it, or the bottom."""
        if self._follow or self._row_count() == 0:
            return _BOTTOM, 0
        value = self.verticalScrollBar().value()
        row = self._row_at(value)
        return row, value - self._top(row)

    def _apply_scroll(self, anchor: tuple[int, int]) -> None:
        bar = self.verticalScrollBar()
        page = self.viewport().height()
        bar.setRange(0, max(0, self._content_height() - page))
        bar.setPageStep(max(1, page))
        row, offset = anchor
        if row == _BOTTOM or row >= self._row_count():
            bar.setValue(bar.maximum())
        else:
            bar.setValue(self._top(row) + offset)

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        """The scroll bar moved (the user, or a wheel): follow the bottom again only once back at it."""
        if self._busy:
            return
        self._follow = self._at_bottom()
        self._relayout()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._relayout()

    # -- layout -----------------------------------------------------------------------------------------

    def _relayout(self, anchor: tuple[int, int] | None = None) -> None:
        """Give the rows in view widgets (measuring them), drop the others, and place them; keeps ``anchor``."""
        if self._busy:
            return
        self._busy = True
        try:
            anchor = anchor or self._anchor()
            self._sync_width()
            self._apply_scroll(anchor)
            for _ in range(4):  # measuring changes heights, which can bring other rows into view
                first, last = self._visible_rows()
                self._release_outside(first, last)  # first, so that the pool has items to reuse
                if not self._materialize(first, last):
                    break
                self._apply_scroll(anchor)
            else:
                first, last = self._visible_rows()
                self._release_outside(first, last)
                self._materialize(first, last)
            self._place(first, last)
        finally:
            self._busy = False

    def _sync_width(self) -> None:
        """Heights follow the viewport: another width or pixel ratio, and rows are estimated and measured anew."""
        width, ratio = self._width_now(), self.devicePixelRatioF()
        if (width, ratio) == (self._width, self._ratio):
            return
        if ratio != self._ratio:  # another screen or scale: glyphs (and so lines) may take other widths
            self._forget_measures()
        self._width, self._ratio = width, ratio
        self._heights = self._estimates([self._message_at(r) for r in range(self._row_count())])
        self._tops_dirty = True
        if self._note.text():
            self._note.resize(column(width)[1], self._note.heightForWidth(column(width)[1]))

    def _visible_rows(self) -> tuple[int, int]:
        if self._row_count() == 0:
            return 0, -1
        value = self.verticalScrollBar().value()
        return self._row_at(value - self.OVERSCAN_PX), self._row_at(value + self.viewport().height() + self.OVERSCAN_PX)

    def _materialize(self, first: int, last: int) -> bool:
        """Bind and measure rows ``first``..``last``; True when a height changed."""
        changed = False
        width = self._width_now()
        for row in range(first, last + 1):
            item = self._live.get(row)
            if item is None:
                item = self._acquire(row)
                self._live[row] = item
            if item is not self._stream_item:
                item.bind(row, self._messages[row], self._state(row))
            height = item.layout_for(width)
            if height != self._heights[row]:
                self._heights[row] = height
                self._tops_dirty = changed = True
        return changed

    def _acquire(self, row: int | None) -> MessageItem:
        """A pooled item, preferably one already showing this row's message."""
        if row is not None and row < len(self._messages):
            message = self._messages[row]
            for i, item in enumerate(self._pool):
                if item.message is message:
                    return self._pool.pop(i)
        if self._pool:
            return self._pool.pop()
        item = MessageItem(self)
        item.body.document().setDefaultStyleSheet(self._css)
        return item

    def _warm_pool(self) -> None:
        """Make the items a screen needs ahead of time, one per idle turn (creating one takes a few ms)."""
        if len(self._pool) + len(self._live) >= self.WARM_ITEMS or not self.isVisible():
            self._warm.stop()
            return
        item = MessageItem(self)
        item.body.document().setDefaultStyleSheet(self._css)
        item.hide()
        self._pool.append(item)

    def showEvent(self, event: QShowEvent) -> None:
        """Measured again when shown: a text measured while hidden is laid out again once shown (its widget's
        pending resize, its final style), and the row must hold what is drawn."""
        super().showEvent(event)
        self._warm.start()
        self._forget_measures()
        self._relayout()

    def event(self, event: QEvent) -> bool:
        """Another screen, or its pixel ratio changed: measure again (the change events below cover fonts)."""
        handled = super().event(event)
        if self._ready and event.type() in (QEvent.Type.DevicePixelRatioChange, QEvent.Type.ScreenChangeInternal):
            self.remeasure()
        return handled

    def remeasure(self) -> None:
        """Forget every row's measured height and lay out again: the one place that does (a font, style, scale
        or screen change; a width change re-estimates in ``_sync_width``)."""
        self._forget_measures()
        self._width = -1
        self._rebind_live()
        self._relayout()

    def _forget_measures(self) -> None:
        for item in [*self._pool, *self._live.values()]:
            item.invalidate()

    def _release_outside(self, first: int, last: int) -> None:
        for row in [r for r in self._live if not first <= r <= last]:
            item = self._live[row]
            _park(item)
            if item is not self._stream_item:
                del self._live[row]
                self._pool.append(item)

    def _place(self, first: int, last: int) -> None:
        value = self.verticalScrollBar().value()
        width = self._width_now()
        if self._note.text():
            x0, _col = column(width)
            self._note.move(x0, TOP_PAD - value)
            self._note.show()
        for row in range(first, last + 1):
            item = self._live[row]
            item.setGeometry(0, self._top(row) - value, width, self._heights[row])
            if item.isHidden():
                item.show()

    def _rebind_live(self) -> None:
        """Re-bind the items on screen (a row's message or state may have changed); kept when equal."""
        for row, item in list(self._live.items()):
            if item is self._stream_item:
                continue
            if row < len(self._messages):
                item.bind(row, self._messages[row], self._state(row))
            else:
                _park(item)
                del self._live[row]
                self._pool.append(item)

    # -- streaming internals ------------------------------------------------------------------------

    def _stream_grew(self) -> None:
        """The streamed reply changed: measure it again and keep the bottom in view if following."""
        row = len(self._messages) if self._stream_item is not None else len(self._messages) - 1
        item = self._live.get(row)
        if item is not None and 0 <= row < self._row_count():
            height = item.layout_for(self._width_now())
            if height != self._heights[row]:
                self._heights[row] = height
                self._tops_dirty = True
        self._relayout()

    def _end_stream_item(self) -> None:
        """Drop a reply being streamed (show_messages replaces it with the saved one)."""
        self._timer.stop()
        self._dots.stop()
        self._pending.clear()
        self._stream = None
        item, self._stream_item = self._stream_item, None
        if item is None:
            return
        for row, live in list(self._live.items()):
            if live is item:
                del self._live[row]
        if len(self._heights) > len(self._messages):
            del self._heights[len(self._messages) :]
            self._tops_dirty = True
        _park(item)
        item.clear_key()
        self._pool.append(item)

    def _tick_indicator(self) -> None:
        if self._stream_item is not None:
            self._dot_count = (self._dot_count % 3) + 1
            thinking = self._thinking.thinking and not self._thinking.answered_at
            self._stream_item.set_indicator(("Thinking" if thinking else "Generating") + "." * self._dot_count)
            if not self._stream_item.typing.isHidden():
                self._stream_item.show_typing(True, self._dot_count - 1)
            if thinking:
                self._stream_item.thinking.set_label(thinking_label(None, streaming_ms=self._thinking.ms))

    def _clear_highlight(self) -> None:
        self._highlight = -1
        self._rebind_live()
        self._relayout()

    # -- style ---------------------------------------------------------------------------------------

    def _set_note(self, text: str) -> None:
        self._note.setText(text)
        self._note.setVisible(bool(text))
        if text:
            col = column(self._width_now())[1]
            self._note.resize(col, self._note.heightForWidth(col))

    @staticmethod
    def _code_font() -> str:
        family = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family().replace("'", "")
        return f"'{family}', monospace"

    def _apply_style(self) -> None:
        """Colours from the current palette, so light and dark themes both read well."""
        t = tokens(self.palette())
        self.setStyleSheet(transcript_style(t))
        self._css = document_css(t, self._code_font())
        self._line_h, self._char_w = line_metrics(self.font())
        small = self.fontMetrics().height()
        self._chrome = small + 2 + 28 + 14 + 6  # header, footer and gaps around the text
        self._html.clear()
        self.icons = {name: icon(name) for name in ICON_NAMES}
        for item in [*self._pool, *self._live.values()]:
            item.body.document().setDefaultStyleSheet(self._css)
            item.restyle()
            if item is not self._stream_item:
                item.clear_key()

    def changeEvent(self, event: QEvent) -> None:
        """A palette, style or font change restyles on the next event-loop turn, once however many arrive: Qt is
        walking every widget when it sends them, and re-binding builds, moves and re-parents items."""
        super().changeEvent(event)
        kind = event.type()
        if not self._ready or self._styling:
            return
        if is_palette_change(event):
            self._palette_changed = True
        elif kind not in (QEvent.Type.StyleChange, QEvent.Type.FontChange):
            return
        self._restyle_soon()

    def restyle_pending(self) -> bool:
        """A theme, style or font change is still waiting to be followed (on the next event-loop turn)."""
        return self._restyle_soon.pending()

    def _restyle(self) -> None:
        """Re-style after a palette change; re-measure what is on screen on any theme, style or font change."""
        self._styling = True
        try:
            if self._palette_changed:
                self._palette_changed = False
                self._apply_style()
            self._line_h, self._char_w = line_metrics(self.font())
        finally:
            self._styling = False
        self.remeasure()


class _StreamedThinking:
    """The streamed reply's thinking: what waits to be shown, all of it, and how long it took."""

    def __init__(self) -> None:
        self.thinking = ""
        self._pending: list[str] = []
        self.started_at: float | None = None
        self.answered_at: float | None = None

    def add(self, text: str) -> None:
        self._pending.append(text)
        self.thinking += text
        if self.started_at is None:
            self.started_at = time.monotonic()

    def recast(self, thinking: str) -> None:
        self.thinking, self._pending = thinking, []
        self.started_at = self.started_at or time.monotonic()
        self.answered_at = None

    def take(self) -> str:
        text, self._pending = "".join(self._pending), []
        return text

    def answered(self) -> None:
        if self.answered_at is None:
            self.answered_at = time.monotonic()

    @property
    def ms(self) -> float:
        if self.started_at is None:
            return 0.0
        return ((self.answered_at or time.monotonic()) - self.started_at) * 1000


def _park(item: MessageItem) -> None:
    """Move an item out of sight without hiding it: hiding and showing a widget costs more than moving it."""
    item.move(0, -PARKED_Y - item.height())


def _same_chat(a: Message, b: Message) -> bool:
    return a is b or (a.id is not None and a.id == b.id)


ChatView = TranscriptView
"""The name the chat page knows the transcript by."""
