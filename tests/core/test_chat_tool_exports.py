"""Tool calls in the chat exports: JSON (version 2) round-trips them, version 1 files still read, an imported
chat asks again before running tools; Markdown and HTML show each call with its approval and result, the result
kept inert (no markup or link from a tool survives)."""

from __future__ import annotations

import json

import pytest

from app.core.chat import chat_json
from app.core.chat.conversation import Conversation, Message, Role
from app.core.chat.export_html import to_html
from app.core.chat.export_markdown import to_markdown
from app.core.chat.tool_use import Approval, ChatTools, ToolUse

HOSTILE = '<script>alert(1)</script> <a href="http://evil.example">x</a>\n```\nnot a fence end'


def chat() -> Conversation:
    denial = "The user denied this call. Their reason: not now"
    read = ToolUse("c1", "read_file", '{"path": "a.md"}', "builtin", "read_file", Approval.ALWAYS)
    read.result, read.result_bytes = HOSTILE, 10_000_000
    calculate = ToolUse("c2", "calculate", '{"expression": "2+2"}', "builtin", "calculate", Approval.DENIED)
    calculate.reason, calculate.result, calculate.result_bytes = "not now", denial, len(denial)
    calls = [read, calculate]
    return Conversation(
        "Tools", messages=[Message(Role.USER, "go"), Message(Role.ASSISTANT, "", tool_calls=calls),
                           Message(Role.ASSISTANT, "Done.")],
        tools=ChatTools({"builtin": None}, always=["builtin/read_file"]),
    )  # fmt: skip


def test_json_keeps_the_calls_and_an_import_asks_again():
    document = json.loads(chat_json.dumps([chat()]))
    assert document["version"] >= 2 and document["chats"][0]["tools"]["always"] == ["builtin/read_file"]
    [back] = chat_json.read_document(document)
    assert back.messages[1].tool_calls == chat().messages[1].tool_calls
    assert back.tools == ChatTools({"builtin": None}, always=[])  # "always" is not imported


def test_a_version_1_file_reads_without_tools():
    old = {"format": chat_json.FORMAT, "version": 1,
           "chats": [{"title": "Old", "messages": [{"role": "user", "content": "hi"}]}]}  # fmt: skip
    [back] = chat_json.read_document(old)
    assert back.tools == ChatTools() and back.messages[0].tool_calls == []


@pytest.mark.parametrize("call", [{"id": "c", "name": 5}, {"id": "", "name": "x"}, {"id": "c", "name": "x",
                                                                                     "result": 3}])  # fmt: skip
def test_a_malformed_tool_call_is_named(call):
    document = {"format": chat_json.FORMAT, "version": 2,
                "chats": [{"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}]}  # fmt: skip
    with pytest.raises(chat_json.ChatFileError, match="chat 1, message 1, tool call 1"):
        chat_json.read_document(document)


def test_markdown_shows_each_call_with_its_decision_and_keeps_the_result_inert():
    text = to_markdown(chat())
    assert "Tool call: read_file · builtin — Allowed always in this chat" in text
    assert "Tool call: calculate · builtin — Denied: not now" in text
    assert "Result: 10,000,000 bytes; the model was sent the first part" in text
    assert '"path": "a.md"' in text
    fence_start = text.index("````text")  # longer than the ``` inside the result
    assert text.index(HOSTILE) > fence_start and "\n````\n" in text[fence_start + 8 :]


def test_html_escapes_tool_output():
    page = to_html(chat())
    assert "<script>alert" not in page and 'href="http://evil.example"' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Tool call: calculate · builtin — Denied: not now" in page
