"""A reply's thinking in the transcript: a toggle above the answer ("Thought for 3.2 s · 120 tokens") that opens the
thinking as plain, muted text. While the model thinks the block is open and its text streams; it closes when the
answer starts. Collapsed it costs one line: the thinking's text is set only when the block is opened.

Laid out by hand like the message item that holds it (``place`` returns the height it took)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QCoreApplication, QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent, QTextCursor
from PySide6.QtWidgets import QFrame, QTextBrowser, QToolButton, QWidget

from app.core.chat.conversation import Message, ReplyStats
from app.core.units import format_duration
from app.ui.pages.chat.text_fit import fitted_height

TOGGLE_H = 26
INDENT = 10  # the text's inset from the rule on its left
GAP_BELOW = 4
OPEN_GAP = 6  # more room between an open thinking and the answer


def thinking_label(stats: ReplyStats | None, *, streaming_ms: float | None = None) -> str:
    """The toggle's words: "Thinking… 3.2 s" while it thinks, "Thought for 3.2 s · 120 tokens" once done."""
    if streaming_ms is not None:
        return f"Thinking… {_seconds(streaming_ms)}"
    if stats is None or stats.thinking_ms is None:
        return "Thinking"
    parts = [f"Thought for {_seconds(stats.thinking_ms)}"]
    if stats.thinking_tokens:
        parts.append(f"{stats.thinking_tokens} tokens")
    return " · ".join(parts)


def _seconds(ms: float) -> str:
    """Tenths of a second under a minute ("3.2 s"), then minutes and seconds."""
    return f"{ms / 1000:.1f} s" if ms < 59_950 else format_duration(ms / 1000)


class ThinkingText(QTextBrowser):
    """The thinking: plain text, selectable, sized to itself, never scrolls."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("thinkingText")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.viewport().setAutoFillBackground(False)
        document = self.document()
        document.setUndoRedoEnabled(False)
        document.setDocumentMargin(0)
        QCoreApplication.sendEvent(self, QResizeEvent(self.size(), QSize(-1, -1)))  # lay out before first shown

    def text_height(self, width: int) -> int:
        return fitted_height(self, width)

    def append(self, text: str) -> None:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)

    def wheelEvent(self, event: Any) -> None:
        event.ignore()  # the transcript scrolls

    def loadResource(self, type: int, name: Any) -> Any:
        return None  # a model's thinking loads nothing


class ThinkingBlock(QWidget):
    """The toggle and, when open, the text. ``toggled`` says the person opened or closed it."""

    toggled = Signal()

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setAutoRaise(True)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setToolTip("Show or hide how the model thought before it answered")
        self.toggle.clicked.connect(self.toggled)
        self._text: ThinkingText | None = None  # made when first needed: most items never show thinking
        self._rule: QFrame | None = None
        self.open = False
        self._shown = ""  # the reasoning the text holds (set only when open)
        self._label = ""
        self.hide()

    @property
    def text(self) -> ThinkingText:
        return self._parts()[0]

    @property
    def rule(self) -> QFrame:
        return self._parts()[1]

    def _parts(self) -> tuple[ThinkingText, QFrame]:
        """The text and the rule on its left, made together the first time they are needed."""
        if self._text is None or self._rule is None:
            self._rule = QFrame(self)
            self._rule.setObjectName("thinkingRule")
            self._text = ThinkingText(self)
            self._rule.setVisible(self.open)
            self._text.setVisible(self.open)
        return self._text, self._rule

    def revision(self) -> int:
        """Changes whenever the text does (the item measures itself again)."""
        return self._text.document().revision() if self._text is not None else 0

    def show_message(self, message: Message, open_: bool) -> None:
        """A saved reply's thinking (hidden when it has none)."""
        self.setVisible(bool(message.reasoning))
        if not message.reasoning:
            return
        self.set_label(thinking_label(message.stats))
        self.set_open(open_)
        if open_ and self._shown != message.reasoning:
            self.text.setPlainText(message.reasoning)
            self._shown = message.reasoning

    def begin_stream(self) -> None:
        """A reply starts: nothing shown until its first thinking arrives."""
        self.hide()
        if self._text is not None:
            self._text.clear()
        self._shown = ""

    def stream(self, text: str) -> None:
        """More thinking while the model thinks: the block opens and grows."""
        if self.isHidden():
            self.show()
            self.set_open(True)
        self.text.append(text)
        self._shown += text

    def replace_text(self, text: str) -> None:
        self.show()
        self.text.setPlainText(text)
        self._shown = text

    def set_open(self, open_: bool) -> None:
        self.open = open_
        if open_ or self._text is not None:
            self.text.setVisible(open_)
            self.rule.setVisible(open_)
        self._show_label()

    def set_label(self, label: str) -> None:
        self._label = label
        self._show_label()

    def _show_label(self) -> None:
        self.toggle.setText(("▾ " if self.open else "▸ ") + self._label)

    def place(self, x: int, y: int, width: int) -> int:
        """Put the block at (x, y) in its item, ``width`` wide; returns the height it takes (0 when hidden)."""
        if self.isHidden():
            return 0
        height = TOGGLE_H
        toggle_w = min(width, self.toggle.sizeHint().width())
        self.toggle.setGeometry(-2, 0, toggle_w, TOGGLE_H)  # its text in line with the header's
        if self.open:
            text_h = self.text.text_height(width - INDENT - 2)
            self.rule.setGeometry(2, TOGGLE_H + 2, 2, text_h)
            self.text.setGeometry(INDENT, TOGGLE_H + 2, width - INDENT - 2, text_h)
            height += text_h + 2 + OPEN_GAP
        height += GAP_BELOW
        self.setGeometry(x, y, width, height)
        return height
