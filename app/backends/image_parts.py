"""Images in chat messages, as OpenAI content parts (``{"type": "image_url", "image_url": {"url": …}}``): the one
shape every engine is given. llama.cpp and vLLM take it as it is; Ollama takes a message's images as a list of
base64 strings beside its text (``images``), which ``for_ollama`` makes of ``data:`` URIs.
"""

from __future__ import annotations

from typing import Any

from app.core.errors import InvalidInputError


def image_urls(content: Any) -> list[str]:
    """The image URLs in a message's content (a list of parts; plain text has none)."""
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            urls.append(str(image.get("url") if isinstance(image, dict) else image or ""))
    return urls


def text_of(content: Any) -> str:
    """A message's text: the content itself, or its text parts joined."""
    if not isinstance(content, list):
        return "" if content is None else str(content)
    texts = [str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if t)


def for_ollama(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as Ollama's /api/chat takes them: text ``content`` and the images as base64 in ``images``."""
    converted = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            converted.append(message)
            continue
        out = {**message, "content": text_of(content)}
        if images := [_base64_payload(url) for url in image_urls(content)]:
            out["images"] = images
        converted.append(out)
    return converted


def _base64_payload(url: str) -> str:
    head, _, payload = url.partition(",")
    if not url.startswith("data:") or not head.endswith(";base64"):
        raise InvalidInputError(
            "Ollama takes images inline: send each one as a base64 data: URI (data:image/png;base64,…)."
        )
    return payload
