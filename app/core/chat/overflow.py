"""Fitting a chat into a model's context: which turns are sent once the whole history no longer fits.

The turns after the system prompt are cut only at a user message, so a reply is never sent without its
question. The latest turn is always sent. When turns must go, enough go to bring the prompt down to
``REFILL`` of the limit, and the next sends keep that cut while it still fits: the prompt's start stays the
same from turn to turn, so llama.cpp's prefix cache keeps working instead of re-reading the whole chat.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.chat.conversation import OverflowPolicy
from app.core.errors import InvalidInputError

REFILL = 0.75  # after a cut, the prompt fills at most this share of the room it has
WARN_AT = 0.8  # the status bar warns when a chat fills this share of the context

PromptMessages = list[dict[str, Any]]
TokenCount = Callable[[PromptMessages], Awaitable[int]]

POLICY_LABELS = {
    OverflowPolicy.DROP_OLDEST: "Drop the oldest turns",
    OverflowPolicy.TRUNCATE_MIDDLE: "Drop the middle turns",
    OverflowPolicy.STOP: "Stop and ask me",
}


def when_full(policy: OverflowPolicy) -> str:
    """What a chat under ``policy`` does once its history fills the context, as the app tells the user."""
    what = {
        OverflowPolicy.DROP_OLDEST: "the oldest turns are no longer sent (the system prompt always is)",
        OverflowPolicy.TRUNCATE_MIDDLE: "the turns between the first and the latest are no longer sent",
        OverflowPolicy.STOP: "the chat stops and asks you what to do",
    }[policy]
    return f"When it is full, {what}."


class ContextFullError(InvalidInputError):
    """The chat cannot be sent within the model's context under its policy; the message says what to do."""


@dataclass(frozen=True)
class Cut:
    """Messages left out of what is sent: ``count`` turn messages from index ``start`` (0-based, system prompt not
    counted), as the conversation's message list numbers them."""

    start: int
    count: int

    def to_dict(self) -> dict[str, int]:
        return {"start": self.start, "count": self.count}

    @classmethod
    def from_dict(cls, data: object) -> Cut | None:
        if isinstance(data, dict) and isinstance(data.get("start"), int) and isinstance(data.get("count"), int):
            return cls(data["start"], data["count"]) if data["count"] > 0 and data["start"] >= 0 else None
        return None

    def describe(self) -> str:
        """The marker shown on a reply sent without these messages (numbered from 1, as the chat shows them)."""
        first, last = self.start + 1, self.start + self.count
        which = f"Message {first} was" if first == last else f"Messages {first}–{last} were"
        return f"{which} not sent to the model: the chat outgrew its context"


@dataclass(frozen=True)
class Fitted:
    messages: PromptMessages  # what is sent
    tokens: int  # its prompt tokens, as counted
    cut: Cut | None  # what was left out (None: everything is sent)


def reply_room(n_ctx: int, max_tokens: int | None) -> int:
    """Tokens kept free for the reply: its ``max_tokens``, at most half the context (a quarter when unbounded)."""
    if max_tokens is None or max_tokens <= 0:
        return n_ctx // 4
    return min(max_tokens, n_ctx // 2)


def turn_starts(turns: Sequence[dict[str, Any]]) -> list[int]:
    """Indices where a turn starts (a user message), the first message always counting as one."""
    starts = [i for i, m in enumerate(turns) if m.get("role") == "user" and i > 0]
    return [0, *starts] if turns else []


async def fit(
    system: PromptMessages,
    turns: PromptMessages,
    limit: int,
    count: TokenCount,
    policy: OverflowPolicy,
    previous: Cut | None = None,
) -> Fitted:
    """What to send of ``system`` + ``turns`` so that the prompt takes at most ``limit`` tokens.

    ``previous`` is the cut the chat's last reply was sent with: kept while it still fits. Raises
    ``ContextFullError`` under ``STOP`` when something must go, and whenever even the latest turn alone is too long.
    """
    whole = await count(system + turns)
    if whole <= limit:
        return Fitted(system + turns, whole, None)
    if policy is OverflowPolicy.STOP:
        raise ContextFullError(
            f"This chat no longer fits the model's context: it needs {whole:,} tokens and {limit:,} are free after "
            "the room kept for the reply. Choose how the chat handles a full context in its settings (drop the "
            "oldest turns, or the middle), fork its latest turns into a new chat, or load the model with a "
            "larger context."
        )
    head = _kept_head(turns, policy)
    cuts = [Cut(head, start - head) for start in turn_starts(turns) if start > head]
    if previous is not None and previous in cuts:
        sent = _without(system, turns, previous)
        tokens = await count(sent)
        if tokens <= limit:
            return Fitted(sent, tokens, previous)
    return await _deepest_needed(system, turns, cuts, int(limit * REFILL), limit, count)


def _kept_head(turns: PromptMessages, policy: OverflowPolicy) -> int:
    """How many turn messages at the start are never cut: the first turn under ``TRUNCATE_MIDDLE``, else none."""
    if policy is not OverflowPolicy.TRUNCATE_MIDDLE:
        return 0
    starts = turn_starts(turns)
    return starts[1] if len(starts) > 2 else 0  # with fewer turns there is no middle: cut from the start


def _without(system: PromptMessages, turns: PromptMessages, cut: Cut) -> PromptMessages:
    return system + turns[: cut.start] + turns[cut.start + cut.count :]


async def _deepest_needed(
    system: PromptMessages, turns: PromptMessages, cuts: list[Cut], target: int, limit: int, count: TokenCount
) -> Fitted:
    """The shallowest cut bringing the prompt to ``target`` (binary search: a deeper cut is never longer); the
    deepest cut when none does but it still fits ``limit``."""
    if not cuts:
        raise _latest_too_long(await count(system + turns), limit)
    low, high = 0, len(cuts) - 1
    best: Fitted | None = None
    while low <= high:
        middle = (low + high) // 2
        sent = _without(system, turns, cuts[middle])
        tokens = await count(sent)
        if tokens <= target:
            best, high = Fitted(sent, tokens, cuts[middle]), middle - 1
        else:
            low = middle + 1
    if best is not None:
        return best
    deepest = _without(system, turns, cuts[-1])
    tokens = await count(deepest)
    if tokens <= limit:
        return Fitted(deepest, tokens, cuts[-1])
    raise _latest_too_long(tokens, limit)


def _latest_too_long(tokens: int, limit: int) -> ContextFullError:
    return ContextFullError(
        f"The latest message (with the system prompt) needs {tokens:,} tokens, more than the {limit:,} free in the "
        "model's context after the room kept for the reply. Shorten it, lower the reply's token limit, or load the "
        "model with a larger context."
    )


def estimate_tokens(messages: PromptMessages) -> int:
    """A rough upper estimate for engines that cannot count (about 3 characters a token, plus each message's
    framing); used only to decide what fits."""
    return sum(len(str(m.get("content") or "")) // 3 + 8 for m in messages)
