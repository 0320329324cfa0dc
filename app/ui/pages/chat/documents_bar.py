"""The chat's documents above the composer: one removable chip per attached file, folder or collection, and a line
saying how indexing goes while attached files are indexed. The composer's Documents button (a menu: files,
a folder, one of your collections) and a drop of files or folders on the chat attach more."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path, PurePath

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QMenu, QToolButton, QWidget

from app.core.documents.citations import ChatDocument
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import set_role, tokens
from app.ui.widgets.elided_label import ElidedLabel

MAX_CHIP_TEXT = 28  # characters of a chip's name shown
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
DOCUMENT_FILTER = "Documents (*.pdf *.docx *.md *.txt *.html *.htm *.rst *.csv *.json);;All files (*)"


class DocumentChip(QWidget):
    """One attached document: its icon and name, and × to detach it."""

    remove_requested = Signal(object)  # the ChatDocument

    def __init__(self, document: ChatDocument, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.setObjectName("document_chip")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        t = tokens(self.palette())
        self.setStyleSheet(f"QWidget#document_chip {{ background: {t.accent_soft.name()}; border-radius: 10px; }}")
        label = document.label
        self.name = QLabel(label if len(label) <= MAX_CHIP_TEXT else label[: MAX_CHIP_TEXT - 1] + "…")
        self.name.setObjectName("document_chip_name")
        self.setToolTip(document.path or f'All the documents of the collection "{document.collection}"')
        kind = QLabel()
        kind.setPixmap(icon("folder" if document.path is None else "documents").pixmap(14, 14))
        self.remove_button = QToolButton()
        self.remove_button.setObjectName("remove_document")
        self.remove_button.setIcon(icon("close"))
        self.remove_button.setIconSize(QSize(10, 10))
        self.remove_button.setAutoRaise(True)
        self.remove_button.setToolTip(f"Stop answering from {label}")
        self.remove_button.setAccessibleName(f"Remove {label}")
        self.remove_button.clicked.connect(lambda: self.remove_requested.emit(self.document))
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 1, 1, 1)
        row.setSpacing(4)
        row.addWidget(kind)
        row.addWidget(self.name)
        row.addWidget(self.remove_button)


class DocumentsBar(QWidget):
    """The chips of the chat's documents and the indexing line; hidden while the chat has neither."""

    remove_requested = Signal(object)  # a ChatDocument to detach

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documents_bar")
        self.chips: list[DocumentChip] = []
        self.status = ElidedLabel(mode=Qt.TextElideMode.ElideMiddle)
        self.status.setObjectName("documents_status")
        set_role(self.status, "muted")
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 2)
        self._row.setSpacing(4)
        self._row.addWidget(self.status, 1)
        self.setVisible(False)

    def show_documents(self, documents: Sequence[ChatDocument]) -> None:
        if [chip.document for chip in self.chips] == list(documents):
            return
        for chip in self.chips:
            chip.deleteLater()
        self.chips = []
        for position, document in enumerate(documents):
            chip = DocumentChip(document, self)
            chip.remove_requested.connect(self.remove_requested)
            self._row.insertWidget(position, chip)
            self.chips.append(chip)
        self._update_visible()

    def show_status(self, text: str) -> None:
        """How indexing goes ("Indexing 2 of 5: report.pdf"); "" when there is nothing to say."""
        self.status.set_full_text(text)
        self.status.setToolTip(text)
        self._update_visible()

    def _update_visible(self) -> None:
        self.setVisible(bool(self.chips or self.status.full_text()))


class DocumentsButton(QToolButton):
    """The composer's Documents button: a menu to attach files, a folder, or one of your collections (the page fills
    ``set_collections``; ``collections_wanted`` asks it to, as the menu opens)."""

    files_chosen = Signal(list)  # paths of files or a folder to attach
    collection_chosen = Signal(str)
    collections_wanted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documents_button")
        self.setIcon(icon("documents"))
        self.setIconSize(icon_size(20))
        self.setAutoRaise(True)
        self.setToolTip("Answer from documents: attach files, a folder or a collection (or drop them here)")
        self.setAccessibleName("Attach documents")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.menu_.setObjectName("documents_menu")
        self.menu_.addAction("Files…", self.choose_files)
        self.menu_.addAction("Folder…", self.choose_folder)
        self.collections_menu = self.menu_.addMenu("Collection")
        self.collections_menu.setObjectName("collections_menu")
        self.menu_.aboutToShow.connect(self.collections_wanted)
        self.setMenu(self.menu_)
        self.set_collections([])

    def set_collections(self, names: Sequence[str]) -> None:
        self.collections_menu.clear()
        for name in names:
            self.collections_menu.addAction(name, functools.partial(self.collection_chosen.emit, name))
        if not names:
            self.collections_menu.addAction("No collections yet (Documents page)").setEnabled(False)

    def choose_files(self) -> None:
        dialog = QFileDialog(self, "Attach documents", str(Path.home()), DOCUMENT_FILTER)
        dialog.setObjectName("documents_dialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.filesSelected.connect(self.files_chosen)
        dialog.open()

    def choose_folder(self) -> None:
        dialog = QFileDialog(self, "Attach a folder of documents", str(Path.home()))
        dialog.setObjectName("documents_folder_dialog")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.filesSelected.connect(self.files_chosen)
        dialog.open()


def split_dropped(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(images, documents) of dropped paths, by their names alone (a folder is documents): no disk is read."""
    images = [p for p in paths if PurePath(p).suffix.lower() in IMAGE_SUFFIXES]
    return images, [p for p in paths if p not in images]
