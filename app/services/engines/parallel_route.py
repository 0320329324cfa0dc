"""Which llama.cpp replies may run on the parallel engine (continuous batching) and which need the single worker —
for the chats (``EngineHost.stream_chat``) and the API server's requests (``app.services.api.parallel_route``).

The parallel engine renders, samples and stops as the worker does, but does not do everything the worker does:
per-token logprobs, ``echo``, grammars (a JSON ``response_format``, a raw ``grammar``, a forced tool call) and
images run one at a time on the single worker."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.core.params import GenerationOptions

IMAGE_PARTS = ("image_url", "image", "input_image")


def serial_reason(
    messages: Iterable[dict[str, Any]], options: GenerationOptions | None, *, echo: bool = False
) -> str | None:
    """Why a reply to ``messages`` with ``options`` cannot run on the parallel engine, in words; None when it can."""
    options = options or GenerationOptions()
    if options.logprobs:
        return "logprobs"
    if echo or options.echo:
        return "echo"
    if options.grammar is not None or options.format_type != "text":
        return "a grammar (response_format or grammar)"
    if options.tool_mode in ("required", "named"):
        return "a forced tool call (its grammar)"
    if any(has_image(m) for m in messages):
        return "images"
    return None


def has_image(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in IMAGE_PARTS for part in content
    )
