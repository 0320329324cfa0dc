"""Chat export and import formats (pure code): Markdown, HTML, our JSON, ChatGPT's conversations.json, forks and
the search query builder."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser

import pytest

from app.core.chat import chat_json
from app.core.chat.chat_json import ChatFileError
from app.core.chat.chatgpt_import import is_chatgpt_export, read_chatgpt
from app.core.chat.conversation import (
    Attachment,
    Conversation,
    Message,
    MessageStatus,
    OverflowPolicy,
    ReplyStats,
    Role,
)
from app.core.chat.export_html import to_html
from app.core.chat.export_markdown import to_markdown
from app.core.chat.fork import fork_conversation
from app.core.chat.search_query import fts_query
from app.core.errors import InvalidInputError
from tests.support.chatgpt_export import branched_conversation, export

PICTURE = Attachment("image", "ab/ab12.png", "image/png", name="chart é.png", width=2, height=2, size=4)
PNG = b"\x89PNG\r\n\x1a\nfake"


def sample() -> Conversation:
    settings = {"temperature": 0.3, "top_p": 0.9, "max_tokens": 256, "n_ctx": 4096}
    return Conversation(
        title="Sorting <lists>",
        system_prompt="Be brief.",
        messages=[
            Message(Role.USER, "How do I sort a list?", attachments=[PICTURE]),
            Message(
                Role.ASSISTANT,
                "Use `sorted`:\n\n```python\nvalues = sorted([3, 1, 2])\n```\n\nDone <script>alert(1)</script>.",
                model="qwen3-0.6b",
                backend="llama.cpp",
                settings=settings,
                stats=ReplyStats(12, 30, ttft_ms=80.0, decode_tokens_per_s=42.0, finish_reason="stop"),
                reasoning="The user wants **sorting**.",
            ),
            Message(Role.USER, "Thanks"),
            Message(Role.ASSISTANT, "You're wel", status=MessageStatus.STOPPED, model="qwen3-0.6b"),
        ],
        updated_at=1_767_225_600.0,
        forked_from=7,
        forked_at=4,
        pinned=True,
        folder="Work",
        overflow=OverflowPolicy.TRUNCATE_MIDDLE,
    )


# --- Markdown -----------------------------------------------------------------------------------------------


def test_markdown_has_the_header_every_message_the_thinking_and_the_figures() -> None:
    text = to_markdown(sample(), "Original chat", lambda a: f"file:///att/{a.path}")
    assert text.startswith("# Sorting <lists>\n")
    assert "- Model: qwen3-0.6b (llama.cpp)" in text
    assert "- Settings: temperature 0.3 · top_p 0.9 · max_tokens 256 · n_ctx 4096" in text
    assert "- Forked from Original chat at message 4" in text
    assert "## System prompt\n\n> Be brief." in text
    assert "### 1. You" in text and "### 2. qwen3-0.6b" in text
    assert "<details><summary>Thinking</summary>\n\nThe user wants **sorting**.\n\n</details>" in text
    assert "```python\nvalues = sorted([3, 1, 2])\n```" in text
    assert "![chart é.png](file:///att/ab/ab12.png)" in text
    assert "*reply stopped*" in text and "30 tokens" in text


def test_markdown_names_a_missing_image_and_a_deleted_origin() -> None:
    text = to_markdown(sample(), None, lambda a: None)
    assert "*[image: chart é.png]*" in text and "Forked from a deleted chat at message 4" in text


# --- HTML ---------------------------------------------------------------------------------------------------


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_is_self_contained_with_highlighted_code_thinking_and_an_embedded_image() -> None:
    page = to_html(sample(), "Original chat", lambda a: PNG if a.path == PICTURE.path else None)
    parser = _Tags()
    parser.feed(page)
    tags = parser.tags
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert images == [{"alt": "chart é.png", "src": "data:image/png;base64," + base64.b64encode(PNG).decode()}]
    assert not [a for tag, a in tags if tag in ("script", "link", "iframe")]  # nothing loads from elsewhere
    assert not [a for tag, a in tags if tag == "a" and str(a.get("href", "")).startswith("copy-code")]
    assert '<span class="hl-n">values</span>' in page and "span.hl-k {" in page  # coloured, with its styles
    assert "prefers-color-scheme: dark" in page  # both palettes
    assert "<details><summary>Thinking</summary><p>The user wants <strong>sorting</strong>.</p>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the model's HTML is text
    assert "<title>Sorting &lt;lists&gt;</title>" in page
    assert "Model: qwen3-0.6b (llama.cpp)" in page and "temperature 0.3" in page
    assert "Forked from Original chat at message 4" in page


def test_html_says_when_an_image_file_is_missing() -> None:
    page = to_html(sample(), None, lambda a: None)
    assert "<img" not in page and "[image: chart é.png — not found]" in page


# --- our JSON -----------------------------------------------------------------------------------------------


def test_json_round_trips_every_field_but_ids_and_the_origin() -> None:
    original = sample()
    document = json.loads(chat_json.dumps([original], exported_at=5.0))
    assert (document["format"], document["exported_at"]) == (chat_json.FORMAT, 5.0)
    assert document["version"] == chat_json.VERSION == 4
    [back] = chat_json.read_document(document)
    assert back.messages == original.messages
    assert (back.title, back.system_prompt, back.updated_at) == (original.title, "Be brief.", 1_767_225_600.0)
    assert (back.pinned, back.folder, back.overflow) == (True, "Work", OverflowPolicy.TRUNCATE_MIDDLE)
    assert (back.forked_from, back.forked_at, back.id) == (None, None, None)  # ids of another history


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"format": "something-else"}, "not an LLM Workstation chat export"),
        ({"format": chat_json.FORMAT, "version": 99, "chats": []}, "newer version of LLM Workstation"),
        ({"format": chat_json.FORMAT, "version": 1}, "holds no list of chats"),
        ({"format": chat_json.FORMAT, "version": 1, "chats": [{"messages": [{"role": "robot"}]}]}, "no valid role"),
        ({"format": chat_json.FORMAT, "version": 1, "chats": [{"title": 5, "messages": []}]}, "title must be text"),
    ],
)
def test_a_bad_json_export_says_what_is_wrong(document: object, message: str) -> None:
    with pytest.raises(ChatFileError, match=message):
        chat_json.read_document(document, "The file x.json")


# --- ChatGPT ------------------------------------------------------------------------------------------------


def test_chatgpt_current_branch_becomes_the_chat_and_abandoned_branches_are_counted() -> None:
    [item] = list(read_chatgpt([branched_conversation()]))
    chat = item.conversation
    assert chat is not None and item.abandoned_branches == 2
    assert chat.title == "Arithmetic" and chat.updated_at == 1_700_000_500.5 and chat.system_prompt == ""
    assert [(m.role, m.content.split("\n")[0]) for m in chat.messages] == [
        (Role.USER, "What is 2+2?"),
        (Role.ASSISTANT, "4"),
        (Role.USER, "And squared?"),
        (Role.ASSISTANT, "16"),
        (Role.USER, "[image]"),
        (Role.ASSISTANT, "A cat."),
    ]
    squared = chat.messages[3]
    assert squared.reasoning == "4 times 4 is 16." and squared.model == "o3"
    assert "```python\nprint(4 ** 2)\n```" in squared.content  # the code part of the same answer
    assert "search results" not in "".join(m.content for m in chat.messages)  # tool output left out
    assert chat.messages[4].content == "[image]\n\nWhat is in this picture?"
    assert "Four, obviously." not in str(chat) and "64" not in [m.content for m in chat.messages]


def test_a_damaged_chatgpt_conversation_is_skipped_with_the_reason() -> None:
    data = [*export(2), {"title": "broken", "mapping": {"a": "not a node"}, "current_node": "a"}]
    assert is_chatgpt_export(data)
    items = list(read_chatgpt(data))
    assert [i.conversation is not None for i in items] == [True, True, False]
    assert "conversation 3" in items[2].problem and "not an object" in items[2].problem
    with pytest.raises(ChatFileError, match="list of conversations"):
        list(read_chatgpt({"mapping": {}}))


# --- forks --------------------------------------------------------------------------------------------------


def test_a_fork_copies_up_to_the_message_or_only_the_last_turns() -> None:
    source = sample()
    source.id = 9
    whole = fork_conversation(source, 3)
    assert [m.content for m in whole.messages] == [m.content for m in source.messages[:3]]
    assert (whole.forked_from, whole.forked_at, whole.title) == (9, 3, "Sorting <lists> (fork)")
    assert whole.system_prompt == "Be brief." and all(m.id is None for m in whole.messages)
    last = fork_conversation(source, 4, last_turns=1)
    assert [m.content for m in last.messages] == ["Thanks", "You're wel"] and last.forked_at == 4
    assert len(fork_conversation(source, 4, last_turns=5).messages) == 4  # fewer turns than asked: all
    with pytest.raises(InvalidInputError, match="Message 5 is not in the chat"):
        fork_conversation(source, 5)
    with pytest.raises(InvalidInputError, match="at least one turn"):
        fork_conversation(source, 2, last_turns=0)


# --- search queries -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "query"),
    [
        ("hello world", '"hello" "world"*'),
        ('say "hi', '"say" """hi"*'),
        ("NOT model", '"NOT" "model"*'),
        ("a OR b", '"a" "OR" "b"'),  # a one-letter last word is no prefix
        ("c++", '"c++"'),
        ("NEAR(x y)", '"NEAR(x" "y)"'),
        ('" * ( ^', None),
        ("   ", None),
    ],
)
def test_typed_text_becomes_quoted_words(typed: str, query: str | None) -> None:
    assert fts_query(typed) == query


def test_markdown_keeps_the_text_as_written() -> None:
    text = to_markdown(Conversation("T", messages=[Message(Role.USER, "a <b> & c")]))
    assert "a <b> & c" in text
