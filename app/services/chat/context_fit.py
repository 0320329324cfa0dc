"""What a chat sends to its engine when its history outgrows the model's context (see ``app.core.chat.overflow``).

The engine counts the tokens where it can (llama.cpp renders the chat with its template and tokenizes it);
elsewhere a rough estimate decides. While the chat's last reply was measured, sent whole, and the new messages
cannot push it past the limit, nothing is counted at all (one round trip to the engine saved per send).
"""

from __future__ import annotations

from typing import Any

from app.backends.protocol import TokenCounting
from app.core.chat.conversation import Conversation, Message, Role
from app.core.chat.overflow import REFILL, Cut, PromptMessages, estimate_tokens, fit, reply_room
from app.core.params import SamplingParams
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost

CUT_KEY = "context_cut"  # in a reply's settings: the cut it was sent with, in prompt-turn indices (kept next time)
LEFT_OUT_KEY = "context_left_out"  # the same, numbered as the chat's messages: what the reply's marker shows


async def fit_prompt(
    host: EngineHost, kind: EngineKind, conversation: Conversation, sampling: SamplingParams
) -> tuple[PromptMessages, dict[str, Any]]:
    """The prompt to send and what to record in the reply's settings; raises ``ContextFullError``."""
    prompt = conversation.prompt_messages()
    engine = host.engine(kind)
    model = host.model_info(kind)  # the parallel engine's load when the chats run there
    if model is None or not model.n_ctx:
        return prompt, {}
    limit = model.n_ctx - reply_room(model.n_ctx, sampling.max_tokens)
    if _surely_fits(conversation, limit):
        return prompt, {}
    has_system = bool(prompt) and prompt[0].get("role") == "system" and bool(conversation.system_prompt.strip())
    system, turns = prompt[: int(has_system)], prompt[int(has_system) :]

    async def count(messages: PromptMessages) -> int:
        if isinstance(engine, TokenCounting):
            return await host.count_tokens(kind, messages)
        return estimate_tokens(messages)

    fitted = await fit(system, turns, limit, count, conversation.overflow, _previous_cut(conversation))
    if fitted.cut is None:
        return fitted.messages, {}
    notes: dict[str, Any] = {CUT_KEY: fitted.cut.to_dict()}
    if shown := _as_messages(fitted.cut, _sent_positions(conversation), len(turns)):
        notes[LEFT_OUT_KEY] = shown.to_dict()
    return fitted.messages, notes


def record_fit(settings: dict[str, Any], notes: dict[str, Any]) -> None:
    """Put what ``fit_prompt`` noted into a reply's settings, replacing what an earlier send of it noted."""
    settings.pop(CUT_KEY, None)
    settings.pop(LEFT_OUT_KEY, None)
    settings.update(notes)


def _surely_fits(conversation: Conversation, limit: int) -> bool:
    """The last reply was sent whole and measured, and what came after it stays under the refill mark even at one
    token a character."""
    for index in range(len(conversation.messages) - 1, -1, -1):
        message = conversation.messages[index]
        if message.role is Role.ASSISTANT and message.stats is not None and message.stats.prompt_tokens:
            if CUT_KEY in message.settings:
                return False
            after = sum(len(m.content) + 8 for m in conversation.messages[index + 1 :])
            after += sum(len(c.sent_result()) + 8 for m in conversation.messages[index:] for c in m.tool_calls)
            return message.stats.prompt_tokens + message.stats.completion_tokens + after <= limit * REFILL
    return False


def _previous_cut(conversation: Conversation) -> Cut | None:
    replies = (m for m in reversed(conversation.messages) if m.role is Role.ASSISTANT and m.settings)
    last: Message | None = next(replies, None)
    return Cut.from_dict(last.settings.get(CUT_KEY)) if last is not None else None


def _sent_positions(conversation: Conversation) -> list[int]:
    """Index in the chat of each message ``prompt_messages`` sends (empty replies are not sent; a reply's tool
    results are sent as messages of their own, after it)."""
    return [i for i, m in enumerate(conversation.messages) if m.sent for _ in range(1 + len(m.tool_calls))]


def _as_messages(cut: Cut, positions: list[int], turns: int) -> Cut | None:
    """``cut`` numbered as the chat's messages (None when the two lists do not line up)."""
    if len(positions) != turns or cut.start + cut.count > turns:
        return None
    first, last = positions[cut.start], positions[cut.start + cut.count - 1]
    return Cut(first, last - first + 1)
