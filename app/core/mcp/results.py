"""Tool results cut to what a model is sent: at most 64 KiB of UTF-8, with the byte count of the whole."""

from __future__ import annotations

from dataclasses import dataclass

MAX_RESULT_BYTES = 64 * 1024


@dataclass(frozen=True)
class TruncatedText:
    text: str  # at most ``limit`` bytes of UTF-8, the note included
    total_bytes: int  # the size of the whole result in UTF-8
    truncated: bool


def truncate_text(text: str, limit: int = MAX_RESULT_BYTES) -> TruncatedText:
    """``text`` whole when it fits in ``limit`` bytes of UTF-8; else its start (cut on a character boundary)
    and a note with the byte counts, the two together within ``limit``."""
    data = text.encode("utf-8", "surrogatepass")
    total = len(data)
    if total <= limit:
        return TruncatedText(text, total, False)
    note = f"\n[truncated: the first {{shown:,}} of {total:,} bytes are shown]"
    room = max(0, limit - len(note.format(shown=limit).encode()))
    head = data[:room].decode("utf-8", "ignore")  # "ignore" drops only a character cut in half at the end
    shown = len(head.encode("utf-8", "surrogatepass"))
    return TruncatedText(head + note.format(shown=shown), total, True)
