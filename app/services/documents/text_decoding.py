"""Bytes of a text file → str: UTF-8 (with or without BOM), UTF-16 with a BOM, else Latin-1 only when the bytes look
like text; anything else is binary content."""

from __future__ import annotations

import codecs

from app.services.documents.failures import UnreadableFile

BINARY = "binary content, not text"
_CONTROL_SHARE_LIMIT = 0.05  # more control characters than this (besides tab, newline, CR, FF) → not text
_ALLOWED_CONTROLS = frozenset("\t\n\r\f\v\x1b")


def decode_text(data: bytes) -> str:
    """The text of ``data``; :class:`UnreadableFile` when it is binary."""
    if data.startswith(codecs.BOM_UTF8):
        return _checked(data.decode("utf-8-sig", errors="replace"))
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return _checked(data.decode("utf-16", errors="replace"))
    if b"\x00" in data:
        raise UnreadableFile(BINARY)
    try:
        return _checked(data.decode("utf-8"))
    except UnicodeDecodeError:
        return _checked(data.decode("latin-1"))


def _checked(text: str) -> str:
    sample = text[:65536]
    controls = sum(1 for char in sample if (char < " " or "\x7f" <= char < "\xa0") and char not in _ALLOWED_CONTROLS)
    if "\x00" in sample or (sample and controls / len(sample) > _CONTROL_SHARE_LIMIT):
        raise UnreadableFile(BINARY)
    return text.replace("\r\n", "\n").replace("\r", "\n")
