"""A ChatGPT data export's ``conversations.json``, built in the shape ChatGPT writes (mapping trees with a root
node, a hidden system message, regenerated answers and edited prompts as side branches, ``thoughts`` from a
reasoning model, code and image parts, tool messages)."""

from __future__ import annotations

import itertools
from typing import Any

_ids = itertools.count(1)


def _message(role: str, content: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "id": f"msg-{next(_ids)}",
        "author": {"role": role, "name": None, "metadata": {}},
        "create_time": 1_700_000_000.0,
        "update_time": None,
        "content": content,
        "status": "finished_successfully",
        "end_turn": True,
        "weight": 1.0,
        "metadata": metadata,
        "recipient": "all",
        "channel": None,
    }


def text(role: str, body: str, **metadata: Any) -> dict[str, Any]:
    return _message(role, {"content_type": "text", "parts": [body]}, **metadata)


class Tree:
    """Nodes added under a parent; ``current`` is the branch ChatGPT shows."""

    def __init__(self) -> None:
        self.mapping: dict[str, dict[str, Any]] = {}
        self.root = self.add(None, None)

    def add(self, parent: str | None, message: dict[str, Any] | None) -> str:
        key = f"node-{next(_ids)}"
        self.mapping[key] = {"id": key, "message": message, "parent": parent, "children": []}
        if parent is not None:
            self.mapping[parent]["children"].append(key)
        return key

    def conversation(self, title: str, current: str, update_time: float = 1_700_000_500.5) -> dict[str, Any]:
        return {
            "title": title,
            "create_time": 1_700_000_000.0,
            "update_time": update_time,
            "mapping": self.mapping,
            "moderation_results": [],
            "current_node": current,
            "plugin_ids": None,
            "conversation_id": f"conv-{next(_ids)}",
            "conversation_template_id": None,
            "gizmo_id": None,
            "is_archived": False,
            "safe_urls": [],
            "default_model_slug": "gpt-4o",
            "id": f"conv-{next(_ids)}",
        }


def branched_conversation() -> dict[str, Any]:
    """Two turns on the current branch; a regenerated answer and an edited prompt (with its answer) left aside.

    Current branch: user "What is 2+2?" → assistant "4" → user "And squared?" → thoughts → assistant "16" (o3),
    then a code answer part and an image question. Abandoned branches: 2.
    """
    tree = Tree()
    system = tree.add(tree.root, text("system", "", is_visually_hidden_from_conversation=True))
    u1 = tree.add(system, text("user", "What is 2+2?"))
    a1 = tree.add(u1, text("assistant", "4", model_slug="gpt-4o"))
    tree.add(u1, text("assistant", "Four, obviously.", model_slug="gpt-4o"))  # regenerated: abandoned
    u2 = tree.add(a1, text("user", "And squared?"))
    edited = tree.add(a1, text("user", "And cubed?"))  # edited prompt: abandoned, with its answer
    tree.add(edited, text("assistant", "64", model_slug="gpt-4o"))
    thoughts = {"content_type": "thoughts", "thoughts": [{"summary": "Squaring", "content": "4 times 4 is 16."}]}
    t2 = tree.add(u2, _message("assistant", thoughts, model_slug="o3"))
    a2 = tree.add(t2, text("assistant", "16", model_slug="o3"))
    tool = tree.add(a2, text("tool", "search results …"))
    code = _message("assistant", {"content_type": "code", "language": "python", "text": "print(4 ** 2)"})
    c3 = tree.add(tool, code)
    image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-abc", "width": 64}
    picture = _message("user", {"content_type": "multimodal_text", "parts": [image, "What is in this picture?"]})
    u4 = tree.add(c3, picture)
    a4 = tree.add(u4, text("assistant", "A cat.", model_slug="gpt-4o"))
    return tree.conversation("Arithmetic", a4)


def linear_conversation(index: int, turns: int = 2) -> dict[str, Any]:
    tree = Tree()
    node = tree.root
    for turn in range(turns):
        node = tree.add(node, text("user", f"Question {turn} of chat {index} about zebras"))
        node = tree.add(node, text("assistant", f"Answer {turn} of chat {index}", model_slug="gpt-4o"))
    return tree.conversation(f"Chat {index}", node, update_time=1_700_000_000.0 + index)


def export(count: int = 3) -> list[dict[str, Any]]:
    """A conversations.json: the branched conversation first, then ``count - 1`` linear ones."""
    return [branched_conversation(), *(linear_conversation(i) for i in range(1, count))]
