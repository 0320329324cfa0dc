"""The chat transcript (a virtualized list of message widgets), with real widgets offscreen."""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest
from PySide6.QtCore import QBuffer, QEvent, QIODevice, QPointF, QUrl
from PySide6.QtGui import QColor, QCursor, QEnterEvent, QFontDatabase, QGuiApplication, QImage, QPalette, QTextDocument
from PySide6.QtWidgets import QApplication

from app.core.chat import markdown as markdown_stream
from app.core.chat.conversation import Message, MessageStatus, ReplyStats, Role
from app.core.chat.markdown import LIVE_TABLE_ROWS
from app.ui.pages.chat.message_item import MessageBody, MessageItem
from app.ui.pages.chat.transcript import SCROLL_MARGIN, ChatView, TranscriptView
from tests.support.fake_http import FakeServer, TrackedHandler
from tests.support.layout import assert_fits

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
def view(qtbot) -> TranscriptView:
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


def long_chat(count: int) -> list[Message]:
    out = []
    for i in range(count):
        if i % 2 == 0:
            out.append(Message(Role.USER, f"Question {i}: how does the cache work?"))
        else:
            code = f"\n\n```python\ndef f{i}(x):\n    return x\n```" if i % 10 == 1 else ""
            out.append(Message(Role.ASSISTANT, f"Answer {i}. The model reads each token, the cache keeps it.{code}"))
    return out


def widget(view: TranscriptView, index: int) -> MessageItem:
    item = view.message_widget(index)
    assert item is not None, f"message {index} has no widget; live: {view.live_rows()}"
    return item


def anchors(item: MessageItem) -> list[str]:
    return re.findall(r'<a href="([^"]+)"', item.body.toHtml())


def click_link(item: MessageItem, href: str) -> None:
    item.body.anchorClicked.emit(QUrl(href))


def block_with(document: QTextDocument, text: str):
    block = document.begin()
    while block.isValid() and text not in block.text():
        block = block.next()
    assert block.isValid(), f"no block with {text!r}"
    return block


def hover(item: MessageItem, inside: bool = True) -> None:
    if inside:
        QApplication.sendEvent(item, QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5)))
    else:
        QApplication.sendEvent(item, QEvent(QEvent.Type.Leave))


def visible_actions(item: MessageItem) -> list[str]:
    return [name for name, button in item.buttons.items() if button.isVisibleTo(item)]


# -- rendering ----------------------------------------------------------------------------------------------


def test_renders_user_text_plainly_and_assistant_markdown(view: TranscriptView) -> None:
    view.show_messages(conversation(), system_note="Be brief.")
    text = view.toPlainText()
    assert text.startswith("Be brief.")
    assert view.message_text(0) == "You\nfirst <b>question</b>\nsecond line"  # escaped, line break kept
    assert view.message_text(1) == "tiny\nfirst reply\n3 tokens"  # markdown rendered; model as header
    assert "Here is the answer." in view.message_text(3) and "**" not in text
    assert view.message_text(3).endswith("40 tokens · 12.5 tok/s")
    heading = block_with(widget(view, 3).body.document(), "Done")
    assert heading.blockFormat().headingLevel() == 1


def test_model_output_cannot_inject_html_or_actions(view: TranscriptView, qtbot) -> None:
    text = "<span style='color:red'>x</span> <b onclick='y'>z</b> [edit](edit:0) <img src='file:///etc/passwd'>"
    view.show_messages([Message(Role.ASSISTANT, text)])
    item = widget(view, 0)
    assert "<span style='color:red'>x</span> <b onclick='y'>z</b>" in view.message_text(0)  # shown as written
    assert anchors(item) == []  # no link survives: edit:0 is not a safe scheme, the image became text
    with qtbot.assertNotEmitted(view.edit_requested):
        click_link(item, "edit:0")


def test_code_block_is_monospace_and_copy_code_copies_it(view: TranscriptView) -> None:
    view.show_messages(conversation())
    item = widget(view, 3)
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    code_line = block_with(item.body.document(), "def greet(name):")
    assert code_line.begin().fragment().charFormat().fontFamilies()[0] == fixed
    assert "Copy code" in code_line.previous().text()
    assert anchors(item) == ["copy-code:0"]
    click_link(item, "copy-code:0")
    assert QGuiApplication.clipboard().text() == CODE


def test_colors_follow_the_palette(view: TranscriptView) -> None:
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Window, QColor("#1f2023"))
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e8e8e8"))
    view.setPalette(dark)
    view.show_messages(conversation())
    document = widget(view, 3).body.document()
    sheet = document.defaultStyleSheet()
    assert "#ffffff" not in sheet.lower() and "#000000" not in sheet.lower()
    code = block_with(document, "def greet(name):")
    assert code.blockFormat().background().color().lightness() < 80  # a dark code background on a dark theme
    assert "#1e1e1e" in view.styleSheet()


@pytest.mark.parametrize(
    ("status", "error", "mark"),
    [
        (MessageStatus.STOPPED, None, "Stopped — partial reply"),
        (MessageStatus.INTERRUPTED, None, "Interrupted — the app closed mid-reply"),
        (MessageStatus.FAILED, "out of memory <oops>", "Failed: out of memory <oops>"),
    ],
)
def test_partial_replies_are_marked(view: TranscriptView, status: MessageStatus, error: str | None, mark: str) -> None:
    view.show_messages([Message(Role.USER, "q"), Message(Role.ASSISTANT, "half a", status=status, error=error)])
    item = widget(view, 1)
    assert item.mark.isVisibleTo(item) and item.mark.text() == mark
    assert mark in view.toPlainText()
    view.show_messages([Message(Role.USER, "q"), Message(Role.ASSISTANT, "whole")])
    assert "partial" not in view.toPlainText() and "Failed" not in view.toPlainText()
    assert not widget(view, 1).mark.isVisibleTo(widget(view, 1))


# -- actions ------------------------------------------------------------------------------------------------


def test_hover_shows_the_actions_each_message_has(view: TranscriptView) -> None:
    QCursor.setPos(-10_000, -10_000)  # an earlier test may have left the pointer where these messages appear
    view.resize(700, 900)
    view.show_messages(conversation())
    user, first_reply, last_reply = widget(view, 0), widget(view, 1), widget(view, 3)
    assert visible_actions(user) == [] and visible_actions(first_reply) == []  # hidden until hovered
    assert visible_actions(last_reply) == ["copy", "regenerate"]  # the last message keeps its actions
    hover(user)
    assert visible_actions(user) == ["copy", "edit"]
    hover(user, inside=False)
    assert visible_actions(user) == []
    hover(first_reply)
    assert visible_actions(first_reply) == ["copy"]  # regenerate belongs to the last reply only
    assert all(button.toolTip() for button in user.buttons.values())


def test_action_buttons_emit_the_right_signals(view: TranscriptView, qtbot) -> None:
    view.resize(700, 900)
    view.show_messages(conversation())
    user, reply = widget(view, 2), widget(view, 3)
    hover(user)
    with qtbot.waitSignal(view.edit_requested) as edit:
        user.buttons["edit"].click()
    assert edit.args == [2]
    with qtbot.waitSignal(view.copied) as copied:
        reply.buttons["copy"].click()
    assert copied.args == [3] and QGuiApplication.clipboard().text() == REPLY  # the raw Markdown
    user.buttons["copy"].click()
    assert QGuiApplication.clipboard().text() == "show code"
    with qtbot.waitSignal(view.regenerate_requested):
        reply.buttons["regenerate"].click()
    assert not reply.buttons["fork"].isVisibleTo(reply)
    view.set_fork_enabled(True)
    hover(widget(view, 1))
    with qtbot.waitSignal(view.fork_requested) as fork:
        widget(view, 1).buttons["fork"].click()
    assert fork.args == [1]


def test_a_reply_stopped_at_the_token_limit_offers_continue(view: TranscriptView, qtbot) -> None:
    view.resize(700, 900)
    cut = ReplyStats(completion_tokens=512, finish_reason="length")
    messages = [
        Message(Role.USER, "q1"),
        Message(Role.ASSISTANT, "a long answer that", stats=cut),
        Message(Role.USER, "q2"),
        Message(Role.ASSISTANT, "another that ran", stats=cut),
    ]
    view.show_messages(messages)
    earlier, last = widget(view, 1), widget(view, 3)
    assert earlier.limit.isVisibleTo(earlier) and not earlier.continue_button.isVisibleTo(earlier)
    assert last.limit.isVisibleTo(last) and last.continue_button.isVisibleTo(last)
    assert "Stopped at the token limit. Continue" in view.message_text(3)
    with qtbot.waitSignal(view.continue_requested):
        last.continue_button.click()
    view.show_messages([*messages[:3], Message(Role.ASSISTANT, "done", stats=ReplyStats(finish_reason="stop"))])
    assert not widget(view, 3).limit.isVisibleTo(widget(view, 3))


# -- virtualization -------------------------------------------------------------------------------------------


def test_only_the_messages_on_screen_have_widgets(view: TranscriptView, qtbot) -> None:
    messages = long_chat(3000)
    view.show_messages(messages)
    live = view.live_rows()
    assert 1 <= len(live) <= 12 and live[-1] == 2999  # the bottom of the chat, and only around it
    bar = view.verticalScrollBar()
    bar.setValue(0)
    most = 0
    while bar.value() < bar.maximum():
        bar.setValue(bar.value() + bar.pageStep())
        most = max(most, len(view.live_rows()))
        items = view.findChildren(MessageItem)
        assert len(items) <= 20  # the pool stays small however far we scroll
    assert most <= 12 and view.live_rows()[-1] == 2999
    measured = view.live_rows()
    assert all(view._heights[row] == widget(view, row).height() for row in measured)  # estimates refined


def test_scroll_to_a_far_message(view: TranscriptView, qtbot) -> None:
    view.show_messages(long_chat(3000))
    view.scroll_to_message(1234)
    item = widget(view, 1234)
    assert item.y() == SCROLL_MARGIN  # its top at the top of the view, exactly, once measured
    assert "Answer 1233" in view.message_text(1233) and 1500 not in view.live_rows()
    assert item.state.highlight
    qtbot.waitUntil(lambda: not widget(view, 1234).state.highlight)
    view.scroll_to_message(5000)  # out of range: ignored
    assert view.message_widget(1234) is not None


def test_the_same_chat_keeps_its_place_and_another_opens_at_the_bottom(view: TranscriptView) -> None:
    messages = long_chat(400)
    view.show_messages(messages)
    view.scroll_to_message(100, highlight=False)
    top = widget(view, 100).y()
    view.show_messages(messages)  # shown again (a reply saved its figures): the place is kept
    assert widget(view, 100).y() == top
    view.show_messages([*messages, Message(Role.USER, "one more")])  # it grew: a message was sent
    assert view.live_rows()[-1] == 400 and view.verticalScrollBar().value() == view.verticalScrollBar().maximum()
    view.scroll_to_message(10, highlight=False)
    view.show_messages(long_chat(50))  # another chat: its bottom
    assert view.live_rows()[-1] == 49


def test_a_resize_re_measures_what_is_on_screen(view: TranscriptView, qtbot) -> None:
    words = "a sentence long enough to wrap in a narrow view but not in a wide one " * 3
    view.show_messages([Message([Role.USER, Role.ASSISTANT][i % 2], f"{i}: {words}") for i in range(200)])
    narrow = {row: widget(view, row).height() for row in view.live_rows()}
    view.resize(900, 300)
    qtbot.waitUntil(lambda: view.viewport().width() > 800)
    wide = {row: widget(view, row).height() for row in view.live_rows()}
    common = set(narrow) & set(wide)
    assert common and any(wide[row] < narrow[row] for row in common)  # fewer lines when wider
    assert view.live_rows()[-1] == 199  # still at the bottom
    QApplication.processEvents()
    for row in view.live_rows():  # measured as drawn: each text's widget is exactly as tall as its laid-out text
        body = widget(view, row).body
        assert body.height() == math.ceil(body.document().size().height()), row


def test_the_transcript_fits_a_small_window(view: TranscriptView) -> None:
    view.show_messages(conversation())
    assert_fits(view)


# -- streaming ----------------------------------------------------------------------------------------------


def stream_reply(view: TranscriptView, text: str, seed: int = 0) -> None:
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
def test_streamed_reply_reads_like_the_rendered_message(view: TranscriptView, qtbot, seed: int) -> None:
    history = [Message(Role.USER, "q"), Message(Role.ASSISTANT, "```\nold\n```"), Message(Role.USER, "show code")]
    view.show_messages(history)
    stream_reply(view, REPLY * 3, seed)
    streamed = view.message_text(3)
    other = ChatView()
    qtbot.addWidget(other)
    other.show_messages([*history, Message(Role.ASSISTANT, REPLY * 3)])
    assert streamed == other.message_text(3)
    assert widget(view, 3).body.toHtml() == widget(other, 3).body.toHtml()

    item = widget(view, 3)
    click_link(item, "copy-code:2")  # each message numbers its own code blocks
    assert QGuiApplication.clipboard().text() == CODE
    item.buttons["copy"].click()
    assert QGuiApplication.clipboard().text() == REPLY * 3


def test_streaming_shows_an_indicator_then_the_actions(view: TranscriptView, qtbot) -> None:
    view.show_messages([Message(Role.USER, "q")])
    view.begin_reply()
    assert view.is_streaming and view.message_count() == 2
    item = widget(view, 1)
    assert item.indicator.isVisibleTo(item) and item.indicator.text().startswith("Generating")
    assert visible_actions(item) == []
    view.append_reply("partial")
    view.end_reply()
    assert not view.is_streaming and not item.indicator.isVisibleTo(item)
    assert visible_actions(item) == ["copy", "regenerate"]


def test_deltas_are_coalesced(view: TranscriptView, qtbot) -> None:
    view.show_messages([Message(Role.USER, "q")])
    view.begin_reply()
    document = widget(view, 1).body.document()
    changes = []
    document.contentsChanged.connect(lambda: changes.append(1))
    for word in ["many", "tiny", "tokens", "arrive", "at", "once"]:
        view.append_reply(word + " ")
    assert changes == [] and "tokens" not in view.toPlainText()
    qtbot.waitUntil(lambda: "many tiny tokens arrive at once" in view.toPlainText())
    assert 1 <= len(changes) <= 2  # one document update for all six deltas
    view.end_reply()


def test_follows_the_bottom_unless_scrolled_up(view: TranscriptView, qtbot) -> None:
    view.show_messages(long_chat(40))
    bar = view.verticalScrollBar()
    view.begin_reply()
    for i in range(60):
        view.append_reply(f"Line {i} of a reply that keeps growing.\n\n")
        view.flush()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum())
    assert widget(view, 40).geometry().bottom() <= view.viewport().height()  # the reply's end is on screen

    bar.setValue(bar.maximum() // 2)  # the user scrolls up to read
    reading = bar.value()
    top_row = view.live_rows()[0]
    for i in range(30):
        view.append_reply(f"More {i}.\n\n")
        view.flush()
    qtbot.wait(10)
    assert bar.value() == reading and view.live_rows()[0] == top_row
    bar.setValue(bar.maximum())  # back at the bottom: following again
    view.append_reply("Last.\n\n")
    view.flush()
    assert bar.value() == bar.maximum()
    view.end_reply()


def test_the_reply_keeps_streaming_while_scrolled_far_away(view: TranscriptView) -> None:
    view.show_messages(long_chat(600))
    view.begin_reply()
    view.append_reply("first part ")
    view.flush()
    view.scroll_to_message(5, highlight=False)
    streamed = widget(view, 600)
    assert not streamed.geometry().intersects(view.viewport().rect())  # out of sight, still streaming
    view.append_reply("and the rest")
    view.end_reply()
    assert view.message_text(600).startswith("Assistant\nfirst part and the rest")


def test_show_messages_ends_a_stream(view: TranscriptView) -> None:
    view.begin_reply()
    view.append_reply("abandoned")
    view.show_messages([Message(Role.USER, "fresh")])
    assert not view.is_streaming and view.message_count() == 1
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


def test_cost_per_token_does_not_grow_with_the_reply(view: TranscriptView) -> None:
    """Each token re-renders the reply's open tail only, never the whole reply (re-rendering it whole made the last
    tokens ~20x dearer than the first); its speed per flush is `llm-workstation bench render`."""
    tokens = long_reply_tokens(3000)
    view.show_messages([Message(Role.USER, "write a lot")])
    view.begin_reply()
    app = QGuiApplication.instance()
    changes: list[tuple[int, int, int]] = []
    for count, token in enumerate(tokens):
        if count == 2000:
            document = widget(view, 1).body.document()
            written_before = document.characterCount()
            document.contentsChange.connect(lambda at, removed, added: changes.append((at, removed, added)))
        view.append_reply(token)
        view.flush()
        app.processEvents()
    document.contentsChange.disconnect()
    view.end_reply()
    assert changes and written_before > 5_000
    assert all(removed < 3_000 for _at, removed, _added in changes)  # the tail, not the reply so far
    assert widget(view, 1).body.document().characterCount() > 10_000


def test_showing_a_long_chat_costs_what_is_on_screen(view: TranscriptView) -> None:
    """Widgets only for the rows on screen, whatever the chat's length (its speed: `llm-workstation bench history`)."""
    live = {}
    for name, messages in (("small", long_chat(40)), ("large", long_chat(4000))):
        view.show_messages([Message(Role.USER, "reset")])
        view.show_messages(messages)
        QGuiApplication.instance().processEvents()
        live[name] = view.live_rows()
    assert live["large"] and len(live["large"]) <= len(live["small"]) + 2  # a list of heights is all that grows


# -- nothing is loaded -------------------------------------------------------------------------------------------


class _ImageHandler(TrackedHandler):
    def setup(self) -> None:
        super().setup()
        self.server.fake.connections += 1

    def do_GET(self) -> None:
        self.server.fake.requests.append(self.path)
        body = png_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ImageServer(FakeServer):
    """Serves a PNG at any path; records every connection and request."""

    handler_class = _ImageHandler

    def __init__(self) -> None:
        super().__init__()
        self.connections = 0
        self.requests: list[str] = []


def png_bytes() -> bytes:
    image = QImage(2, 2, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


@pytest.fixture
def image_server():
    with ImageServer() as server:
        yield server


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    """Every resource a message document asks its widget for."""
    requests: list[str] = []
    original = MessageBody.loadResource

    def recording(self: MessageBody, type: int, name: Any) -> Any:
        requests.append(QUrl(name).toString())
        return original(self, type, name)

    monkeypatch.setattr(MessageBody, "loadResource", recording)
    return requests


def test_reply_images_are_never_requested(view: TranscriptView, image_server: ImageServer, asked, qtbot) -> None:
    base = image_server.base_url
    reply = (
        f'Look: ![a cat]({base}/cat.png) and ![]({base}/plain.png "title")\n\n'
        f"[![badge]({base}/badge.svg)]({base}/page)\n\n| pic |\n|---|\n| ![cell]({base}/cell.png) |\n"
    )
    view.show_messages([Message(Role.USER, "show me"), Message(Role.ASSISTANT, reply)])
    stream_reply(view, reply)
    for row in (1, 2):
        widget(view, row).body.document().size()  # laid out now: any image it would load has been asked for
    assert image_server.connections == 0 and image_server.requests == []
    assert asked == []  # the documents never even ask for them
    for row in (1, 2):
        text = view.message_text(row)
        assert text.count("[image: a cat]") == 1 and text.count("[image: cell]") == 1
        assert f"{base}/cat.png" in anchors(widget(view, row))  # a link the user may open, in the browser


def test_load_resource_refuses_anything_but_the_apps_own(
    view: TranscriptView, image_server: ImageServer, asked, qtbot, tmp_path
) -> None:
    local = tmp_path / "secret.png"
    local.write_bytes(png_bytes())
    view.show_messages([Message(Role.ASSISTANT, "hello")])
    body = widget(view, 0).body
    for url in (f"{image_server.base_url}/direct.png", local.as_uri(), "secret.png", "data:image/png;base64,AAAA"):
        assert body.loadResource(QTextDocument.ResourceType.ImageResource.value, QUrl(url)) is None
    body.setSearchPaths([str(tmp_path)])
    body.setHtml(f'<p><img src="{image_server.base_url}/direct.png"><img src="secret.png"></p>')
    body.document().size()  # laid out: its images are asked for
    qtbot.waitUntil(lambda: f"{image_server.base_url}/direct.png" in asked)  # HTML that bypasses Markdown asks...
    assert image_server.connections == 0  # ...and gets nothing
    image = body.document().resource(QTextDocument.ResourceType.ImageResource.value, QUrl("secret.png"))
    assert image is None


# -- long tables ----------------------------------------------------------------------------------------------------


def table_head(columns: int) -> str:
    return "| " + " | ".join(f"Head {j}" for j in range(columns)) + " |\n|" + "---|" * columns + "\n"


def table_row(i: int, columns: int) -> str:
    return "| " + " | ".join(f"r{i} c{j} **b**" for j in range(columns)) + " |\n"


def test_streamed_table_rerenders_only_what_changed(view: TranscriptView, qtbot, monkeypatch) -> None:
    parsed: list[int] = []  # characters handed to markdown-it
    real_parse = markdown_stream._parser().parse
    monkeypatch.setattr(
        markdown_stream._parser(), "parse", lambda src, env=None: (parsed.append(len(src)), real_parse(src, env))[1]
    )
    view.show_messages([Message(Role.USER, "a table")])
    view.begin_reply()
    changed: list[int] = []  # characters removed + added in the document
    widget(view, 1).body.document().contentsChange.connect(lambda _pos, removed, added: changed.append(removed + added))
    view.append_reply("Here:\n\n" + table_head(5))
    view.flush()
    work: list[tuple[int, int]] = []
    for i in range(400):
        parsed.clear()
        changed.clear()
        view.append_reply(table_row(i, 5))
        view.flush()
        work.append((sum(parsed), sum(changed)))
    row = len(table_row(399, 5))
    early, late = work[20:40], work[380:]
    assert max(p for p, _ in late) <= max(p for p, _ in early) <= 2 * row  # Markdown: the new row at most
    assert max(c for _, c in late) <= max(c for _, c in early) + 10 <= 3 * row  # the document: the new row
    assert sum(p for p, _ in work[:LIVE_TABLE_ROWS]) > 0  # a short table is still rendered live

    view.append_reply("\nThat is all.\n")
    view.end_reply()
    text = table_head(5) + "".join(table_row(i, 5) for i in range(400))
    other = ChatView()
    qtbot.addWidget(other)
    other.show_messages([Message(Role.USER, "a table"), Message(Role.ASSISTANT, f"Here:\n\n{text}\nThat is all.\n")])
    assert other.message_text(1) == view.message_text(1)


def test_huge_table_shows_once_without_stalling(view: TranscriptView) -> None:
    text = table_head(50) + "".join(table_row(i, 50) for i in range(5000))
    view.show_messages([Message(Role.ASSISTANT, text)])  # its cost is `llm-workstation bench render`
    QGuiApplication.instance().processEvents()
    assert "Table of 5,000 rows × 50 columns, shown as text" in view.toPlainText()
    click_link(widget(view, 0), "copy-code:0")
    assert QGuiApplication.clipboard().text() == text.removesuffix("\n")


def test_streamed_huge_table_ends_as_the_rendered_message(view: TranscriptView, qtbot) -> None:
    text = "Data:\n\n" + table_head(20) + "".join(table_row(i, 20) for i in range(600)) + "\nEnd.\n"
    view.show_messages([Message(Role.USER, "q")])
    rnd = random.Random(3)
    view.begin_reply()
    i = 0
    while i < len(text):
        n = rnd.randint(1, 300)
        view.append_reply(text[i : i + n])
        i += n
        view.flush()
    view.end_reply()
    assert "more rows not shown" in view.toPlainText()
    other = ChatView()
    qtbot.addWidget(other)
    other.show_messages([Message(Role.USER, "q"), Message(Role.ASSISTANT, text)])
    assert other.message_text(1) == view.message_text(1)
