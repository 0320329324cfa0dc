"""A chat as one self-contained HTML file: styles inline (light, and dark where the reader's system prefers it),
code blocks coloured, the thinking in ``<details>``, images embedded as data URIs, the models and settings used,
a message's other versions (each with the messages that followed it) in a collapsed "Other versions" block.

Message text is Markdown rendered as the app renders it (raw HTML in it escaped, links limited to http(s) and
mailto); the view's own "Copy code" links are left out.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable

from app.core.chat import code_highlight
from app.core.chat.conversation import Attachment, Conversation, Message, Role
from app.core.chat.export_text import chat_facts, message_notes, speaker
from app.core.chat.markdown import render_markdown
from app.core.chat.tool_calls_view import arguments_text, call_heading, sent_note
from app.core.chat.tool_use import ToolUse
from app.core.chat.versions import other_slots, version_count

ImageData = Callable[[Attachment], bytes | None]  # an attachment's bytes; None when its file is not there
_COPY_LINK = re.compile(r'<p class="code-actions"><a href="copy-code:\d+">Copy code</a></p>\n?')
_EMBEDDABLE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
LIGHT_CODE_BG, DARK_CODE_BG = "#f4f5f7", "#1f2329"

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 50rem; margin: 2rem auto; padding: 0 1rem;
       line-height: 1.5; color: #1d1f23; background: #ffffff; }
header p { color: #5b616b; margin: 0.2rem 0; }
.message { border-top: 1px solid #d9dce1; padding: 0.8rem 0; }
.message.user .body { background: #eef2f8; border-radius: 8px; padding: 0.2rem 0.8rem; }
.speaker { font-weight: 600; }
.meta { color: #5b616b; font-size: 0.85rem; }
details { color: #5b616b; margin: 0.4rem 0; }
details.versions { color: inherit; border-left: 3px solid #d9dce1; padding-left: 0.8rem; }
details.tool { color: inherit; border: 1px solid #d9dce1; border-radius: 6px; padding: 0.3rem 0.6rem; }
pre { background: %(light_bg)s; padding: 0.6rem; border-radius: 6px; overflow-x: auto; white-space: pre-wrap; }
img { max-width: 100%%; border-radius: 6px; }
.sources blockquote { margin: 0.2rem 0 0.6rem 0; padding-left: 0.6rem; border-left: 3px solid #d9dce1; }
.source { font-weight: 600; }
%(light_code)s
@media (prefers-color-scheme: dark) {
  body { color: #e4e6ea; background: #16181c; }
  header p, .meta, details { color: #9aa1ac; }
  .message { border-color: #30343b; }
  .message.user .body { background: #232833; }
  pre { background: %(dark_bg)s; }
  a { color: #8ab4f8; }
%(dark_code)s
}
"""


def to_html(conversation: Conversation, origin_title: str | None = None, image_data: ImageData | None = None) -> str:
    """The whole chat as a standalone HTML page."""
    title = html.escape(" ".join(conversation.title.split()) or "Chat")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title><style>{_css()}</style></head><body>",
        f"<header><h1>{title}</h1>{_facts(conversation, origin_title)}</header>",
    ]
    if conversation.system_prompt.strip():
        parts.append(f'<section class="message system"><div class="speaker">System prompt</div>'
                     f"<div class=\"body\">{_markdown(conversation.system_prompt)}</div></section>")  # fmt: skip
    parts.extend(_message(message, index, image_data) for index, message in enumerate(conversation.messages, 1))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _css() -> str:
    return _CSS % {
        "light_bg": LIGHT_CODE_BG,
        "dark_bg": DARK_CODE_BG,
        "light_code": code_highlight.highlight_css(False, LIGHT_CODE_BG),
        "dark_code": code_highlight.highlight_css(True, DARK_CODE_BG),
    }


def _facts(conversation: Conversation, origin_title: str | None) -> str:
    return "".join(f'<p class="fact">{html.escape(fact)}</p>' for fact in chat_facts(conversation, origin_title))


def _message(message: Message, index: int, image_data: ImageData | None, anchored: bool = True) -> str:
    role = str(message.role)
    anchor = f' id="m{index}"' if anchored else ""  # a kept version's messages have no anchor of their own
    out = [f'<section class="message {role}"{anchor}>',
           f'<div class="speaker">{index}. {html.escape(speaker(message))}</div>']  # fmt: skip
    if message.reasoning.strip():
        out.append(f"<details><summary>Thinking</summary>{_markdown(message.reasoning)}</details>")
    out.extend(_image(attachment, image_data) for attachment in message.attachments)
    body = _markdown(message.content) if message.role is Role.ASSISTANT else _plain(message.content)
    out.append(f'<div class="body">{body}</div>')
    out.extend(_tool_call(call) for call in message.tool_calls)
    out.extend(_sources(message))
    meta = " · ".join(message_notes(message))
    if meta:
        out.append(f'<div class="meta">{html.escape(meta)}</div>')
    out.extend(_versions(message, index, image_data))
    out.append("</section>")
    return "\n".join(out)


def _versions(message: Message, index: int, image_data: ImageData | None) -> list[str]:
    """The other versions of the message's place, collapsed; each branch numbered from the place on."""
    if not message.versions:
        return []
    count = version_count(message)
    out = [f'<div class="meta">Version {message.version + 1} of {count}</div>',
           f'<details class="versions"><summary>Other versions ({count - 1})</summary>']  # fmt: skip
    for slot, branch in other_slots(message):
        out.append(f"<h4>Version {slot + 1} of {count}</h4>")
        out.extend(_message(later, index + offset, image_data, anchored=False) for offset, later in enumerate(branch))
    return [*out, "</details>"]


def _sources(message: Message) -> list[str]:
    """A reply's numbered sources as a list: file and page, the passage quoted (escaped text, never markup)."""
    if not message.sources:
        return []
    items = [f'<li value="{s.number}"><span class="source">{html.escape(s.label)}</span> '
             f'<span class="meta">{html.escape(s.path)}</span><blockquote>{_plain(s.text)}</blockquote></li>'
             for s in message.sources]  # fmt: skip
    return ['<div class="sources"><div class="meta">Sources</div><ol>', *items, "</ol></div>"]


def _tool_call(call: ToolUse) -> str:
    """A call, collapsed: arguments and result as escaped text (a tool's output never becomes markup)."""
    result = f"<pre>{html.escape(call.result or '')}</pre>" if call.settled else ""
    return (f'<details class="tool"><summary>{html.escape(call_heading(call))}</summary>'
            f"<p class=\"meta\">Arguments</p><pre>{html.escape(arguments_text(call))}</pre>"
            f'<p class="meta">{html.escape(sent_note(call))}</p>{result}</details>')  # fmt: skip


def _image(attachment: Attachment, image_data: ImageData | None) -> str:
    label = html.escape(attachment.name or attachment.path, quote=True)
    data = image_data(attachment) if image_data and attachment.mime in _EMBEDDABLE else None
    if data is None:
        return f'<p class="meta">[image: {label} — not found]</p>'
    encoded = base64.b64encode(data).decode("ascii")
    return f'<p><img alt="{label}" src="data:{attachment.mime};base64,{encoded}"></p>'


def _markdown(text: str) -> str:
    return _COPY_LINK.sub("", render_markdown(text))


def _plain(text: str) -> str:
    return "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n\n") if p.strip()).replace("\n", "<br>")
