"""Where a message is written: a multi-line input that grows with its text, one Send button that becomes Stop while
a reply is generated, a hint and the chat's context meter ("1,234 / 4,096 tokens", coloured near the limit).

Keys: Enter sends and Shift+Enter starts a new line (with the setting "Send with Ctrl+Enter", Ctrl+Enter sends and
Enter starts a new line; Ctrl+Enter sends in both); Esc stops a reply; Tab and Shift+Tab move the focus on (no tab
characters); while an input method composes a word, Enter is its own (it picks the word, never sends).

Images join the draft by the Attach button, by pasting (Ctrl+V of an image or of image files) or by dropping files
on the composer; they are copied into the app's attachments folder off the Qt thread and shown as removable
thumbnails until the message is sent. Other files and folders dropped (or chosen with the Documents button) are
documents the chat answers from (``documents_given``; shown as chips in ``documents_bar``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from PySide6.QtCore import QBuffer, QEvent, QIODevice, QMimeData, QObject, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QInputMethodEvent, QKeyEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.backends.protocol import ModelInfo
from app.core.chat.conversation import Attachment
from app.core.units import MISSING
from app.services.chat.attachments import AttachmentError, AttachmentStore
from app.ui.pages.chat.attachments_view import AttachmentStrip
from app.ui.pages.chat.documents_bar import DocumentsBar, DocumentsButton, split_dropped
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import set_role, tokens
from app.ui.tasks import spawn
from app.ui.widgets.elided_label import ElidedLabel

MIN_LINES, MAX_LINES = 2, 8
WARN_FRACTION = 0.85  # the meter turns to the warning colour from here
IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.gif *.webp *.bmp)"
_ENTER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)
PASTED_NAME = "pasted image.png"


def image_files(mime: QMimeData) -> list[str]:
    """The local files a paste or drop carries (the store decides which are images)."""
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


def png_of(image: QImage) -> bytes:
    """``image`` encoded as PNG (any thread: a QImage is not a GUI object)."""
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stubs say bytes; PySide6 takes str
    return bytes(buffer.data().data())


class MessageInput(QPlainTextEdit):
    """The text input; images pasted or dropped into it go to ``images_given`` instead of becoming text."""

    files_given = Signal(list)  # local file paths
    image_given = Signal(QImage)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return source.hasImage() or bool(image_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        if files := image_files(source):
            self.files_given.emit(files)
        elif source.hasImage():
            self.image_given.emit(QImage(source.imageData()))
        else:
            super().insertFromMimeData(source)


class Composer(QFrame):
    """``send_requested`` on the button or the send key (Enter, or Ctrl+Enter: ``set_send_with_ctrl_enter``),
    ``stop_requested`` on the button (as Stop) or Esc."""

    send_requested = Signal()
    stop_requested = Signal()
    attach_failed = Signal(str)  # what could not be attached, and why
    images_changed = Signal()
    documents_given = Signal(list)  # files or folders to answer from (dropped, pasted or chosen)

    generating = False
    send_with_ctrl_enter = False  # the setting: Ctrl+Enter sends and Enter makes a new line
    _composing = False  # an input method is composing (its pre-edit text is shown)
    _ready = False  # set once built: Qt sends change events while the style is applied

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        set_role(self, "card")
        self.setAcceptDrops(True)
        self.store: AttachmentStore | None = None
        self.images: list[Attachment] = []  # the draft's images, already in the attachments folder
        self.adding = 0  # images being copied in now
        self.strip = AttachmentStrip(None, removable=True)
        self.strip.remove_requested.connect(self.remove_image)
        self.attach_button = QToolButton()
        self.attach_button.setObjectName("attach_button")
        self.attach_button.setIcon(icon("image"))
        self.attach_button.setIconSize(icon_size(20))
        self.attach_button.setAutoRaise(True)
        self.attach_button.setToolTip("Attach images (or paste or drop them here)")
        self.attach_button.setAccessibleName("Attach images")
        self.attach_button.clicked.connect(self.choose_images)
        self.attach_button.setEnabled(False)  # until the chat page gives the attachments folder
        self.documents_button = DocumentsButton()
        self.documents_button.files_chosen.connect(self.documents_given)
        self.documents_bar = DocumentsBar()
        self.input = MessageInput()
        self.input.setObjectName("message_input")
        self.input.setPlaceholderText("Write a message…")
        self.input.setFrameShape(QFrame.Shape.NoFrame)
        self.input.setStyleSheet("QPlainTextEdit { border: none; background: transparent; }")
        self.input.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.input.setTabChangesFocus(True)  # Tab leaves the composer; a tab character is never typed
        self.input.document().contentsChanged.connect(self._fit_height)
        self.input.installEventFilter(self)
        self.input.files_given.connect(self.add_files)
        self.input.image_given.connect(self.add_image)
        self.send_button = QToolButton()
        self.send_button.setObjectName("send_button")
        self.send_button.setIconSize(icon_size(20))
        self.send_button.setAutoRaise(False)
        self.hint = QLabel()
        set_role(self.hint, "muted")
        self.meter = ElidedLabel(mode=Qt.TextElideMode.ElideLeft)
        self.meter.setObjectName("context_meter")
        self.meter.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.meter.setToolTip("Tokens this chat fills in the model's context / the context size")
        self._meter_level = "muted"
        self._build()
        self.send_button.clicked.connect(self._clicked)
        self.set_generating(False)
        self._fit_height()
        self.show_context(None, None)
        self._ready = True

    def _build(self) -> None:
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        top.addWidget(self.documents_button, 0, Qt.AlignmentFlag.AlignBottom)
        top.addWidget(self.input, 1)
        top.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        bottom = QHBoxLayout()
        bottom.setContentsMargins(4, 0, 4, 0)
        bottom.addWidget(self.hint)
        bottom.addWidget(self.meter, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 4)
        layout.setSpacing(2)
        layout.addWidget(self.documents_bar)
        layout.addWidget(self.strip)
        layout.addLayout(top)
        layout.addLayout(bottom)

    # --- state ------------------------------------------------------------------------------------------------
    def set_generating(self, generating: bool) -> None:
        """Send becomes Stop while a reply is generated (and back)."""
        self.generating = generating
        self.send_button.setIcon(icon("stop" if generating else "send", tokens(self.palette()).on_accent))
        send_key = "Ctrl+Enter" if self.send_with_ctrl_enter else "Enter"
        self.send_button.setToolTip("Stop the reply (Esc)" if generating else f"Send ({send_key})")
        self.send_button.setAccessibleName("Stop" if generating else "Send")
        newline_key = "Enter" if self.send_with_ctrl_enter else "Shift+Enter"
        self.hint.setText("Esc stops the reply" if generating else f"{send_key} to send · {newline_key} for a new line")
        self._style_button()

    def set_send_with_ctrl_enter(self, ctrl_enter: bool) -> None:
        """The send key: Ctrl+Enter (Enter then makes a new line) or Enter (Shift+Enter makes a new line)."""
        self.send_with_ctrl_enter = ctrl_enter
        self.set_generating(self.generating)  # the tooltip and the hint name the key

    def set_sending_enabled(self, enabled: bool) -> None:
        self.send_button.setEnabled(enabled or self.generating)

    def show_context(self, used: int | None, total: int | None, estimated: bool = False) -> None:
        """The chat's context use: ``used`` tokens of ``total`` (None: unknown); ``estimated`` marks a guess."""
        if total is None:
            self.meter.set_full_text("")
            return
        shown = MISSING if used is None else f"{'~' if estimated else ''}{used:,}"
        self.meter.set_full_text(f"{shown} / {total:,} tokens")
        fraction = (used or 0) / total if total else 0.0
        self._meter_level = "error" if fraction >= 1 else "warning" if fraction >= WARN_FRACTION else "muted"
        self._style_meter()

    def meter_level(self) -> str:
        return self._meter_level

    # --- looks ------------------------------------------------------------------------------------------------
    def _style_button(self) -> None:
        t = tokens(self.palette())
        background = t.error if self.generating else t.accent
        self.send_button.setStyleSheet(
            f"QToolButton#send_button {{ background: {background.name()}; border-radius: 16px; padding: 6px; }}"
            f"QToolButton#send_button:disabled {{ background: {t.border.name()}; }}"
        )

    def _style_meter(self) -> None:
        t = tokens(self.palette())
        colour = {"error": t.error, "warning": t.warning}.get(self._meter_level, t.muted)
        self.meter.setStyleSheet(f"color: {colour.name()};")

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if self._ready and event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.set_generating(self.generating)
            self._style_meter()
        if self._ready and event.type() in (QEvent.Type.StyleChange, QEvent.Type.FontChange):
            self._fit_height()  # the frame and the line height follow the style sheet and the font

    def _fit_height(self) -> None:
        """Between MIN_LINES and MAX_LINES lines tall, following the text."""
        line = self.input.fontMetrics().lineSpacing()
        lines = max(MIN_LINES, min(MAX_LINES, int(self.input.document().size().height())))
        margins = self.input.contentsMargins()
        frame = 2 * self.input.frameWidth() + margins.top() + margins.bottom()
        self.input.setFixedHeight(lines * line + frame + 8)

    # --- input --------------------------------------------------------------------------------------------------
    def _clicked(self) -> None:
        (self.stop_requested if self.generating else self.send_requested).emit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """The send key sends, Shift+Enter makes a new line and Esc stops while typing; an input method composing
        a word keeps its keys."""
        if watched is self.input and event.type() == QEvent.Type.InputMethod:
            assert isinstance(event, QInputMethodEvent)
            self._composing = bool(event.preeditString())
        if watched is self.input and event.type() == QEvent.Type.KeyPress and not self._composing:
            assert isinstance(event, QKeyEvent)
            if event.key() in _ENTER_KEYS:
                return self._enter(event.modifiers())
            if event.key() == Qt.Key.Key_Escape and self.generating:
                self.stop_requested.emit()
                return True
        return super().eventFilter(watched, event)

    def _enter(self, modifiers: Qt.KeyboardModifier) -> bool:
        """Enter with ``modifiers``: True when handled here (sent, or a new line typed), False to let the input
        have it (Enter as a new line when Ctrl+Enter sends)."""
        mods = modifiers & ~Qt.KeyboardModifier.KeypadModifier
        if mods == Qt.KeyboardModifier.ControlModifier or (mods == Qt.KeyboardModifier.NoModifier
                                                           and not self.send_with_ctrl_enter):  # fmt: skip
            self.send_requested.emit()
            return True
        if mods == Qt.KeyboardModifier.ShiftModifier:
            self.input.insertPlainText("\n")  # a plain line break (Qt would type a soft one, U+2028)
            self.input.ensureCursorVisible()
            return True
        return False

    # --- images -------------------------------------------------------------------------------------------------
    def set_attachment_store(self, store: AttachmentStore) -> None:
        self.store = store
        self.strip.root = store.root
        self.attach_button.setEnabled(True)

    def choose_images(self) -> None:
        """The Attach button: a file dialog (not blocking the window); the chosen files join the draft."""
        dialog = QFileDialog(self, "Attach images", str(Path.home()), IMAGE_FILTER)
        dialog.setObjectName("attach_dialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.filesSelected.connect(self.add_files)
        dialog.open()

    def add_files(self, paths: list[str]) -> None:
        if self.store is not None and paths:
            self._adding(spawn(self._store_files(self.store, paths), "chat: attach images"))

    def add_image(self, image: QImage) -> None:
        """A pasted image (no file behind it): kept as PNG."""
        if self.store is not None and not image.isNull():
            self._adding(spawn(self._store_pasted(self.store, image), "chat: attach pasted image"))

    def remove_image(self, index: int) -> None:
        if 0 <= index < len(self.images):
            del self.images[index]
            self._show_images()

    def take_images(self) -> list[Attachment]:
        """The draft's images, which leave the composer (the message was sent)."""
        images, self.images = self.images, []
        self._show_images()
        return images

    def _adding(self, task: asyncio.Task[None]) -> None:
        self.adding += 1

        def done(_task: asyncio.Task[None]) -> None:
            self.adding -= 1

        task.add_done_callback(done)

    async def _store_files(self, store: AttachmentStore, paths: list[str]) -> None:
        problems = []
        for path in paths:
            try:
                self.images.extend(await store.add_files([path]))
            except AttachmentError as exc:
                problems.append(str(exc))
            self._show_images()
        if problems:
            self.attach_failed.emit(" ".join(problems))

    async def _store_pasted(self, store: AttachmentStore, image: QImage) -> None:
        data = await asyncio.to_thread(png_of, image)
        try:
            self.images.append(await store.add_data(data, PASTED_NAME))
        except AttachmentError as exc:
            self.attach_failed.emit(str(exc))
        self._show_images()

    def _show_images(self) -> None:
        self.strip.show_attachments(self.images)
        self.images_changed.emit()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        mime = event.mimeData()
        if image_files(mime) or (self.store is not None and mime.hasImage()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        """Images join the draft; other files and folders are documents the chat answers from."""
        mime = event.mimeData()
        if files := image_files(mime):
            images, documents = split_dropped(files)
            if documents:
                self.documents_given.emit(documents)
            if images:
                self.add_files(images)
        elif mime.hasImage():
            self.add_image(QImage(mime.imageData()))
        event.acceptProposedAction()


def images_refusal(model: ModelInfo | None) -> str | None:
    """Why the loaded model cannot take the draft's images (None: it can, or its engine decides)."""
    if model is None or model.vision is not False:
        return None
    why = model.projector_problem or (
        "Load a vision model; for llama.cpp, put its mmproj file in the same folder as the model."
    )
    return f"{model.name} cannot read images. {why} Your message and images are kept: remove the images to send it."
