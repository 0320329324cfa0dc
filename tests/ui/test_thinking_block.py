"""The Thinking block in the transcript, with real widgets offscreen: it streams open while the model thinks
("Thinking… 0.4 s"), closes when the answer starts ("Thought for … · N tokens" once saved), opens on a click, reads in
both palettes, takes an answer that turned out to be thinking, and costs one line when closed."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QPalette

from app.core.chat.conversation import Message, ReplyStats, Role
from app.ui.pages.chat.message_item import MessageItem
from app.ui.pages.chat.thinking_block import TOGGLE_H, thinking_label
from app.ui.pages.chat.transcript import ChatView, TranscriptView

THOUGHT = "The user greets me.\nI should greet back, briefly."


@pytest.fixture
def view(qtbot) -> TranscriptView:
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(600, 500)
    widget.show()
    return widget


def reply_item(view: TranscriptView, index: int) -> MessageItem:
    item = view.message_widget(index)
    assert item is not None
    return item


def saved_chat() -> list[Message]:
    stats = ReplyStats(completion_tokens=40, thinking_ms=3210, thinking_tokens=31)
    return [
        Message(Role.USER, "hello"),
        Message(Role.ASSISTANT, "Hello! How can I help?", stats=stats, reasoning=THOUGHT),
        Message(Role.USER, "thanks"),
        Message(Role.ASSISTANT, "You're welcome.", stats=ReplyStats(completion_tokens=4)),
    ]


def test_labels_say_how_long_and_how_many_tokens():
    assert thinking_label(None, streaming_ms=3240) == "Thinking… 3.2 s"
    assert thinking_label(ReplyStats(thinking_ms=3210, thinking_tokens=31)) == "Thought for 3.2 s · 31 tokens"
    assert thinking_label(ReplyStats(thinking_ms=95_000)) == "Thought for 1:35"
    assert thinking_label(None) == "Thinking"


def test_a_saved_reply_shows_its_thinking_closed_and_opens_on_a_click(view: TranscriptView, qtbot) -> None:
    view.show_messages(saved_chat())
    item, plain = reply_item(view, 1), reply_item(view, 3)
    block = item.thinking
    assert block.isVisibleTo(item) and not plain.thinking.isVisibleTo(plain)
    assert block.toggle.text() == "▸ Thought for 3.2 s · 31 tokens"
    assert not block.text.isVisibleTo(block) and block.text.toPlainText() == ""  # closed: the text is not even set
    assert item.body.geometry().translated(item.bubble.pos()).top() >= block.geometry().bottom()  # above the answer
    closed_height = item.height()
    block.toggle.click()
    qtbot.waitUntil(lambda: reply_item(view, 1).thinking.text.isVisibleTo(reply_item(view, 1)))
    item = reply_item(view, 1)
    assert item.thinking.text.toPlainText() == THOUGHT and item.thinking.toggle.text().startswith("▾ ")
    assert item.height() > closed_height
    assert item.body.toPlainText().startswith("Hello!")
    item.thinking.toggle.click()
    qtbot.waitUntil(lambda: not reply_item(view, 1).thinking.text.isVisibleTo(reply_item(view, 1)))
    assert reply_item(view, 1).height() == closed_height


def test_thinking_streams_open_then_closes_when_the_answer_starts(view: TranscriptView, qtbot) -> None:
    view.show_messages([Message(Role.USER, "hello")])
    view.begin_reply("tiny")
    item = reply_item(view, 1)
    assert item.thinking.isHidden()
    view.append_thinking("The user ")
    view.append_thinking("greets me.")
    view.flush()
    assert item.thinking.isVisibleTo(item) and item.thinking.open
    assert item.thinking.text.toPlainText() == "The user greets me."
    assert item.thinking.toggle.text().startswith("▾ Thinking… 0.")
    qtbot.waitUntil(lambda: item.indicator.text().startswith("Thinking"))  # the ticking indicator says it too
    qtbot.waitUntil(lambda: item.thinking.toggle.text() != "▾ Thinking… 0.0 s")  # and the seconds count on
    grown = item.height()
    view.append_thinking(" I should greet back.\n" * 5)
    view.flush()
    assert item.height() > grown  # the block grows while it streams
    view.append_reply("Hello!")
    view.flush()
    assert not item.thinking.open and not item.thinking.text.isVisibleTo(item)
    assert item.thinking.toggle.text().startswith("▸ Thought for ")
    assert item.body.toPlainText() == "Hello!"
    view.end_reply()
    ended = reply_item(view, 1)
    assert ended.message.content == "Hello!" and ended.message.reasoning.startswith("The user greets me. I should")
    assert ended.thinking.isVisibleTo(ended) and not ended.thinking.open


def test_an_answer_that_was_thinking_moves_into_the_block(view: TranscriptView) -> None:
    view.show_messages([Message(Role.USER, "hello")])
    view.begin_reply()
    view.append_reply("Hmm, a greeting.")
    view.flush()
    item = reply_item(view, 1)
    assert item.body.toPlainText() == "Hmm, a greeting." and item.thinking.isHidden()
    view.recast_thinking("Hmm, a greeting.")
    assert item.body.toPlainText() == "" and item.thinking.text.toPlainText() == "Hmm, a greeting."
    view.append_reply("Hello!")
    view.flush()
    assert item.body.toPlainText() == "Hello!" and not item.thinking.open


def test_the_block_reads_in_both_palettes(view: TranscriptView, qtbot) -> None:
    for base, text in ((QColor("#ffffff"), QColor("#1a1a1a")), (QColor("#1e1e1e"), QColor("#e8e8e8"))):
        palette = QPalette(view.palette())
        palette.setColor(QPalette.ColorRole.Base, base)
        palette.setColor(QPalette.ColorRole.Window, base)
        palette.setColor(QPalette.ColorRole.Text, text)
        palette.setColor(QPalette.ColorRole.WindowText, text)
        view.setPalette(palette)
        view.show_messages(saved_chat())
        block = reply_item(view, 1).thinking
        block.toggle.click()
        qtbot.waitUntil(lambda: reply_item(view, 1).thinking.text.isVisibleTo(reply_item(view, 1)))
        shown = reply_item(view, 1).thinking.text.grab().toImage()
        inked = {shown.pixelColor(x, y).name() for x in range(0, shown.width(), 2) for y in range(shown.height())}
        ink = [QColor(name) for name in inked if abs(QColor(name).lightness() - base.lightness()) > 60]
        assert ink, "the thinking's text should stand out from the background"
        reply_item(view, 1).thinking.toggle.click()
        qtbot.waitUntil(lambda: not reply_item(view, 1).thinking.text.isVisibleTo(reply_item(view, 1)))


def test_a_long_chat_with_thinking_costs_what_is_on_screen(view: TranscriptView) -> None:
    chat = []
    for i in range(1500):
        chat.append(Message(Role.USER, f"Question {i}"))
        chat.append(Message(Role.ASSISTANT, f"Answer {i}.", reasoning="Let me think. " * 200,
                            stats=ReplyStats(thinking_ms=1200, thinking_tokens=600)))  # fmt: skip
    view.show_messages(chat)  # its speed is `llm-workstation bench history`; here, what it builds
    live = [reply_item(view, row) for row in view.live_rows() if row % 2]
    assert live and all(item.thinking.text.toPlainText() == "" for item in live)  # closed: no text set
    assert all(item.thinking.height() == TOGGLE_H + 4 for item in live)
