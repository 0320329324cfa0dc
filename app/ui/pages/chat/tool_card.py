"""A reply's tool calls in the transcript: one card per call with the tool, its server and its arguments; while a
call waits, Approve once / Always for this tool in this chat / Deny (with an optional reason for the model); once
it ran, its result behind a toggle that shows the byte count. After the last round of a reply that ended on tool
calls (the round cap, or Stop), a Continue marker lets the model go on.

Arguments and results are plain text in a browser that opens and loads nothing: what a tool returns cannot become
a link, markup or an action. Laid out by hand like the message item (``place`` returns the height it took)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QTextOption
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QPushButton, QToolButton, QWidget

from app.core.chat.tool_calls_view import arguments_text, call_state, result_label, result_preview
from app.core.chat.tool_use import MAX_ROUNDS, Approval, ToolUse
from app.ui.style.theme import SPACE_S, SPACE_XS, tokens
from app.ui.widgets.palette import set_text_color

PAD = 8
LINE_H = 22
BUTTONS_H = 30
CONTINUE_H = 36
TOOL_CARD_H = 100  # a card's height as first guessed (before it is measured on screen)
CONTINUE_TEXT = "Paused after tool calls."
CONTINUE_TIP = (f"A reply uses tools for at most {MAX_ROUNDS} rounds at a time (or it was stopped). Continue sends the "
                "results back to the model so it can go on.")  # fmt: skip


class ToolCard(QFrame):
    """One call. ``decided(call_id, approval, reason)``; ``result_toggled(call_id)``."""

    decided = Signal(str, str, str)
    result_toggled = Signal(str)

    def __init__(self, parent: QWidget, text_box: type) -> None:
        super().__init__(parent)
        self.setObjectName("toolCard")
        self.call: ToolUse | None = None
        self.waiting = False
        self.result_open = False
        self.title = QLabel(self)
        self.title.setObjectName("toolTitle")
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.state = QLabel(self)
        self.state.setProperty("part", "meta")
        self.state.setTextFormat(Qt.TextFormat.PlainText)
        self.state.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.arguments = text_box(self)
        self.arguments.setObjectName("toolText")
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.arguments.document().setDefaultFont(mono)
        self.reason = QLineEdit(self)
        self.reason.setObjectName("denyReason")
        self.reason.setPlaceholderText("Reason for denying (optional, sent to the model)")
        self.buttons = QWidget(self)  # placed by hand: on a narrow column they wrap onto a second line
        self.approve_button = QPushButton("Approve once", self.buttons)
        self.approve_button.setObjectName("approveOnce")
        self.always_button = QPushButton("Always for this tool in this chat", self.buttons)
        self.always_button.setObjectName("approveAlways")
        self.deny_button = QPushButton("Deny", self.buttons)
        self.deny_button.setObjectName("denyCall")
        self.always_button.setToolTip("Run this tool without asking again, in this chat only")
        self.approve_button.clicked.connect(lambda: self._decide(Approval.APPROVED))
        self.always_button.clicked.connect(lambda: self._decide(Approval.ALWAYS))
        self.deny_button.clicked.connect(lambda: self._decide(Approval.DENIED))
        self.reason.returnPressed.connect(lambda: self._decide(Approval.DENIED))
        self.result_toggle = QToolButton(self)
        self.result_toggle.setObjectName("resultToggle")
        self.result_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.result_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.result_toggle.clicked.connect(lambda: self.call and self.result_toggled.emit(self.call.id))
        self.result = text_box(self)
        self.result.setObjectName("toolText")
        self.result.document().setDefaultFont(mono)
        for box in (self.arguments, self.result):  # a long token (a path, a hash) wraps instead of running off
            box.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)

    def show_call(self, call: ToolUse, waiting: bool, result_open: bool) -> None:
        changed_call = self.call is None or self.call.id != call.id
        self.call, self.waiting, self.result_open = call, waiting, result_open
        self.title.setText(f"{call.tool or call.name}  ·  {call.server or 'no such tool'}")
        self.title.setToolTip(f"The model called {call.name}" + (f" on the MCP server {call.server}" if call.server
                                                                 else ""))  # fmt: skip
        words, level = call_state(call, waiting)
        self.state.setText(words)
        self.state.setToolTip(words)
        t = tokens(self.palette())
        set_text_color(self.state, t.error if level == "error" else t.warning if level == "warning" else t.muted)
        self.arguments.setPlainText(arguments_text(call))
        if changed_call:
            self.reason.clear()
        self.reason.setVisible(waiting)
        self.buttons.setVisible(waiting)
        shown = call.settled and call.approval is not Approval.UNKNOWN
        self.result_toggle.setVisible(shown)
        self.result_toggle.setText(result_label(call))
        self.result_toggle.setArrowType(Qt.ArrowType.DownArrow if result_open else Qt.ArrowType.RightArrow)
        self.result.setVisible(shown and result_open)
        if shown and result_open:
            self.result.setPlainText(result_preview(call))

    def place(self, x: int, y: int, width: int) -> int:
        inner = width - 2 * PAD
        top = PAD
        state_w = min(inner // 2, self.state.fontMetrics().horizontalAdvance(self.state.text()) + 4)
        self.title.setGeometry(PAD, top, inner - state_w - SPACE_S, LINE_H)
        self.state.setGeometry(PAD + inner - state_w, top, state_w, LINE_H)
        top += LINE_H + SPACE_XS
        height = self.arguments.text_height(inner)
        self.arguments.setGeometry(PAD, top, inner, height)
        top += height + SPACE_XS
        if self.waiting:
            self.reason.setGeometry(PAD, top + SPACE_XS, inner, self.reason.sizeHint().height())
            top += self.reason.sizeHint().height() + SPACE_S
            height = self._place_buttons(inner)
            self.buttons.setGeometry(PAD, top, inner, height)
            top += height + SPACE_XS
        if self.result_toggle.isVisibleTo(self):
            self.result_toggle.setGeometry(PAD - 2, top, min(inner, self.result_toggle.sizeHint().width()), LINE_H)
            top += LINE_H + SPACE_XS
            if self.result_open:
                height = self.result.text_height(inner)
                self.result.setGeometry(PAD, top, inner, height)
                top += height + SPACE_XS
        self.setGeometry(x, y, width, top + PAD - SPACE_XS)
        return top + PAD - SPACE_XS

    def _place_buttons(self, width: int) -> int:
        """The three buttons in a row, wrapping to the next line where the column is too narrow."""
        x = y = 0
        for button in (self.approve_button, self.always_button, self.deny_button):
            w = min(width, button.sizeHint().width())
            if x and x + w > width:
                x, y = 0, y + BUTTONS_H + SPACE_XS
            button.setGeometry(x, y, w, BUTTONS_H)
            x += w + SPACE_S
        return y + BUTTONS_H

    def _decide(self, approval: Approval) -> None:
        if self.call is not None and self.waiting:
            self.decided.emit(self.call.id, str(approval), self.reason.text() if approval is Approval.DENIED else "")


class ToolCards(QWidget):
    """The cards of one reply, and the Continue marker after a reply that ended on tool calls."""

    decided = Signal(str, str, str)
    result_toggled = Signal(str)
    continue_requested = Signal()

    def __init__(self, parent: QWidget, text_box: type) -> None:
        super().__init__(parent)
        self._text_box = text_box
        self.cards: list[ToolCard] = []
        self.marker = QFrame(self)
        self.marker.setObjectName("limitMarker")
        self.marker.setToolTip(CONTINUE_TIP)
        self.marker_text = QLabel(CONTINUE_TEXT, self.marker)
        self.marker_text.setProperty("part", "limit")
        self.continue_button = QPushButton("Continue", self.marker)
        self.continue_button.setObjectName("toolsContinue")
        self.continue_button.clicked.connect(self.continue_requested)
        row = QHBoxLayout(self.marker)
        row.setContentsMargins(SPACE_S, 2, SPACE_XS, 2)
        row.addWidget(self.marker_text, 1)
        row.addWidget(self.continue_button)
        self.marker.hide()

    def show_calls(self, calls: list[ToolUse], waiting: frozenset[str], opened: frozenset[str], more: bool) -> None:
        """``more``: the Continue marker (the chat ends on these calls, all settled, and nothing generates)."""
        while len(self.cards) < len(calls):
            card = ToolCard(self, self._text_box)
            card.decided.connect(self.decided)
            card.result_toggled.connect(self.result_toggled)
            self.cards.append(card)
        for index, card in enumerate(self.cards):
            card.setVisible(index < len(calls))
            if index < len(calls):
                call = calls[index]
                card.show_call(call, call.id in waiting, call.id in opened)
        self.marker.setVisible(more)

    def place(self, x: int, y: int, width: int) -> int:
        top = 0
        for card in self.cards:
            if card.isVisibleTo(self):
                top += card.place(0, top, width) + SPACE_S
        if self.marker.isVisibleTo(self):
            self.marker.setGeometry(0, top, min(width, 620), CONTINUE_H)
            top += CONTINUE_H + SPACE_S
        self.setGeometry(x, y, width, top)
        return top

    def card(self, call_id: str) -> ToolCard | None:
        return next((c for c in self.cards if c.call is not None and c.call.id == call_id and c.isVisibleTo(self)),
                    None)  # fmt: skip
