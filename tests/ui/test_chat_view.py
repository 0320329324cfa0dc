"""The chat transcript widget, with real widgets offscreen."""

from __future__ import annotations

import random
import re
import statistics
import time

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QColor, QFontDatabase, QGuiApplication, QPalette

from app.core.chat import Message, MessageStatus, ReplyStats, Role
from app.ui.widgets.chat_view import ChatView

CODE = 'def greet(name):\n    print(f"hello {name} <3")\n\n    return None'
REPLY = f"""Here is **the answer**.

```python
{CODE}
```

- one
- two with `inline`

# Done
"""


@pytest.fixture
def view(qtbot) -> ChatView:
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(500, 300)
    widget.show()
    return widget


def conversation() -> list[Message]:
    return [
        Message(Role.USER, "first <b>question</b>\nsecond line"),
        Message(Role.ASSISTANT, "first *reply*", stats=ReplyStats(completion_tokens=3, prompt_tokens=9), model="tiny"),
        Message(Role.USER, "show code"),
        Message(Role.ASSISTANT, REPLY, stats=ReplyStats(completion_tokens=40, decode_tokens_per_s=12.5)),
    ]


def click(view: ChatView, href: str) -> None:
    view.anchorClicked.emit(QUrl(href))


def anchors(view: ChatView) -> list[str]:
    return re.findall(r'<a href="([^"]+)"', view.toHtml())


def block_with(view: ChatView, text: str):
    block = view.document().begin()
    while block.isValid() and text not in block.text():
        block = block.next()
    assert block.isValid(), f"no block with {text!r}"
    return block


# -- show_messages ----------------------------------------------------------------------------------------


def test_renders_user_text_plainly_and_assistant_markdown(view: ChatView) -> None:
    view.show_messages(conversation(), system_note="Be brief.")
    text = view.toPlainText()
    assert text.startswith("Be brief.")
    assert "You\nfirst <b>question</b>\nsecond line" in text  # escaped, line break kept
    assert "Assistant\nfirst reply" in text  # markdown rendered: no asterisks
    assert "Here is the answer." in text and "**" not in text
    assert "3 tokens · prompt 9 tokens · tiny" in text
    assert "40 tokens · 12.5 tok/s · prompt 0 tokens" in text
    heading = block_with(view, "Done")
    assert heading.blockFormat().headingLevel() == 1


def test_model_output_cannot_inject_html_or_actions(view: ChatView) -> None:
    view.show_messages([Message(Role.ASSISTANT, "<b>x</b> [edit](edit:0) <img src='file:///etc/passwd'>")])
    assert "<b>x</b>" in view.toPlainText()
    assert anchors(view) == ["copy:0", "regenerate"]


def test_code_block_is_monospace_and_copy_code_copies_it(view: ChatView) -> None:
    view.show_messages(conversation())
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    code_line = block_with(view, "def greet(name):")
    assert code_line.begin().fragment().charFormat().fontFamilies()[0] == fixed
    assert "Copy code" in code_line.previous().text()
    assert "copy-code:0" in anchors(view)
    click(view, "copy-code:0")
    assert QGuiApplication.clipboard().text() == CODE


def test_copy_puts_the_raw_markdown_on_the_clipboard(view: ChatView) -> None:
    view.show_messages(conversation())
    click(view, "copy:3")
    assert QGuiApplication.clipboard().text() == REPLY
    click(view, "copy:0")
    assert QGuiApplication.clipboard().text() == "first <b>question</b>\nsecond line"


def test_action_links(view: ChatView) -> None:
    view.show_messages(conversation())
    links = anchors(view)
    assert [a for a in links if a.startswith("edit:")] == ["edit:0", "edit:2"]
    assert [a for a in links if a.startswith("copy:")] == ["copy:0", "copy:1", "copy:2", "copy:3"]
    assert links.count("regenerate") == 1 and links.index("regenerate") > links.index("copy:3")


def test_edit_emits_its_index(view: ChatView, qtbot) -> None:
    view.show_messages(conversation())
    with qtbot.waitSignal(view.edit_requested) as blocker:
        click(view, "edit:2")
    assert blocker.args == [2]


def test_regenerate_emits(view: ChatView, qtbot) -> None:
    view.show_messages(conversation())
    with qtbot.waitSignal(view.regenerate_requested):
        click(view, "regenerate")


@pytest.mark.parametrize(
    ("status", "error", "mark"),
    [
        (MessageStatus.STOPPED, None, "Stopped — partial reply"),
        (MessageStatus.INTERRUPTED, None, "Interrupted — the app closed mid-reply"),
        (MessageStatus.FAILED, "out of memory <oops>", "Failed: out of memory <oops>"),
    ],
)
def test_partial_replies_are_marked(view: ChatView, status: MessageStatus, error: str | None, mark: str) -> None:
    view.show_messages([Message(Role.USER, "q"), Message(Role.ASSISTANT, "half a", status=status, error=error)])
    assert mark in view.toPlainText()
    view.show_messages([Message(Role.USER, "q"), Message(Role.ASSISTANT, "whole")])
    assert "partial" not in view.toPlainText() and "Failed" not in view.toPlainText()


def test_colors_follow_the_palette(view: ChatView) -> None:
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e8e8e8"))
    view.setPalette(dark)
    view.show_messages(conversation())
    sheet = view.document().defaultStyleSheet()
    assert "#ffffff" not in sheet.lower() and "#000000" not in sheet.lower()
    code = block_with(view, "def greet(name):")
    assert code.blockFormat().background().color().lightness() < 80  # a dark code background on a dark theme


# -- streaming ----------------------------------------------------------------------------------------------


def stream_reply(view: ChatView, text: str, seed: int = 0) -> None:
    rnd = random.Random(seed)
    view.begin_reply()
    i = 0
    while i < len(text):
        n = rnd.randint(1, 7)
        view.append_reply(text[i : i + n])
        i += n
        if rnd.random() < 0.3:
            view.flush()
    view.end_reply()


@pytest.mark.parametrize("seed", range(3))
def test_streamed_reply_reads_like_the_rendered_message(view: ChatView, qtbot, seed: int) -> None:
    history = [Message(Role.USER, "q"), Message(Role.ASSISTANT, "```\nold\n```"), Message(Role.USER, "show code")]
    view.show_messages(history)
    before = view.toPlainText()
    stream_reply(view, REPLY * 3, seed)
    streamed = view.toPlainText()
    assert streamed.startswith(before)

    other = ChatView()
    qtbot.addWidget(other)
    other.show_messages([*history, Message(Role.ASSISTANT, REPLY * 3)])
    assert other.toPlainText().endswith(streamed[len(before) :] + "\nCopy · Regenerate")

    click(view, "copy-code:3")  # code blocks streamed in are numbered after the earlier ones, and copyable
    assert QGuiApplication.clipboard().text() == CODE
    click(view, "copy-code:0")
    assert QGuiApplication.clipboard().text() == "old"
    click(view, "copy:3")
    assert QGuiApplication.clipboard().text() == REPLY * 3


def test_deltas_are_coalesced(view: ChatView, qtbot) -> None:
    view.show_messages([Message(Role.USER, "q")])
    view.begin_reply()
    changes = []
    view.document().contentsChanged.connect(lambda: changes.append(1))
    for word in ["many", "tiny", "tokens", "arrive", "at", "once"]:
        view.append_reply(word + " ")
    assert changes == [] and "tokens" not in view.toPlainText()
    qtbot.waitUntil(lambda: "many tiny tokens arrive at once" in view.toPlainText(), timeout=1000)
    assert len(changes) == 1  # one document update for all six deltas
    view.end_reply()


def test_stays_at_the_bottom_unless_scrolled_up(view: ChatView, qtbot) -> None:
    view.show_messages([Message(Role.USER, "q")])
    bar = view.verticalScrollBar()
    view.begin_reply()
    for i in range(60):
        view.append_reply(f"Line {i} of a reply that keeps growing.\n\n")
        view.flush()
    qtbot.wait(10)
    assert bar.maximum() > 0 and bar.value() == bar.maximum()

    bar.setValue(0)  # the user scrolls up to read
    for i in range(30):
        view.append_reply(f"More {i}.\n\n")
        view.flush()
    qtbot.wait(10)
    assert bar.value() == 0
    view.end_reply()


def test_show_messages_ends_a_stream(view: ChatView) -> None:
    view.begin_reply()
    view.append_reply("abandoned")
    view.show_messages([Message(Role.USER, "fresh")])
    assert not view.is_streaming
    view.append_reply("ignored")
    view.flush()
    assert "abandoned" not in view.toPlainText() and "ignored" not in view.toPlainText()


# -- cost ---------------------------------------------------------------------------------------------------


def long_reply_tokens(count: int) -> list[str]:
    section = (
        "## Part {i}\n\nThis is paragraph {i} with `inline code` and **bold** text that goes on for a while, "
        "explaining the idea in some detail.\n\n- point one of {i}\n- point two with *emphasis*\n\n"
        "```python\ndef f{i}(x):\n    y = x * {i}\n\n    return y\n```\n\n"
    )
    text = "".join(section.format(i=i) for i in range(300))
    return re.findall(r"\S+\s*|\s+", text)[:count]


def test_cost_per_token_does_not_grow_with_the_reply(view: ChatView, qtbot) -> None:
    tokens = long_reply_tokens(3000)
    view.show_messages([Message(Role.USER, "write a lot")])
    view.begin_reply()
    app = QGuiApplication.instance()
    times = []
    for token in tokens:
        start = time.perf_counter()
        view.append_reply(token)
        view.flush()
        app.processEvents()
        times.append(time.perf_counter() - start)
    view.end_reply()
    first, last = statistics.median(times[:100]), statistics.median(times[-100:])
    print(f"per token: first 100 median {first * 1e3:.3f} ms, last 100 median {last * 1e3:.3f} ms")
    # Re-rendering the whole reply per token makes the last tokens ~20x dearer than the first ones.
    assert last <= 3 * first + 0.0003
    assert view.document().characterCount() > 10_000
