"""What every export says about a chat besides its messages: the models and settings used, and its origin."""

from __future__ import annotations

from app.core.chat.conversation import Conversation, Message, Role
from app.core.documents.citations import COUNT_KEY, MISSING_KEY, MODE_KEY, mode_caption

SETTING_NAMES = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "max_tokens", "seed", "n_ctx")


def models_used(conversation: Conversation) -> list[str]:
    """The models that wrote the replies, in order of first use ("model (engine)")."""
    seen: dict[str, None] = {}
    for message in conversation.messages:
        if message.role is Role.ASSISTANT and message.model:
            seen[f"{message.model} ({message.backend})" if message.backend else message.model] = None
    return list(seen)


def settings_line(message: Message) -> str:
    """A reply's sampling settings, e.g. "temperature 0.7 · top_p 0.9"; "" when none were recorded."""
    settings = message.settings
    parts = [f"{name} {settings[name]}" for name in SETTING_NAMES if settings.get(name) is not None]
    return " · ".join(parts)


def message_notes(message: Message) -> list[str]:
    """What an export says under a message: a partial reply's status, its error, a reply's figures and settings."""
    notes = []
    if message.status.is_partial:
        notes.append(f"reply {message.status}")
    if message.error:
        notes.append(f"error: {message.error}")
    if message.role is Role.ASSISTANT and (documents := documents_note(message)):
        notes.append(documents)
    if message.role is Role.ASSISTANT and message.stats:
        notes.append(message.stats.summary())
    if message.role is Role.ASSISTANT and (settings := settings_line(message)):
        notes.append(settings)
    return notes


def documents_note(message: Message) -> str:
    """ "Answered from the full text of 2 documents" / "… from 5 passages"; "" for a reply without documents."""
    missing = message.settings.get(MISSING_KEY)
    missing = [str(m) for m in missing] if isinstance(missing, list) else []
    caption = mode_caption(message.settings.get(MODE_KEY), int(message.settings.get(COUNT_KEY) or 0), missing)
    return f"answered from {caption}" if caption else ""


def last_settings(conversation: Conversation) -> str:
    """The settings of the latest reply that recorded any."""
    for message in reversed(conversation.messages):
        line = settings_line(message) if message.role is Role.ASSISTANT else ""
        if line:
            return line
    return ""


def origin_line(conversation: Conversation, origin_title: str | None) -> str:
    """ "Forked from <title> at message N"; "" for a chat that is no fork."""
    if conversation.forked_at is None:
        return ""
    title = origin_title if origin_title is not None else "a deleted chat"
    return f"Forked from {title} at message {conversation.forked_at}"


def chat_facts(conversation: Conversation, origin_title: str | None) -> list[str]:
    """The lines an export opens with: the models and settings used, the fork's origin, the message count."""
    facts = []
    if models := models_used(conversation):
        facts.append(f"Model: {', '.join(models)}")
    if settings := last_settings(conversation):
        facts.append(f"Settings: {settings}")
    if origin := origin_line(conversation, origin_title):
        facts.append(origin)
    facts.append(f"Messages: {len(conversation.messages)}")
    return facts


def speaker(message: Message) -> str:
    if message.role is Role.USER:
        return "You"
    if message.role is Role.SYSTEM:
        return "System"
    return message.model or "Assistant"
