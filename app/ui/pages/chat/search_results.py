"""Search results under the chat list's search box: each matching message as its chat's title and a snippet with
the matched words in bold. Choosing one emits the chat's id and the message's index."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QAbstractTextDocumentLayout, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import (
    QAbstractItemView,
    QListView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.services.chat.history import MARK_CLOSE, MARK_OPEN, SearchHit
from app.ui.style.theme import RADIUS, SPACE_S, SPACE_XS, tokens

Index = QModelIndex | QPersistentModelIndex
HIT_ROLE = Qt.ItemDataRole.UserRole
_ROW_H = 60  # the title, then two lines of snippet


def snippet_html(hit: SearchHit) -> str:
    """A result's snippet as rich text, the matches in bold (everything else escaped)."""
    snippet = html.escape(" ".join(hit.snippet.split()))
    return snippet.replace(MARK_OPEN, "<b>").replace(MARK_CLOSE, "</b>")


class SearchResultsModel(QAbstractListModel):
    def __init__(self) -> None:
        super().__init__()
        self.hits: list[SearchHit] = []

    def set_hits(self, hits: list[SearchHit]) -> None:
        self.beginResetModel()
        self.hits = list(hits)
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's name and default
        return 0 if parent.isValid() else len(self.hits)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.hits):
            return None
        hit = self.hits[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{hit.title}: {hit.marked('', '')}"
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{hit.title}, message {hit.message_index + 1}"
        if role == HIT_ROLE:
            return hit
        return None


class _Delegate(QStyledItemDelegate):
    def __init__(self, owner: QWidget) -> None:
        super().__init__(owner)
        self._owner = owner

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        return QSize(option.rect.width(), _ROW_H)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        hit = index.data(HIT_ROLE)
        if not isinstance(hit, SearchHit):
            return
        t = tokens(self._owner.palette())
        rect: QRect = option.rect
        card = rect.adjusted(SPACE_XS, 1, -SPACE_XS, -1)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        if selected or option.state & QStyle.StateFlag.State_MouseOver:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(t.accent_soft if selected else t.hover)
            painter.drawRoundedRect(card, RADIUS, RADIUS)
        area = card.adjusted(SPACE_S, SPACE_XS, -SPACE_S, -SPACE_XS)
        metrics = painter.fontMetrics()
        line = metrics.height()
        where = f"#{hit.message_index + 1}"
        painter.setPen(t.muted)
        painter.drawText(area, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop, where)
        bold = painter.font()
        bold.setBold(True)
        painter.setFont(bold)
        painter.setPen(t.text)
        room = area.width() - metrics.horizontalAdvance(where) - SPACE_S
        title = painter.fontMetrics().elidedText(hit.title, Qt.TextElideMode.ElideRight, max(0, room))
        painter.drawText(area, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, title)
        document = QTextDocument()
        document.setDefaultFont(option.font)
        document.setDocumentMargin(0)
        document.setHtml(snippet_html(hit))
        document.setTextWidth(area.width())
        painter.translate(area.left(), area.top() + line + 2)
        painter.setClipRect(QRect(0, 0, area.width(), area.height() - line - 2))
        context = QAbstractTextDocumentLayout.PaintContext()
        context.palette.setColor(QPalette.ColorRole.Text, t.muted if not selected else t.text)
        document.documentLayout().draw(painter, context)
        painter.restore()


class SearchResults(QListView):
    """The results of one search; ``hit_chosen(chat_id, message_index)`` on a click or Enter."""

    hit_chosen = Signal(int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatSearchResults")
        self.results = SearchResultsModel()
        self.setModel(self.results)
        self.setItemDelegate(_Delegate(self))
        self.setUniformItemSizes(True)
        self.setMouseTracking(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setFrameShape(QListView.Shape.NoFrame)
        self.setStyleSheet("QListView { background: transparent; border: none; }")
        self.clicked.connect(self._chosen)
        self.activated.connect(self._chosen)

    def set_hits(self, hits: list[SearchHit]) -> None:
        self.results.set_hits(hits)

    def hits(self) -> list[SearchHit]:
        return list(self.results.hits)

    def _chosen(self, index: QModelIndex) -> None:
        hit = index.data(HIT_ROLE)
        if isinstance(hit, SearchHit):
            self.hit_chosen.emit(hit.conversation_id, hit.message_index)
