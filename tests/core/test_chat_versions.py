"""The versions of a message (app.core.chat.versions): kept, switched, nested, and read back from a file."""

from __future__ import annotations

import json

import pytest

from app.core.chat import chat_json
from app.core.chat.conversation import Conversation, Message, Role
from app.core.chat.fork import fork_conversation
from app.core.chat.versions import branches, superseded, switched, version_count


def _texts(path: list[Message]) -> list[str]:
    return [m.content for m in path]


def _regenerated(path: list[Message], text: str) -> list[Message]:
    return [*path[:-1], superseded(path, len(path) - 1, Message(Role.ASSISTANT, text))]


def test_a_reply_regenerated_twice_has_three_versions_and_any_can_be_shown() -> None:
    path = [Message(Role.USER, "q"), Message(Role.ASSISTANT, "a1")]
    path = _regenerated(_regenerated(path, "a2"), "a3")
    assert (path[1].version, version_count(path[1])) == (2, 3)
    path = [path[0], *switched(path, 1, 0)]
    assert _texts(path) == ["q", "a1"] and path[1].version == 0
    assert [_texts(b) for b in path[1].versions] == [["a2"], ["a3"]]
    assert [_texts(b) for b in branches(path, 1)] == [["a1"], ["a2"], ["a3"]]  # slots keep their order


def test_an_edit_keeps_the_old_tail_with_its_own_versions() -> None:
    path = _regenerated([Message(Role.USER, "q"), Message(Role.ASSISTANT, "a1")], "a2")
    path = [superseded(path, 0, Message(Role.USER, "q2")), Message(Role.ASSISTANT, "b")]
    assert (path[0].version, version_count(path[0])) == (1, 2)
    old = switched(path, 0, 0)
    assert _texts(old) == ["q", "a2"] and (old[1].version, version_count(old[1])) == (1, 2)  # nested, as left
    assert _texts(switched(old, 0, 1)) == ["q2", "b"]
    with pytest.raises(IndexError):
        switched(path, 0, 2)


def test_versions_round_trip_through_the_json_export_and_bad_ones_are_named() -> None:
    path = [superseded([Message(Role.USER, "q")], 0, Message(Role.USER, "q2"))]
    [back] = chat_json.read_document(json.loads(chat_json.dumps([Conversation(messages=path)])))
    assert back.messages == path
    document = {"format": chat_json.FORMAT, "version": 3,
                "chats": [{"messages": [{"role": "user", "content": "x", "versions": ["not a branch"]}]}]}  # fmt: skip
    with pytest.raises(chat_json.ChatFileError, match="message 1, version 1 is not a list of messages"):
        chat_json.read_document(document)


def test_a_fork_copies_the_path_shown_without_the_other_versions() -> None:
    path = _regenerated([Message(Role.USER, "q"), Message(Role.ASSISTANT, "a1")], "a2")
    fork = fork_conversation(Conversation(title="t", messages=path), at=2)
    assert _texts(fork.messages) == ["q", "a2"] and fork.messages[1].versions == [] and fork.messages[1].version == 0
    assert version_count(path[1]) == 2  # the source keeps them
