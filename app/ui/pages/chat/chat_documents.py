"""The chat page's documents: files, folders and collections attached to the chat on screen (the composer's
Documents button, or a drop on the chat), shown as removable chips; indexing's progress while attached files are
indexed; a reply's source opened in context. All index reads and writes go through the chat's session (off the Qt
thread)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QWidget

from app.core.chat.conversation import Conversation
from app.core.documents.citations import ChatDocument, Source
from app.core.errors import AppError
from app.services.chat.session import ChatSession
from app.services.workstation import Workstation
from app.ui.pages.chat.composer import Composer, image_files
from app.ui.pages.chat.documents_bar import split_dropped
from app.ui.pages.chat.source_dialog import SourceDialog
from app.ui.pages.chat.transcript import TranscriptView
from app.ui.tasks import spawn

if TYPE_CHECKING:  # the documents service loads when a chat first attaches documents, not with the page
    from app.services.documents.service import DocumentsEvent, IndexProgress


class DocumentsPage(Protocol):
    """What the documents need of the chat page."""

    workstation: Workstation
    view: TranscriptView
    composer: Composer
    closed: bool

    @property
    def session(self) -> ChatSession | None: ...

    def follow(self, unsubscribe: Callable[[], None]) -> None: ...

    def show_notice(self, text: str, level: str = "info", key: str | None = None, **options: object) -> None: ...


def progress_text(progress: IndexProgress) -> str:
    """ "Indexing 2 of 5: report.pdf" while a run goes on; "" when none does."""
    if not progress.running:
        return ""
    where = f": {PurePath(progress.current).name}" if progress.current else ""
    count = f" {progress.done} of {progress.total}" if progress.total else ""
    return f"Indexing{count}{where} — the reply waits for it" if (count or where) else "Indexing…"


class ChatDocumentsControl(QObject):
    def __init__(self, page: DocumentsPage, drop_target: QWidget) -> None:
        super().__init__(drop_target)
        self.page = page
        self.bar = page.composer.documents_bar
        self.button = page.composer.documents_button
        page.composer.documents_given.connect(self.attach_paths)
        self.button.collection_chosen.connect(self.attach_collection)
        self.button.collections_wanted.connect(lambda: spawn(self.list_collections(), "chat: list collections"))
        self.bar.remove_requested.connect(self.detach)
        page.view.source_requested.connect(self.open_source)
        drop_target.setAcceptDrops(True)
        drop_target.installEventFilter(self)
        self._listening = False

    # --- what the chat shows -----------------------------------------------------------------------------------
    def chat_shown(self, conversation: Conversation) -> None:
        self.bar.show_documents(conversation.documents)

    def _events(self, event: DocumentsEvent) -> None:
        """Indexing's progress, while the chat on screen waits for it (not a run the Documents page started)."""
        from app.services.documents.service import IndexProgress  # loaded: it sent the event

        if isinstance(event, IndexProgress) and not self.page.closed:
            waiting = self.page.session is not None and self.page.session.indexing
            self.bar.show_status(progress_text(event) if waiting else "")

    def _listen(self) -> None:
        """Follow indexing from the first attach on (the documents service is not made before)."""
        if not self._listening:
            self._listening = True
            self.page.follow(self.page.workstation.documents.subscribe(self._events))

    # --- attaching ---------------------------------------------------------------------------------------------
    def attach_paths(self, paths: Sequence[str]) -> None:
        if paths and self.page.session is not None:
            self._listen()
            spawn(self._attach(self.page.session.attach_documents(list(paths))), "chat: attach documents")

    def attach_collection(self, name: str) -> None:
        if self.page.session is not None:
            spawn(self._attach(self.page.session.attach_collection(name)), "chat: attach a collection")

    def detach(self, document: ChatDocument) -> None:
        if self.page.session is not None:
            spawn(self._attach(self.page.session.detach_document(document)), "chat: detach a document")

    async def _attach(self, work: object) -> None:
        try:
            documents = await work  # type: ignore[misc]
        except AppError as exc:
            self.page.show_notice(str(exc), "error", key="documents")
            return
        if not self.page.closed:
            self.bar.show_documents(documents)

    async def list_collections(self) -> None:
        summaries = await self.page.workstation.documents.summaries()
        if not self.page.closed:
            self.button.set_collections([s.name for s in summaries])

    # --- sources -----------------------------------------------------------------------------------------------
    def open_source(self, source: Source) -> SourceDialog:
        session = self.page.session
        reader = session.documents.page_text if session is not None and session.documents is not None else None
        dialog = SourceDialog(source, reader, self.page.view.window())
        dialog.open()
        self.dialog = dialog
        return dialog

    # --- drops on the chat -------------------------------------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.DragEnter and isinstance(event, QDragEnterEvent):
            if image_files(event.mimeData()):
                event.acceptProposedAction()
                return True
        elif event.type() == QEvent.Type.Drop and isinstance(event, QDropEvent):
            images, documents = split_dropped(image_files(event.mimeData()))
            if images:
                self.page.composer.add_files(images)
            self.attach_paths(documents)
            event.acceptProposedAction()
            return True
        return super().eventFilter(watched, event)
