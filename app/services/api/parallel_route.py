"""Which llama.cpp requests may run on the parallel engine (continuous batching) and which need the single worker.

The parallel engine renders, samples and stops as the worker does, but does not do everything the worker does:
per-token logprobs, ``echo``, grammars (a JSON ``response_format``, a raw ``grammar``, a forced tool call) and
images run one at a time on the single worker, and the request log says why (``serial_reason``)."""

from __future__ import annotations

from typing import Any

from app.core.params import GenerationOptions
from app.services.api.fields import GenerationCall


def serial_reason(call: GenerationCall) -> str | None:
    """Why ``call`` cannot run on the parallel engine, in words for the request log; None when it can."""
    options: GenerationOptions = call.options or GenerationOptions()
    if options.logprobs:
        return "logprobs"
    if call.echo or options.echo:
        return "echo"
    if options.grammar is not None or options.format_type != "text":
        return "a grammar (response_format or grammar)"
    if options.tool_mode in ("required", "named"):
        return "a forced tool call (its grammar)"
    if any(_has_image(m) for m in call.messages):
        return "images"
    return None


def _has_image(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image") for part in content
    )
