"""A reply's source in context: the page it comes from (read from the document index off the Qt thread), the passage
highlighted and scrolled to, and "Open file" to open the document in the system's viewer."""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPushButton, QTextBrowser, QVBoxLayout, QWidget
from shiboken6 import isValid

from app.core.documents.citations import Source
from app.ui.style.theme import set_role, tokens
from app.ui.tasks import spawn

# A marker pen's colour behind the passage: pale yellow under dark text, deep amber under light text (the accent's
# soft tint was too faint to find on a dark page).
PASSAGE_MARK_LIGHT, PASSAGE_MARK_DARK = "#fff0a8", "#6b5200"
PageReader = Callable[[Source], Awaitable[str]]  # the text of the page a source comes from


def marked_page(page: str, source: Source, mark: str = PASSAGE_MARK_LIGHT) -> str:
    """The page as HTML with the passage highlighted (``<a name="passage">`` before it); the passage alone when it
    cannot be found in the page. A document sent whole is shown whole, nothing highlighted."""
    if source.chunk_id is None:
        return f'<a name="passage"></a><p>{_paragraphs(page)}</p>'
    start = _passage_start(page, source)
    if start < 0:
        return f'<a name="passage"></a><p><mark>{_paragraphs(source.text)}</mark></p>'
    end = start + len(source.text)
    before, passage, after = page[:start], page[start:end], page[end:]
    return (f"<p>{_paragraphs(before)}<a name=\"passage\"></a><span style=\"background-color: {mark}\">"
            f"{_paragraphs(passage)}</span>{_paragraphs(after)}</p>")  # fmt: skip


def _passage_start(page: str, source: Source) -> int:
    if source.text and page[source.start : source.start + len(source.text)] == source.text:
        return source.start
    return page.find(source.text) if source.text else -1


def _paragraphs(text: str) -> str:
    return html.escape(text).replace("\n\n", "<br><br>").replace("\n", " ")


class SourceDialog(QDialog):
    """Shown with ``open()`` (never ``exec``); closes itself when done."""

    def __init__(self, source: Source, read_page: PageReader | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source = source
        self.setObjectName("source_dialog")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle(f"Source [{source.number}] — {source.label}")
        self.resize(640, 520)
        self.where = QLabel(self._where_text())
        self.where.setObjectName("source_where")
        self.where.setWordWrap(True)
        set_role(self.where, "muted")
        self.text = QTextBrowser()
        self.text.setObjectName("source_text")
        self.text.setOpenLinks(False)
        self.open_button = QPushButton("Open file")
        self.open_button.setObjectName("open_source_file")
        self.open_button.setToolTip(source.path)
        self.open_button.clicked.connect(self.open_file)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.where)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
        self.loaded = False
        self.show_page(source.text)  # the passage at once; its page when it has been read
        if read_page is not None:
            spawn(self._read(read_page), "chat: read a source's page")

    def _where_text(self) -> str:
        heading = f" · {self.source.heading}" if self.source.heading else ""
        page = f"page {self.source.page} of " if self.source.page else ""
        return f"{page}{self.source.path}{heading}"

    def show_page(self, page: str) -> None:
        mark = PASSAGE_MARK_DARK if tokens(self.palette()).dark else PASSAGE_MARK_LIGHT
        self.text.setHtml(marked_page(page, self.source, mark))
        self.text.scrollToAnchor("passage")

    async def _read(self, read_page: PageReader) -> None:
        try:
            page = await read_page(self.source)
        except Exception:  # the index closed or lost the file: the passage alone stays shown
            page = ""
        if isValid(self) and page.strip():
            self.show_page(page)
            self.loaded = True

    def open_file(self) -> None:
        """The document in the system's viewer (QDesktopServices hands it to the desktop; nothing waits here)."""
        QDesktopServices.openUrl(QUrl.fromLocalFile(self.source.path))
