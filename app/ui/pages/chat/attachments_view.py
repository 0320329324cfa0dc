"""Thumbnails of a message's images: in the composer before sending (each with a remove button) and above a sent
message in the transcript. Images are decoded and scaled off the Qt thread (a ``QImage`` may be made in any
thread; the ``QPixmap`` is made here), and a small cache keeps thumbnails the transcript shows again."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QImageReader, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget
from shiboken6 import isValid

from app.core.chat.conversation import Attachment
from app.core.units import format_bytes
from app.ui.style.icons import icon
from app.ui.style.theme import set_role
from app.ui.tasks import loop_running, spawn

THUMB = 64  # px, the longer side
GAP = 6
_CACHE_SIZE = 256
_cache: OrderedDict[tuple[str, int], QImage] = OrderedDict()


def read_thumbnail(path: Path, size: int = THUMB) -> QImage:
    """The image at ``path`` scaled to fit ``size`` x ``size`` (a null image when it cannot be read)."""
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    original = reader.size()
    if original.isValid() and (original.width() > size or original.height() > size):
        reader.setScaledSize(original.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio))
    image = reader.read()
    return image if not image.isNull() else QImage()


async def load_thumbnail(path: Path, size: int = THUMB) -> QImage:
    key = (str(path), size)
    if (cached := _cache.get(key)) is not None:
        _cache.move_to_end(key)
        return cached
    image = await asyncio.to_thread(read_thumbnail, path, size)
    _cache[key] = image
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return image


def describe(attachment: Attachment) -> str:
    size = f"{attachment.width}×{attachment.height}, " if attachment.width and attachment.height else ""
    return f"{attachment.name or 'image'} ({size}{format_bytes(attachment.size)})"


class Thumbnail(QWidget):
    """One image; with ``removable``, a small × button in its corner."""

    remove_requested = Signal()

    def __init__(self, attachment: Attachment, removable: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachment = attachment
        self.setFixedSize(THUMB, THUMB)
        self.picture = QLabel(self)
        self.picture.setObjectName("thumbnail")
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.picture.setGeometry(0, 0, THUMB, THUMB)
        set_role(self.picture, "muted")
        self.picture.setText("…")
        self.setToolTip(describe(attachment))
        self.setAccessibleName(f"Image {attachment.name}")
        self.remove_button: QToolButton | None = None
        if removable:
            button = QToolButton(self)
            button.setObjectName("remove_image")
            button.setIcon(icon("close", QColor("white")))
            button.setIconSize(QSize(12, 12))
            button.setStyleSheet(
                "QToolButton#remove_image { background: rgba(0, 0, 0, 150); border: none; border-radius: 10px; }"
                "QToolButton#remove_image:hover { background: rgba(0, 0, 0, 210); }"
            )
            button.setToolTip(f"Remove {attachment.name or 'this image'}")
            button.setAccessibleName("Remove image")
            button.setFixedSize(20, 20)
            button.move(THUMB - 20, 0)
            button.clicked.connect(self.remove_requested)
            self.remove_button = button

    def show_image(self, image: QImage) -> None:
        if image.isNull():
            self.picture.setText("?")
            self.picture.setToolTip(f"{describe(self.attachment)}: the image cannot be shown")
            return
        self.picture.setText("")
        self.picture.setPixmap(QPixmap.fromImage(image))


class AttachmentStrip(QWidget):
    """A row of thumbnails (hidden while empty). ``root``: the attachments folder their paths are relative to."""

    remove_requested = Signal(int)  # the index of the image to remove

    def __init__(self, root: Path | None, *, removable: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachment_strip")
        self.root = root
        self.removable = removable
        self.thumbnails: list[Thumbnail] = []
        self._shown: tuple[str, ...] = ()
        self._loading: asyncio.Task[None] | None = None
        self._right = False  # the stretch comes first: thumbnails at the right end
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.setSpacing(GAP)
        self._row.addStretch(1)
        self.setFixedHeight(THUMB)
        self.hide()

    def set_alignment_right(self) -> None:
        """Thumbnails at the right end (above a user's message), not the left."""
        self._row.takeAt(self._row.count() - 1)
        self._row.insertStretch(0, 1)
        self._right = True

    def show_attachments(self, attachments: Sequence[Attachment]) -> None:
        paths = tuple(a.path for a in attachments)
        if paths == self._shown:
            return
        self._shown = paths
        for thumbnail in self.thumbnails:
            self._row.removeWidget(thumbnail)
            thumbnail.deleteLater()
        self.thumbnails = []
        for index, attachment in enumerate(attachments):
            thumbnail = Thumbnail(attachment, self.removable, self)
            thumbnail.remove_requested.connect(lambda i=index: self.remove_requested.emit(i))
            self._row.insertWidget(self._row.count() if self._right else index, thumbnail)
            self.thumbnails.append(thumbnail)
        self.setVisible(bool(attachments))
        self.setMinimumWidth(len(attachments) * (THUMB + GAP))
        if attachments and self.root is not None and loop_running():
            if self._loading is not None:
                self._loading.cancel()
            self._loading = spawn(self._load(list(self.thumbnails)), "chat: image thumbnails")

    def content_width(self) -> int:
        return max(len(self.thumbnails) * (THUMB + GAP) - GAP, 0)

    async def _load(self, thumbnails: list[Thumbnail]) -> None:
        assert self.root is not None
        for thumbnail in thumbnails:
            image = await load_thumbnail(self.root / thumbnail.attachment.path)
            if thumbnail in self.thumbnails and isValid(thumbnail):  # still shown
                thumbnail.show_image(image)
