"""The chat transcript widget, with real widgets offscreen."""

from __future__ import annotations

import random
import re
import statistics
import time
from typing import Any

import pytest
from PySide6.QtCore import QBuffer, QIODevice, QUrl
from PySide6.QtGui import QColor, QFontDatabase, QGuiApplication, QImage, QPalette, QTextDocument

from app.core.chat import markdown as markdown_stream
from app.core.chat.conversation import Message, MessageStatus, ReplyStats, Role
from app.core.chat.markdown import LIVE_TABLE_ROWS
from app.ui.pages.chat.transcript import ChatView
from tests.support.fake_http import FakeServer, TrackedHandler

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


class RecordingView(ChatView):
    """A ChatView that records every resource the document asks it for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def loadResource(self, type: int, name: QUrl | str) -> Any:
        self.asked.append(QUrl(name).toString())
        return super().loadResource(type, name)


@pytest.fixture
def image_server():
    with ImageServer() as server:
        yield server


@pytest.fixture
def recording_view(qtbot) -> RecordingView:
    widget = RecordingView()
    qtbot.addWidget(widget)
    widget.resize(500, 300)
    widget.show()
    return widget


def test_reply_images_are_never_requested(recording_view: RecordingView, image_server: ImageServer, qtbot) -> None:
    base = image_server.base_url
    reply = (
        f'Look: ![a cat]({base}/cat.png) and ![]({base}/plain.png "title")\n\n'
        f"[![badge]({base}/badge.svg)]({base}/page)\n\n| pic |\n|---|\n| ![cell]({base}/cell.png) |\n"
    )
    recording_view.show_messages([Message(Role.USER, "show me"), Message(Role.ASSISTANT, reply)])
    stream_reply(recording_view, reply)
    qtbot.wait(300)  # time for any fetch to reach the server
    assert image_server.connections == 0 and image_server.requests == []
    assert recording_view.asked == []  # the document never even asks for them
    text = recording_view.toPlainText()
    assert text.count("[image: a cat]") == 2 and text.count("[image: cell]") == 2
    assert f"{base}/cat.png" in anchors(recording_view)  # a link the user may open, in the browser


def test_load_resource_refuses_anything_but_the_apps_own(
    recording_view: RecordingView, image_server: ImageServer, qtbot, tmp_path
) -> None:
    local = tmp_path / "secret.png"
    local.write_bytes(png_bytes())
    for url in (f"{image_server.base_url}/direct.png", local.as_uri(), "secret.png", "data:image/png;base64,AAAA"):
        assert recording_view.loadResource(QTextDocument.ResourceType.ImageResource.value, QUrl(url)) is None
    recording_view.setSearchPaths([str(tmp_path)])
    recording_view.setHtml(f'<p><img src="{image_server.base_url}/direct.png"><img src="secret.png"></p>')
    qtbot.wait(300)
    assert f"{image_server.base_url}/direct.png" in recording_view.asked  # HTML that bypasses Markdown asks...
    assert image_server.connections == 0  # ...and gets nothing
    image = recording_view.document().resource(QTextDocument.ResourceType.ImageResource.value, QUrl("secret.png"))
    assert image is None


# -- long tables ----------------------------------------------------------------------------------------------------


def table_head(columns: int) -> str:
    return "| " + " | ".join(f"Head {j}" for j in range(columns)) + " |\n|" + "---|" * columns + "\n"


def table_row(i: int, columns: int) -> str:
    return "| " + " | ".join(f"r{i} c{j} **b**" for j in range(columns)) + " |\n"


def test_streamed_table_rerenders_only_what_changed(view: ChatView, qtbot, monkeypatch) -> None:
    parsed: list[int] = []  # characters handed to markdown-it
    real_parse = markdown_stream._MD.parse
    monkeypatch.setattr(
        markdown_stream._MD, "parse", lambda src, env=None: (parsed.append(len(src)), real_parse(src, env))[1]
    )
    changed: list[int] = []  # characters removed + added in the document
    view.document().contentsChange.connect(lambda _pos, removed, added: changed.append(removed + added))
    view.show_messages([Message(Role.USER, "a table")])
    view.begin_reply()
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
    assert other.toPlainText().endswith(view.toPlainText().split("a table\n", 1)[1] + "\nCopy · Regenerate")


def test_huge_table_shows_once_without_stalling(view: ChatView) -> None:
    text = table_head(50) + "".join(table_row(i, 50) for i in range(5000))
    start = time.perf_counter()
    view.show_messages([Message(Role.ASSISTANT, text)])
    QGuiApplication.instance().processEvents()
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0, f"showing a 5000×50 table took {elapsed:.2f} s"  # ~0.15 s; laid out as a table: ~6 s
    assert "Table of 5,000 rows × 50 columns, shown as text" in view.toPlainText()
    click(view, "copy-code:0")
    assert QGuiApplication.clipboard().text() == text.removesuffix("\n")


def test_streamed_huge_table_ends_as_the_rendered_message(view: ChatView, qtbot) -> None:
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
    assert other.toPlainText().endswith(view.toPlainText().split("q\n", 1)[1] + "\nCopy · Regenerate")
