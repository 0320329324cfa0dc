"""Does every message row on screen hold its text? Measured independently of the transcript's own sizing: each body's
text is laid out afresh (a copy of its document) at the width the body really has."""

from __future__ import annotations

import itertools
import math

from app.core.chat.conversation import Message, ReplyStats, Role

LONG_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3  # wider than a bubble: broken mid-word


def saved_chat() -> list[Message]:
    """Messages of many lengths: short and long questions, long words, replies with paragraphs and code blocks."""
    messages = []
    for i in range(6):
        question = "Why does the cache grow when I send a long prompt to the model? " * (i + 1)
        messages.append(Message(Role.USER, question + (LONG_WORD if i % 2 else "Thanks, that was all.")))
        code = (
            "def grow(cache, tokens):\n    cache.extend(tokens)  # a long comment that runs on past the column's edge\n"
        )
        reply = " ".join(["The cache keeps **every token** it has seen, so it grows."] * (4 * i + 2))
        messages.append(Message(Role.ASSISTANT, f"{reply}\n\n```python\n{code}```\n\nThat is the last line of it.",
                                stats=ReplyStats(completion_tokens=40 + i, decode_tokens_per_s=12.5)))  # fmt: skip
    messages.append(Message(Role.USER, "One more short question with a few words at its very end, please."))
    return messages


def save_chat(conversations_db) -> int:
    """Store :func:`saved_chat` as the newest chat (the one the window restores at start); returns its length."""
    from app.services.chat.history import ConversationStore

    store = ConversationStore(conversations_db)
    conversation = store.create("Why the cache grows")
    assert conversation.id is not None
    messages = saved_chat()
    for message in messages:
        store.append_message(conversation.id, message)
    store.close()
    return len(messages)


def row_problems(view) -> list[str]:
    """What does not fit, row by row, among the rows whose widgets are inside the viewport (empty: all fit)."""
    problems: list[str] = []
    shown = [(row, view.message_widget(row)) for row in view.live_rows()]
    shown = [(row, item) for row, item in shown if item is not None and _on_screen(view, item)]
    if not shown:
        return ["no message row on screen"]
    for row, item in shown:
        problems += [f"row {row}: {p}" for p in _item_problems(item)]
    for (row, item), (_next_row, below) in itertools.pairwise(shown):
        if below.y() < item.y() + item.height():
            problems.append(f"row {row}: overlaps the next row ({item.y() + item.height()} > {below.y()})")
    return problems


def _item_problems(item) -> list[str]:
    problems = []
    body, bubble = item.body, item.bubble
    needed = laid_out_height(body)
    if body.height() < needed:
        problems.append(f"text {needed} px tall at {body.width()} px in a body {body.height()} px tall")
    if body.y() + body.height() > bubble.height():
        problems.append(f"body ends at {body.y() + body.height()} in a bubble {bubble.height()} tall")
    if bubble.y() + bubble.height() > item.height():
        problems.append(f"bubble ends at {bubble.y() + bubble.height()} in a row {item.height()} tall")
    if item.mark.isVisibleTo(item):
        wanted = item.mark.heightForWidth(item.mark.width())
        if item.mark.height() < wanted or item.mark.y() + item.mark.height() > item.height():
            problems.append(f"mark {item.mark.height()} px tall needs {wanted}, ends past the row")
    return problems


def laid_out_height(body) -> int:
    """The height of the body's text laid out at the body's width, in a copy of its document."""
    document = body.document().clone()
    document.setTextWidth(body.viewport().width())
    return math.ceil(document.size().height())


def _on_screen(view, item) -> bool:
    top = item.mapTo(view.viewport(), item.rect().topLeft()).y()
    return top + item.height() > 0 and top < view.viewport().height()
