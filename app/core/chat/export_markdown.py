"""A chat as a Markdown document: a header (models, settings, origin), then each message under its speaker, the
thinking in a collapsed ``<details>`` block, images as links to their files, a message's other versions (each with
the messages that followed it) in a collapsed "Other versions" block."""

from __future__ import annotations

from collections.abc import Callable

from app.core.chat.conversation import Attachment, Conversation, Message
from app.core.chat.export_text import chat_facts, message_notes, speaker
from app.core.chat.tool_calls_view import arguments_text, call_heading, fenced, sent_note
from app.core.chat.tool_use import ToolUse
from app.core.chat.versions import other_slots, version_count

ImageLink = Callable[[Attachment], str | None]  # an attachment's file as a URL; None when it is not there


def to_markdown(
    conversation: Conversation, origin_title: str | None = None, image_link: ImageLink | None = None
) -> str:
    """The whole chat as Markdown."""
    lines = [f"# {_one_line(conversation.title)}", ""]
    facts = chat_facts(conversation, origin_title)
    lines.extend(f"- {fact}" for fact in facts)
    if facts:
        lines.append("")
    if conversation.system_prompt.strip():
        lines += ["## System prompt", "", *_quoted(conversation.system_prompt), ""]
    for index, message in enumerate(conversation.messages, start=1):
        lines += _message(message, index, image_link)
    return "\n".join(lines).rstrip() + "\n"


def _message(message: Message, index: int, image_link: ImageLink | None) -> list[str]:
    lines = ["---", "", f"### {index}. {speaker(message)}", ""]
    if message.reasoning.strip():
        lines += ["<details><summary>Thinking</summary>", "", message.reasoning.strip(), "", "</details>", ""]
    for attachment in message.attachments:
        url = image_link(attachment) if image_link else None
        label = attachment.name or attachment.path
        lines += [f"![{label}]({url})" if url else f"*[image: {label}]*", ""]
    lines += [message.content.rstrip() or ("*(called tools)*" if message.tool_calls else "*(empty)*"), ""]
    for call in message.tool_calls:
        lines += _tool_call(call)
    lines += _sources(message)
    if notes := message_notes(message):
        lines += [f"*{' · '.join(notes)}*", ""]
    return lines + _versions(message, index, image_link)


def _versions(message: Message, index: int, image_link: ImageLink | None) -> list[str]:
    """The other versions of the message's place, collapsed; each branch numbered from the place on."""
    if not message.versions:
        return []
    count = version_count(message)
    lines = [f"*Version {message.version + 1} of {count}*", "",
             f"<details><summary>Other versions ({count - 1})</summary>", ""]  # fmt: skip
    for slot, branch in other_slots(message):
        lines += [f"#### Version {slot + 1} of {count}", ""]
        for offset, later in enumerate(branch):
            lines += _message(later, index + offset, image_link)
    return [*lines, "</details>", ""]


def _tool_call(call: ToolUse) -> list[str]:
    """A call in a collapsed block: its arguments, then what the model was sent back (tool output stays inert)."""
    lines = [f"<details><summary>{_one_line(call_heading(call)).replace('<', '&lt;')}</summary>", ""]
    lines += ["Arguments:", "", *fenced(arguments_text(call), "json"), ""]
    lines += [sent_note(call) + (":" if call.settled else ""), ""]
    if call.settled:
        lines += [*fenced(call.result or "", "text"), ""]
    return [*lines, "</details>", ""]


def _sources(message: Message) -> list[str]:
    """A reply's numbered sources: file and page, then the passage quoted."""
    if not message.sources:
        return []
    lines = ["**Sources**", ""]
    for source in message.sources:
        lines += [f"[{source.number}] {source.label} — `{source.path}`", "", *_quoted(source.text), ""]
    return lines


def _quoted(text: str) -> list[str]:
    return [f"> {line}" if line else ">" for line in text.strip().splitlines()]


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "Chat"
