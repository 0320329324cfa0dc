"""One message of the transcript as a widget: a role header, the text (selectable, Markdown for replies), marks
(stopped, failed, the token limit; Continue on the last reply when cut or stopped), the reply's figures, icon
actions shown on hover, ``‹ 2/3 ›`` to browse a message's versions, and typing dots until a reply's first token.

Laid out by hand (``layout_for(width)`` returns the height) so that the transcript can measure an item for a
width without a layout pass; the transcript reuses items from a pool as messages scroll in and out of view.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import QCoreApplication, QEvent, QRectF, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QFont,
    QFontMetrics,
    QFontMetricsF,
    QIcon,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
    QTextDocument,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QTextBrowser, QToolButton, QWidget

from app.core.chat.code_highlight import highlight_css
from app.core.chat.conversation import Message, MessageStatus, ReplyStats, Role
from app.core.chat.export_text import documents_note
from app.core.chat.overflow import Cut
from app.core.chat.tool_calls_view import call_state
from app.core.chat.versions import version_count
from app.core.documents.citations import MODE_KEY, linked_citations
from app.services.library.names import model_display_name
from app.services.paths import app_paths
from app.ui.pages.chat.attachments_view import THUMB, AttachmentStrip
from app.ui.pages.chat.text_fit import fitted_height
from app.ui.pages.chat.thinking_block import ThinkingBlock
from app.ui.pages.chat.tool_card import ToolCards
from app.ui.style.theme import RADIUS, RADIUS_CARD, SPACE_L, SPACE_M, SPACE_S, SPACE_XS, Tokens, tokens
from app.ui.widgets.palette import set_text_color

ROLE_NAMES = {Role.USER: "You", Role.ASSISTANT: "Assistant", Role.SYSTEM: "System"}
LIMIT_TEXT = "Stopped at the token limit."
LIMIT_TIP = "The reply reached the most tokens a reply may have. Continue asks the model to carry on from here."
RESUME_TIP = "Continue asks the model to carry on from where the reply was stopped (appended to it)."
MAX_COLUMN = 860  # the text column's widest: long lines are hard to read
SIDE = SPACE_L  # space left and right of the column
USER_SHARE = 0.8  # a user bubble takes at most this share of the column
PAD_X, PAD_Y = SPACE_M, SPACE_S  # inside a bubble
FOOTER_H = 28
BUTTON, BUTTON_STEP = 26, 28  # an action button's size, and its step along a row
LIMIT_H = 36
GAP = SPACE_M  # below each message
BUBBLE_RADIUS = RADIUS_CARD + 4
ACTIONS = {
    "copy": "Copy the message",
    "edit": "Edit and resend (this version is kept: ‹ › browses them)",
    "regenerate": "Regenerate this reply (this version is kept: ‹ › browses them)",
    "fork": "Start a new chat from here",
}


ICON_NAMES = (*ACTIONS, "continue", "check")
INDICATOR_ROOM = "Generating..."  # the widest text of the ticking indicator under a streaming reply
TYPING_FRAMES = ("● ○ ○", "○ ● ○", "○ ○ ●")  # the typing dots, one frame a tick, until the reply's first token


def column(width: int) -> tuple[int, int]:
    """(x, width) of the text column in a viewport ``width`` wide."""
    col = max(80, min(width - 2 * SIDE, MAX_COLUMN))
    return max(0, (width - col) // 2), col


def status_mark(message: Message) -> tuple[str, str]:
    """(text, level) marking a partial reply; ("", "") for a whole one."""
    if message.status is MessageStatus.STOPPED:
        return "Stopped — partial reply", "warning"
    if message.status is MessageStatus.INTERRUPTED:
        return "Interrupted — the app closed mid-reply", "warning"
    if message.status is MessageStatus.FAILED:
        return f"Failed: {message.error or 'unknown error'}", "error"
    cut = Cut.from_dict(message.settings.get("context_left_out"))
    if cut is not None:
        return cut.describe(), "warning"
    return "", ""


def hit_token_limit(message: Message) -> bool:
    return message.role is Role.ASSISTANT and message.stats is not None and message.stats.finish_reason == "length"


def continues_after_stop(message: Message, state: ItemState) -> bool:
    """A last reply with text that was stopped (by the user, or by the app closing): Continue carries it on (its
    mark gets the button)."""
    stopped = message.status in (MessageStatus.STOPPED, MessageStatus.INTERRUPTED)
    return state.last_reply and not state.streaming and stopped and bool(message.content)


def version_text(message: Message) -> str:
    """ "2/3" for a message showing the second of its three versions; "" for one with no other."""
    count = version_count(message)
    return f"{message.version + 1}/{count}" if count > 1 else ""


def figures(message: Message) -> tuple[str, str]:
    """(short figures, tooltip) of a reply: tokens and speed shown, the rest on hover."""
    stats = message.stats
    if message.role is not Role.ASSISTANT or stats is None:
        return "", ""
    short = stats.summary().split(" · ")[: 2 if stats.decode_tokens_per_s else 1]
    tip = stats.summary() + (f" · {message.model}" if message.model else "")
    if stats.cached_prompt_tokens:  # the prompt's start was in the engine's cache (a chat's documents, say)
        short.append(prompt_reuse(stats))
    if stats.spec_mode:
        accepted, spec_tip = speculation_figures(stats)
        short.append(accepted)
        tip += f" · {spec_tip}"
    return " · ".join(short), tip


def prompt_reuse(stats: ReplyStats) -> str:
    """ "prompt 42 new + 1,225 reused (12 ms)": what the engine processed of the prompt and what it kept."""
    new = stats.prompt_tokens - stats.cached_prompt_tokens
    took = f" ({stats.ttft_ms:,.0f} ms)" if stats.ttft_ms is not None else ""
    return f"prompt {new:,} new + {stats.cached_prompt_tokens:,} reused{took}"


SPEC_MODE_NAMES = {"ngram": "n-gram lookup", "draft": "draft model"}


def speculation_figures(stats: ReplyStats) -> tuple[str, str]:
    """(``62% accepted · 1.8× vs off``, ``speculative decoding (n-gram lookup): 50 of 80 drafted tokens accepted;
    decoding 1.80× as fast as …``); the speed-up only once the model has replied without speculation."""
    mode = SPEC_MODE_NAMES.get(stats.spec_mode or "", stats.spec_mode or "")
    if not stats.spec_drafted:
        short, detail = "nothing drafted", "nothing was drafted"
    else:
        rate = stats.spec_accepted / stats.spec_drafted
        short, detail = (
            f"{rate:.0%} accepted",
            f"{stats.spec_accepted:,} of {stats.spec_drafted:,} drafted tokens accepted",
        )
    if stats.spec_speedup is not None:
        short += f" · {stats.spec_speedup:.1f}× vs off"
        detail += (
            f"; decoding {stats.spec_speedup:.2f}× as fast as the median of this model's replies without it "
            "(this session)"
        )
    return short, f"speculative decoding ({mode}): {detail}"


def sources_html(message: Message) -> str:
    """A reply's documents under it: "Answered from 5 passages · [1] report.pdf, p. 3 · …", each source a link
    (``source:N``) that shows the passage in context."""
    caption = documents_caption(message)
    links = [f'<a href="source:{s.number}">[{s.number}]&nbsp;{html.escape(s.label)}</a>' for s in message.sources]
    return " · ".join(([html.escape(caption)] if caption else []) + links)


def documents_caption(message: Message) -> str:
    """ "Answered from the full text of 2 documents" ("" for a reply without documents)."""
    note = documents_note(message)
    return note[:1].upper() + note[1:]


def header_text(message: Message) -> str:
    if message.role is Role.ASSISTANT and message.model:
        return model_display_name(message.model, message.model)  # one name for a model on every page
    return ROLE_NAMES[message.role]


@dataclass(frozen=True)
class ItemState:
    """What an item shows besides the message: it changes the item's look, so it is part of its key."""

    last_reply: bool = False  # regenerate (and Continue) belong to the last reply
    last: bool = False  # the last message keeps its actions visible
    streaming: bool = False
    fork: bool = False
    highlight: bool = False
    thinking_open: bool = False  # the reply's thinking is shown (the person opened it)
    tools_waiting: frozenset[str] = frozenset()  # its tool calls waiting for the person's decision
    results_open: frozenset[str] = frozenset()  # its tool calls whose result the person opened
    tools_continue: bool = False  # the chat ends on this reply's settled calls: offer Continue


def item_key(message: Message, state: ItemState) -> tuple[Any, ...]:
    """What an item shows of ``message``: equal keys, nothing to redo (compared on every layout: kept cheap)."""
    s = message.stats
    stats = (s.completion_tokens, s.prompt_tokens, s.decode_tokens_per_s, s.ttft_ms, s.finish_reason,
             s.thinking_ms, s.thinking_tokens, s.spec_mode, s.spec_drafted, s.spec_accepted,
             s.spec_speedup, s.cached_prompt_tokens) if s else None  # fmt: skip
    cut = message.settings.get("context_left_out")
    calls = tuple((c.approval, c.settled, c.result_bytes, c.is_error) for c in message.tool_calls)
    return (message.role, message.content, message.status, message.error, message.model, stats, state, str(cut),
            message.reasoning, calls, message.version, len(message.versions), len(message.sources),
            message.settings.get(MODE_KEY))  # fmt: skip


def plain_text(message: Message, body: str, state: ItemState) -> str:
    """The text an item shows, as plain text: header, body, marks, figures."""
    parts = [header_text(message), body]
    mark, _level = status_mark(message)
    if mark:
        parts.append(mark + (" Continue" if continues_after_stop(message, state) else ""))
    for call in message.tool_calls:
        words, _level = call_state(call, call.id in state.tools_waiting)
        parts.append(f"{call.tool or call.name} · {call.server or 'no such tool'}: {words}")
    if hit_token_limit(message) and not state.streaming:
        parts.append(LIMIT_TEXT + (" Continue" if state.last_reply else ""))
    if message.sources:
        parts.append(" · ".join([documents_caption(message), *(f"[{s.number}] {s.label}" for s in message.sources)]))
    short, _tip = figures(message)
    if short:
        parts.append(short)
    if versions := version_text(message):
        parts.append(f"‹ {versions} ›")
    return "\n".join(parts)


class MessageBody(QTextBrowser):
    """A message's text: read-only, selectable, with links; sized to its text, never scrolls, loads nothing."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("messageBody")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.viewport().setAutoFillBackground(False)
        document = self.document()
        document.setUndoRedoEnabled(False)  # edits are ours; an undo history would only grow
        document.setDocumentMargin(0)
        # QTextEdit sets its document's layout up on its first resize event, which a hidden widget only gets
        # when shown; measured before that, a text wraps differently than it will be drawn.
        QCoreApplication.sendEvent(self, QResizeEvent(self.size(), QSize(-1, -1)))

    def text_height(self, width: int) -> int:
        return fitted_height(self, width)

    def ideal_width(self, text: str) -> int:
        """The widest line of plain ``text`` unwrapped (for sizing a short bubble)."""
        metrics = QFontMetricsF(self.document().defaultFont())
        return math.ceil(max((metrics.horizontalAdvance(line) for line in text.split("\n")), default=0.0))

    def wheelEvent(self, event: Any) -> None:
        event.ignore()  # the transcript scrolls, not a message

    def loadResource(self, type: int, name: QUrl | str) -> Any:
        """Only the app's own ``qrc:`` resources: nothing a reply names is fetched or read (no http, no files)."""
        if QUrl(name).scheme() == "qrc":
            return super().loadResource(type, name)
        return None


class ItemHost(Protocol):
    """What an item needs from the transcript that holds it."""

    icons: dict[str, QIcon]

    def viewport(self) -> QWidget: ...

    def palette(self) -> QPalette: ...

    def rendered(self, text: str) -> tuple[str, list[str]]: ...

    def action(self, name: str, row: int) -> None: ...

    def link_clicked(self, item: MessageItem, url: QUrl) -> None: ...

    def tool_action(self, row: int, call_id: str, name: str, reason: str) -> None: ...


def _label(parent: QWidget, part: str) -> QLabel:
    label = QLabel(parent)
    label.setProperty("part", part)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
    return label


class MessageItem(QWidget):
    """One message; ``bind`` fills it, ``layout_for`` places its parts and returns its height."""

    def __init__(self, view: ItemHost) -> None:
        super().__init__(view.viewport())
        self.setMouseTracking(True)
        self._view = view
        self.row = -1
        self.key: tuple[Any, ...] | None = None
        self.message: Message | None = None
        self.state = ItemState()
        self.code_blocks: list[str] = []
        self.hovered = False
        self._user = False
        self._mark_level = ""
        self._cited = False  # the body's citations ([1]) are links to the reply's sources
        self._laid_out: tuple[Any, ...] | None = None
        self._height = 0
        self.header = _label(self, "meta")
        self.thinking = ThinkingBlock(self)
        self.thinking.toggled.connect(lambda: view.action("thinking", self.row))
        self.bubble = QFrame(self)
        self.bubble.setObjectName("bubble")
        self.body = MessageBody(self.bubble)
        self.body.anchorClicked.connect(lambda url: view.link_clicked(self, url))
        self.mark = _label(self, "mark")
        self.mark.setWordWrap(True)
        self.limit = QFrame(self)
        self.limit.setObjectName("limitMarker")
        self.limit_text = _label(self.limit, "limit")
        self.limit_text.setText(LIMIT_TEXT)
        self.limit.setToolTip(LIMIT_TIP)
        self.continue_button = QPushButton("Continue", self.limit)
        self.continue_button.setObjectName("continueButton")
        self.continue_button.clicked.connect(lambda: view.action("continue", self.row))
        row = QHBoxLayout(self.limit)
        row.setContentsMargins(SPACE_M, 2, SPACE_XS, 2)
        row.addWidget(self.limit_text, 1)
        row.addWidget(self.continue_button)
        self.resume_button = QPushButton("Continue", self)  # a stopped last reply's, beside its mark
        self.resume_button.setObjectName("continueButton")
        self.resume_button.setToolTip(RESUME_TIP)
        self.resume_button.clicked.connect(lambda: view.action("continue", self.row))
        self.typing = _label(self, "typing")  # the reply is coming: dots until its first token
        self.typing.hide()
        self.older = self._version_button("‹", "olderVersion", "Show the previous version", "older")
        self.newer = self._version_button("›", "newerVersion", "Show the next version", "newer")
        self.version_label = _label(self, "meta")
        self.version_label.setObjectName("versionLabel")
        self.version_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.tools = ToolCards(self, MessageBody)
        self.tools.decided.connect(lambda call_id, approval, reason: view.tool_action(self.row, call_id, approval,
                                                                                     reason))  # fmt: skip
        self.tools.result_toggled.connect(lambda call_id: view.tool_action(self.row, call_id, "result", ""))
        self.tools.continue_requested.connect(lambda: view.action("continue_tools", self.row))
        self.tools.hide()
        self.sources = _label(self, "meta")  # a reply's documents: how they were sent, its sources as links
        self.sources.setObjectName("sources")
        self.sources.setWordWrap(True)
        self.sources.setTextFormat(Qt.TextFormat.RichText)
        self.sources.linkActivated.connect(lambda link: view.action(link, self.row))
        self.sources.hide()
        self.figures = _label(self, "meta")
        self.indicator = _label(self, "meta")
        self.images = AttachmentStrip(app_paths().attachments_dir, parent=self)  # a user message's images
        self.images.set_alignment_right()
        self.buttons: dict[str, QToolButton] = {}
        for name, tip in ACTIONS.items():
            button = QToolButton(self)
            button.setProperty("part", "action")
            button.setObjectName(f"{name}Action")
            button.setToolTip(tip)
            button.setAutoRaise(True)
            button.setIconSize(QSize(16, 16))
            button.setFixedSize(BUTTON, BUTTON)
            button.clicked.connect(lambda _=False, n=name: view.action(n, self.row))
            self.buttons[name] = button
        self.restyle()
        self.ensurePolished()  # the style sheets' fonts now, so that what is measured is what is drawn

    def _version_button(self, text: str, name: str, tip: str, action: str) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setObjectName(name)
        button.setProperty("part", "action")
        button.setToolTip(tip)
        button.setAutoRaise(True)
        button.setFixedSize(BUTTON, BUTTON)
        button.clicked.connect(lambda: self._view.action(action, self.row))
        return button

    # -- content ---------------------------------------------------------------------------------------------

    def bind(self, row: int, message: Message, state: ItemState) -> None:
        """Show ``message`` as row ``row``; the text is set only when it differs from what the item shows."""
        self.row = row
        key = item_key(message, state)
        if key == self.key and message is self.message:
            return
        same_text = self.key is not None and self.key[:2] == key[:2] and self.message is not None
        if message is not self.message:
            self.hovered = False  # another message now: the pointer has not entered it yet
        self.key, self.message, self.state = key, message, state
        uncited = bool(message.sources) and not self._cited  # a reply just streamed: its citations become links
        if not (same_text or state.streaming) or (uncited and not state.streaming):
            self._set_body(message)
        self._set_parts(message, state)
        self._laid_out = None
        self.update()

    def _set_body(self, message: Message) -> None:
        self._cited = bool(message.sources)
        if message.role is Role.ASSISTANT:
            html, blocks = self._view.rendered(message.content)
            html = linked_citations(html, {source.number for source in message.sources})
            self.code_blocks = list(blocks)
            self.body.setHtml(html)
        else:
            self.code_blocks = []
            self.body.setPlainText(message.content)

    def begin_stream(self, row: int, message: Message, state: ItemState) -> None:
        """An empty reply body that a stream fills (see ``reply_document.ReplyDocumentStream``)."""
        self.key = None
        self._cited = False
        self.body.clear()
        self.thinking.begin_stream()
        self.code_blocks = []
        self.bind(row, message, state)
        self.show_typing(True)

    def show_typing(self, on: bool, frame: int = len(TYPING_FRAMES) - 1) -> None:
        """The typing dots in the reply's bubble (``frame``: how many dots), or none."""
        self.typing.setText(TYPING_FRAMES[frame % len(TYPING_FRAMES)])
        if self.typing.isHidden() == on:
            self.typing.setVisible(on)
            self._laid_out = None

    def _set_parts(self, message: Message, state: ItemState) -> None:
        user = message.role is Role.USER
        self.images.show_attachments(message.attachments)
        if not state.streaming:
            self.thinking.show_message(message, state.thinking_open)
        self.header.setText(header_text(message))
        self.header.setAlignment(Qt.AlignmentFlag.AlignRight if user else Qt.AlignmentFlag.AlignLeft)
        mark, level = status_mark(message)
        self.mark.setText(mark)
        self.mark.setVisible(bool(mark) and not state.streaming)
        self.limit.setVisible(hit_token_limit(message) and not state.streaming)
        self.tools.setVisible(bool(message.tool_calls) and not state.streaming)
        if message.tool_calls and not state.streaming:
            self.tools.show_calls(message.tool_calls, state.tools_waiting, state.results_open, state.tools_continue)
        self.continue_button.setVisible(state.last_reply)
        self.resume_button.setVisible(continues_after_stop(message, state))
        if not state.streaming:
            self.typing.hide()
        versions = "" if state.streaming else version_text(message)
        self.version_label.setText(versions)
        for part in (self.older, self.version_label, self.newer):
            part.setVisible(bool(versions))
        self.older.setEnabled(message.version > 0)
        self.newer.setEnabled(message.version < len(message.versions))
        self.sources.setVisible(bool(message.sources or documents_note(message)) and not state.streaming)
        if self.sources.isVisibleTo(self):
            self.sources.setText(sources_html(message))
        short, tip = figures(message)
        self.figures.setText(short)
        self.figures.setToolTip(tip)
        self.indicator.setVisible(state.streaming)
        self.buttons["edit"].setEnabled(user)
        self.buttons["regenerate"].setEnabled(state.last_reply)
        self._user = user
        if level != self._mark_level:
            self._mark_level = level
            t = tokens(self._view.palette())
            set_text_color(self.mark, t.error if level == "error" else t.warning)
        self._show_actions()

    def set_indicator(self, text: str) -> None:
        self.indicator.setText(text)

    def plain_text(self) -> str:
        if self.message is None:
            return ""
        return plain_text(self.message, self.body.toPlainText(), self.state)

    # -- hover actions -------------------------------------------------------------------------------------------

    def _wanted_actions(self) -> list[str]:
        message = self.message
        if message is None or self.state.streaming:
            return []
        names = ["copy"]
        if message.role is Role.USER:
            names.append("edit")
        if self.state.last_reply:
            names.append("regenerate")
        if self.state.fork:
            names.append("fork")
        return names

    def _show_actions(self) -> None:
        visible = self.hovered or self.state.last
        wanted = self._wanted_actions()
        for name, button in self.buttons.items():
            button.setVisible(visible and name in wanted)

    def event(self, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.Enter, QEvent.Type.Leave):
            self.hovered = kind == QEvent.Type.Enter
            self._show_actions()
        return super().event(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        """A user message's tinted bubble; a search hit outlined for a moment (``TranscriptView.scroll_to_message``).

        Painted here rather than styled: a pooled item changes role often, and re-polishing a style is slow.
        """
        if not (self._user or self.state.highlight):
            return
        t = tokens(self._view.palette())
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        if self._user:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(t.accent_soft)
            painter.drawRoundedRect(QRectF(self.bubble.geometry()), BUBBLE_RADIUS, BUBBLE_RADIUS)
        if self.state.highlight:
            x0, col = column(self.width())
            painter.setPen(t.accent)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            area = QRectF(x0 - SPACE_S + 0.5, 0.5, col + 2 * SPACE_S - 1, self.height() - GAP / 2)
            painter.drawRoundedRect(area, 8, 8)
        painter.end()

    def copied(self) -> None:
        """Brief feedback on the copy button."""
        button = self.buttons["copy"]
        button.setIcon(self._view.icons["check"])
        QTimer.singleShot(1200, button, lambda: button.setIcon(self._view.icons["copy"]))

    def restyle(self) -> None:
        """Icons from the current palette (after a theme change)."""
        for name, button in self.buttons.items():
            button.setIcon(self._view.icons[name])
        self.continue_button.setIcon(self._view.icons["continue"])
        self.resume_button.setIcon(self._view.icons["continue"])
        self._laid_out = None
        self._mark_level = "?"  # coloured again at the next bind

    def invalidate(self) -> None:
        """Measure again at the next layout (fonts or styles changed)."""
        self._laid_out = None

    def clear_key(self) -> None:
        """Forget what is shown, so the next bind renders again (a theme change restyles the text)."""
        self.key = None
        self.message = None

    # -- geometry ------------------------------------------------------------------------------------------------

    def layout_for(self, width: int) -> int:
        """Place every part for a viewport ``width`` wide; returns the item's height."""
        streamed = (self.body.document().revision(), self.thinking.revision(), self.thinking.open,
                    self.thinking.isHidden(), self.typing.isHidden()) if self.state.streaming else 0  # fmt: skip
        stamp = (width, self.key, streamed)
        if stamp == self._laid_out:
            return self._height
        x0, col = column(width)
        if self.message is not None and self.message.role is Role.USER:
            self.header.setVisible(False)
            y = self._place_user(x0, col, SPACE_S)
        else:
            if self.header.isHidden():
                self.header.show()
            y = self._place_reply(x0, col, SPACE_XS)
        self._height = y + GAP
        self._laid_out = stamp
        return self._height

    def _place_user(self, x0: int, col: int, y: int) -> int:
        """A tinted bubble on the right; its actions to its left (or below it when there is no room)."""
        text = self.message.content if self.message else ""
        if self.images.isVisibleTo(self):  # its images above the bubble, at the right
            self.images.setGeometry(x0, y, col, THUMB)
            y += THUMB + SPACE_XS
        inner = min(int(col * USER_SHARE) - 2 * PAD_X, self.body.ideal_width(text) + 4)
        height = self.body.text_height(inner)
        outer = inner + 2 * PAD_X
        left = x0 + col - outer
        self.bubble.setGeometry(left, y, outer, height + 2 * PAD_Y)
        self.body.setGeometry(PAD_X, PAD_Y, inner, height)
        bottom = y + height + 2 * PAD_Y
        wanted = self._wanted_actions()
        nav = self._versions_width()
        gap = SPACE_XS if nav and wanted else 0
        need = BUTTON_STEP * len(wanted) + gap + nav  # the actions, then ‹ 2/3 › next to the bubble
        room = left - x0 - SPACE_XS
        fits = room >= need
        x, row_y = (left - SPACE_XS - need, bottom - BUTTON) if fits else (x0 + col - need, bottom + 2)
        self._place_buttons(wanted, x, row_y)
        if nav:
            self._place_versions(x + need - nav, row_y)
        return bottom if fits else bottom + 2 + FOOTER_H

    def _place_reply(self, x0: int, col: int, y: int) -> int:
        """Full width: header, text, marks, then the figures with the actions after them."""
        small = self.header.fontMetrics().height()
        self.header.setGeometry(x0, y, col, small)
        y += small + 2
        y += self.thinking.place(x0, y, col)
        height = self.body.text_height(col)
        if self.typing.isVisibleTo(self):
            height = max(height, self.typing.sizeHint().height())
            self.typing.setGeometry(x0, y, col, height)
        self.bubble.setGeometry(x0, y, col, height)
        self.body.setGeometry(0, 0, col, height)
        y += height
        if self.mark.isVisibleTo(self):
            y += self._place_mark(x0, y + SPACE_XS, col) + SPACE_XS
        if self.tools.isVisibleTo(self):
            y += self.tools.place(x0, y + SPACE_S, col) + SPACE_S
        if self.limit.isVisibleTo(self):
            self.limit.setGeometry(x0, y + SPACE_S, min(col, 460), LIMIT_H)
            y += LIMIT_H + SPACE_S
        if self.sources.isVisibleTo(self):
            height = self.sources.heightForWidth(col)
            self.sources.setGeometry(x0, y + SPACE_S, col, height)
            y += height + SPACE_S
        y += 2
        x = x0
        if nav := self._versions_width():
            self._place_versions(x, y + (FOOTER_H - BUTTON) // 2)
            x += nav + SPACE_S
        shown = self.indicator if self.state.streaming else self.figures
        text = INDICATOR_ROOM if self.state.streaming else self.figures.text()  # the indicator ticks: room for all
        actions = self._wanted_actions()
        room = max(col // 2, col - (x - x0) - SPACE_S - BUTTON_STEP * len(actions))  # what the buttons leave
        text_w = min(room, shown.fontMetrics().horizontalAdvance(text) + 2) if text else 0
        shown.setGeometry(x, y, text_w, FOOTER_H)
        gap = SPACE_S if text_w else 0
        self._place_buttons(actions, x + text_w + gap, y + (FOOTER_H - BUTTON) // 2)
        return y + FOOTER_H

    def _place_mark(self, x0: int, y: int, col: int) -> int:
        """The mark under the text, with Continue after it on a stopped last reply; returns its height."""
        if not self.resume_button.isVisibleTo(self):
            height = self.mark.heightForWidth(col)
            self.mark.setGeometry(x0, y, col, height)
            return height
        button = self.resume_button.sizeHint()
        text_w = min(col - button.width() - SPACE_S, self.mark.fontMetrics().horizontalAdvance(self.mark.text()) + 2)
        height = max(self.mark.heightForWidth(text_w), button.height())
        self.mark.setGeometry(x0, y, text_w, height)
        self.resume_button.setGeometry(x0 + text_w + SPACE_S, y + (height - button.height()) // 2, button.width(),
                                       button.height())  # fmt: skip
        return height

    def _versions_width(self) -> int:
        """The width ``‹ 2/3 ›`` takes (0 when the message has no other version)."""
        if not self.version_label.isVisibleTo(self):
            return 0
        return 2 * BUTTON + self.version_label.fontMetrics().horizontalAdvance(self.version_label.text()) + 6

    def _place_versions(self, x: int, y: int) -> None:
        label_w = self._versions_width() - 2 * BUTTON
        self.older.setGeometry(x, y, BUTTON, BUTTON)
        self.version_label.setGeometry(x + BUTTON, y, label_w, BUTTON)
        self.newer.setGeometry(x + BUTTON + label_w, y, BUTTON, BUTTON)

    def _place_buttons(self, names: list[str], x: int, y: int) -> None:
        for name in names:
            self.buttons[name].move(x, y)
            x += BUTTON_STEP


def transcript_style(t: Tokens) -> str:
    """The transcript's style sheet (set on the transcript, so it wins over the app's). No background on the
    transcript itself: a sheet's background becomes the widget's own palette, which then stops following the app's
    (after a switch to dark the transcript stayed white); its viewport fills with the palette's base anyway."""
    c = {name: value.name() for name, value in t.__dict__.items() if hasattr(value, "name")}
    return f"""
TranscriptView {{ border: none; }}
QWidget#transcriptViewport {{ background: {c["base"]}; }}
QFrame#bubble {{ background: transparent; border: none; }}
QTextBrowser#messageBody {{ background: transparent; border: none; padding: 0px; color: {c["text"]}; }}
QLabel[part="meta"] {{ color: {c["muted"]}; font-size: 9pt; }}
QLabel[part="note"] {{ color: {c["muted"]}; font-style: italic; }}
QLabel[part="mark"] {{ font-weight: 600; }}
QLabel[part="typing"] {{ color: {c["muted"]}; font-size: 11pt; }}
QFrame#limitMarker {{ background: {c["warning_bg"]}; border: 1px solid {c["border"]}; border-radius: {RADIUS}px; }}
QLabel[part="limit"] {{ color: {c["warning"]}; font-weight: 600; }}
QPushButton#continueButton {{ padding: 3px 10px; }}
QToolButton[part="action"] {{ border: none; border-radius: {RADIUS}px; padding: 3px; background: transparent; }}
QToolButton[part="action"]:hover {{ background: {c["hover"]}; }}
QToolButton#thinkingToggle {{ color: {c["muted"]}; border: none; border-radius: {RADIUS}px; padding: 2px 6px 2px 2px;
    font-size: 9pt; font-weight: 600; background: transparent; }}
QToolButton#thinkingToggle:hover {{ background: {c["hover"]}; color: {c["text"]}; }}
QTextBrowser#thinkingText {{ background: transparent; border: none; padding: 0px; color: {c["muted"]}; }}
QFrame#thinkingRule {{ background: {c["border"]}; border: none; }}
QFrame#toolCard {{ background: {c["surface"]}; border: 1px solid {c["border"]}; border-radius: {RADIUS_CARD}px; }}
QLabel#toolTitle {{ font-weight: 600; color: {c["text"]}; }}
QTextBrowser#toolText {{ background: transparent; border: none; padding: 0px; color: {c["text"]}; }}
QToolButton#resultToggle {{ color: {c["muted"]}; border: none; border-radius: {RADIUS}px; padding: 1px 4px;
    font-size: 9pt; font-weight: 600; background: transparent; }}
QToolButton#resultToggle:hover {{ background: {c["hover"]}; color: {c["text"]}; }}
"""


def document_css(t: Tokens, code_font: str) -> str:
    """Styles inside a message's text (Qt's HTML subset)."""
    return f"""
        p.note, p.code-actions {{ color: {t.muted.name()}; font-size: small; }}
        p.note {{ font-style: italic; }}
        code {{ font-family: {code_font}; }}
        pre {{ background-color: {t.code_bg.name()}; }}
        p.code-actions {{ margin-bottom: 2px; margin-top: 8px; }}
        a {{ color: {t.accent.name()}; }}
        p.code-actions a {{ color: {t.muted.name()}; text-decoration: none; font-weight: 600; }}
        {highlight_css(t.dark, t.code_bg.name())}
        """


def small_font(font: QFont) -> QFont:
    small = QFont(font)
    small.setPointSizeF(max(6.0, font.pointSizeF() * 0.9))
    return small


def scratch_text(html: str, css: str) -> str:
    """The plain text of message HTML, rendered in a throw-away document (for messages not on screen)."""
    document = QTextDocument()
    document.setDefaultStyleSheet(css)
    document.setHtml(html)
    return document.toPlainText()


def line_metrics(font: QFont) -> tuple[int, int]:
    """(line height, average character width) for estimating a message's height."""
    metrics = QFontMetrics(font)
    return metrics.lineSpacing(), max(1, metrics.averageCharWidth())
