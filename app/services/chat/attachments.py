"""Images attached to chat messages: copied into the app's attachments folder, content-addressed (``ab/ab12….png``,
the SHA-256 of the bytes), so the chat keeps them when the original moves and the same image is stored once.

Blocking methods read and hash files: call them off the Qt thread (``add_files`` / ``add_data`` do). The type and
size come from the file's own header (PNG, JPEG, GIF, WebP, BMP), never from its name.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from app.core.chat.conversation import Attachment
from app.core.errors import InvalidInputError
from app.services.paths import PRIVATE_DIR

MAX_IMAGE_BYTES = 20 * 1024 * 1024
KINDS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "image/bmp": "bmp"}
ACCEPTED = "PNG, JPEG, GIF, WebP or BMP"


class AttachmentError(InvalidInputError):
    """A file that cannot be attached; the message names it and says what would work."""


class AttachmentStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, attachment: Attachment) -> Path:
        return self.root / attachment.path

    async def add_files(self, paths: Sequence[str | Path]) -> list[Attachment]:
        return await asyncio.to_thread(lambda: [self.add_file(Path(p)) for p in paths])

    async def add_data(self, data: bytes, name: str) -> Attachment:
        return await asyncio.to_thread(self.add_bytes, data, name)

    def add_file(self, path: Path) -> Attachment:
        try:
            size = path.stat().st_size
            if size > MAX_IMAGE_BYTES:
                raise AttachmentError(_too_large(path.name, size))
            data = path.read_bytes()
        except OSError as exc:
            raise AttachmentError(f"{path.name} cannot be read ({exc.strerror or exc}).") from exc
        return self.add_bytes(data, path.name)

    def add_bytes(self, data: bytes, name: str) -> Attachment:
        """Keep ``data`` (an image) in the folder, once; its Attachment record."""
        if len(data) > MAX_IMAGE_BYTES:
            raise AttachmentError(_too_large(name, len(data)))
        sniffed = image_header(data)
        if sniffed is None:
            raise AttachmentError(f"{name or 'This file'} is not an image the app can send: use a {ACCEPTED} file.")
        mime, width, height = sniffed
        digest = hashlib.sha256(data).hexdigest()
        relative = f"{digest[:2]}/{digest}.{KINDS[mime]}"
        target = self.root / relative
        if not target.is_file() or target.stat().st_size != len(data):
            _write_atomically(target, data)
        return Attachment("image", relative, mime, name, width, height, len(data))


def _too_large(name: str, size: int) -> str:
    return (
        f"{name or 'This image'} is {size / 1024 / 1024:.1f} MB; images up to {MAX_IMAGE_BYTES // 1024 // 1024} MB "
        "can be attached. Scale it down or save it as JPEG first."
    )


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


# --- image headers --------------------------------------------------------------------------------------------
def image_header(data: bytes) -> tuple[str, int, int] | None:
    """(mime type, width, height) of a PNG, JPEG, GIF, WebP or BMP image; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data.startswith(b"BM") and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return "image/bmp", abs(width), abs(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_size(data)
        return ("image/webp", *size) if size else None
    if data.startswith(b"\xff\xd8"):
        size = _jpeg_size(data)
        return ("image/jpeg", *size) if size else None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The frame size from the first SOF marker."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None


# --- to an engine -----------------------------------------------------------------------------------------------
async def inline_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each ``file:`` image as a ``data:`` URI (what vLLM and Ollama take), read off the loop."""
    if not any(_file_parts(m) for m in messages):
        return messages
    return await asyncio.to_thread(lambda: [_inlined(m) for m in messages])


def _file_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and str(_url(p)).startswith("file:")]


def _url(part: dict[str, Any]) -> Any:
    image = part.get("image_url")
    return image.get("url") if isinstance(image, dict) else None


def _inlined(message: dict[str, Any]) -> dict[str, Any]:
    if not _file_parts(message):
        return message
    parts = [
        {"type": "image_url", "image_url": {"url": file_data_uri(str(_url(p)))}} if p in _file_parts(message) else p
        for p in message["content"]
    ]
    return {**message, "content": parts}


def file_data_uri(url: str) -> str:
    from urllib.request import url2pathname  # urllib.request brings http.client: not at start-up

    path = Path(url2pathname(urlparse(url).path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AttachmentError(
            f"An image of this chat is missing from the attachments folder ({path.name}): remove it from the "
            "message, or attach it again."
        ) from exc
    sniffed = image_header(data)
    mime = sniffed[0] if sniffed else "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
