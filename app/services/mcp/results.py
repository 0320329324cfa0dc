"""A tool's result as text: what the chat shows and, cut to 64 KiB (:func:`app.core.mcp.results.truncate_text`),
what the model is sent. Images, audio and binary resources are described, never inlined."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core.mcp.results import MAX_RESULT_BYTES, TruncatedText, truncate_text


@dataclass(frozen=True)
class ToolResult:
    server: str
    tool: str
    text: str  # the whole result
    is_error: bool  # the tool reported a failure (its text says what)

    @property
    def total_bytes(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))

    def for_model(self, limit: int = MAX_RESULT_BYTES) -> TruncatedText:
        return truncate_text(self.text, limit)


def result_text(result: Any) -> str:
    """The text of an SDK ``CallToolResult``: its content blocks in order, one per line; the structured content
    as JSON when there is no content."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4:,} bytes, not shown]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        return str(text) if text is not None else f"[binary resource {resource.uri} ({resource.mime_type or '?'})]"
    if kind == "resource_link":
        return f"[link: {block.name} {block.uri}]"
    return f"[{kind or 'unknown'} content, not shown]"
