"""The Library's table: one row per model — its name over its file (with a "Loaded" badge on the model the chat has
loaded, an "Embedding" tag on an embedding model), parameters, quantization, size, and a per-row Chat action —
sortable by value and searchable across every fact the library knows about a model (architecture, family, source,
path)."""

from __future__ import annotations

import os

from PySide6.QtCore import (
    QAbstractItemModel,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QRect,
    QSize,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QFont, QMouseEvent, QPainter, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QWidget,
)

from app.core.units import MISSING, format_bytes
from app.services.engines.embedding_slot import ENCODER_ARCHITECTURES
from app.services.library.index import KIND_GGUF, LibraryEntry, human_count
from app.ui.style.theme import RADIUS, Tokens, tokens

COLUMNS = ("Model", "Params", "Quant", "Size", "")
NAME, PARAMS, QUANT, SIZE, ACTION = range(len(COLUMNS))
SOURCE_LABELS = {"folder": "Model folder", "hf-cache": "Hugging Face cache", "ollama": "Ollama"}
ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1  # the LibraryEntry (column 0)
SORT_ROLE = Qt.ItemDataRole.UserRole + 2  # a number for numeric columns, lower-case text otherwise
SECONDARY_ROLE = Qt.ItemDataRole.UserRole + 3  # the second line under the name: file · where
LOADED_ROLE = Qt.ItemDataRole.UserRole + 4  # True on the model the chat has loaded
SEARCH_ROLE = Qt.ItemDataRole.UserRole + 5  # every word a search may match
EMBEDDING_ROLE = Qt.ItemDataRole.UserRole + 6  # True on an embedding model (an encoder architecture)
LOADED_TEXT = "Loaded"
EMBEDDING_TEXT = "Embedding"


def embedding_entry(entry: LibraryEntry) -> bool:
    """An embedding model by its architecture (BERT and its kin); the Documents page's picker reads headers too."""
    return entry.architecture in ENCODER_ARCHITECTURES


def action_text(entry: LibraryEntry) -> str:
    """The row's action: Chat for a GGUF, Serve (vLLM) for an HF-format folder, none for a broken file."""
    if entry.error:
        return ""
    return "Chat" if entry.kind == KIND_GGUF else "Serve"


def secondary_text(entry: LibraryEntry) -> str:
    where = entry.repo_id or SOURCE_LABELS.get(entry.source, entry.source)
    if entry.error:
        return f"{entry.file_name} · cannot be used"
    if entry.source == "ollama":
        return f"Ollama · {entry.architecture or 'GGUF'}"
    return f"{entry.file_name} · {where}"


def same_file(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b)


def _cells(entry: LibraryEntry) -> list[tuple[str, object]]:
    """(text, sort key) per column."""
    return [
        (entry.name, entry.name.lower()),
        (human_count(entry.parameter_count) or MISSING, entry.parameter_count or 0),
        (entry.quantization or MISSING, (entry.quantization or "").lower()),
        (format_bytes(entry.size_bytes), entry.size_bytes),
        (action_text(entry), action_text(entry)),
    ]


def _search_text(entry: LibraryEntry) -> str:
    words = (
        entry.name,
        entry.file_name,
        entry.path,
        entry.architecture,
        entry.family,
        entry.quantization,
        entry.repo_id,
        entry.backend,
        SOURCE_LABELS.get(entry.source, entry.source),
        "error" if entry.error else "",
        "embedding" if embedding_entry(entry) else "",
    )
    return " ".join(w for w in words if w).lower()


class LibraryTableModel(QStandardItemModel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(list(COLUMNS))
        self.loaded: set[str] = set()

    def set_entries(self, entries: list[LibraryEntry], error: QColor) -> None:
        self.removeRows(0, self.rowCount())
        for entry in entries:
            row = []
            for column, (text, key) in enumerate(_cells(entry)):
                item = QStandardItem(text)
                item.setEditable(False)
                item.setData(key, SORT_ROLE)
                item.setToolTip(entry.error or entry.path)
                if column in (PARAMS, SIZE):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if entry.error:
                    item.setForeground(error)
                row.append(item)
            row[NAME].setData(entry, ENTRY_ROLE)
            row[NAME].setData(secondary_text(entry), SECONDARY_ROLE)
            row[NAME].setData(_search_text(entry), SEARCH_ROLE)
            row[NAME].setData(self.is_loaded(entry), LOADED_ROLE)
            row[NAME].setData(embedding_entry(entry), EMBEDDING_ROLE)
            self.appendRow(row)

    def set_loaded(self, entries: set[str]) -> None:
        """Mark the rows of these model entries (GGUF paths, ``ollama:NAME``) as loaded, the others not."""
        self.loaded = set(entries)
        for row in range(self.rowCount()):
            item = self.item(row, NAME)
            entry = item.data(ENTRY_ROLE) if item is not None else None
            if isinstance(entry, LibraryEntry) and item is not None:
                loaded = self.is_loaded(entry)
                if bool(item.data(LOADED_ROLE)) != loaded:
                    item.setData(loaded, LOADED_ROLE)

    def is_loaded(self, entry: LibraryEntry) -> bool:
        if entry.error:
            return False
        if entry.source == "ollama" and f"ollama:{entry.name}" in self.loaded:
            return True
        return any(not e.startswith(("ollama:", "vllm:")) and same_file(e, entry.path) for e in self.loaded)


class LibraryFilter(QSortFilterProxyModel):
    """Case-insensitive search (every word somewhere in a model's facts); sorts by ``SORT_ROLE``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self._words: list[str] = []

    def set_search(self, text: str) -> None:
        """Every word must appear somewhere in the row (name, file, architecture, quantization, path…)."""
        self.beginFilterChange()
        self._words = text.lower().split()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def words(self) -> list[str]:
        return list(self._words)

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        if not self._words:
            return True
        haystack = str(self.sourceModel().index(source_row, NAME, source_parent).data(SEARCH_ROLE) or "")
        return all(word in haystack for word in self._words)


class NameDelegate(QStyledItemDelegate):
    """The model's name over its file and where it lives (muted), with a "Loaded" badge at the right."""

    def __init__(self, parent: QWidget | None = None, second_elide: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle):
        super().__init__(parent)
        self.second_elide = second_elide

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        text, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        t = tokens(opt.palette)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        rect = opt.rect.adjusted(8, 4, -8, -4)
        painter.save()
        if index.data(LOADED_ROLE):
            rect = self._paint_badge(painter, rect, opt.font, t)
        if index.data(EMBEDDING_ROLE):
            tag = opt.palette.highlightedText().color() if selected else t.muted
            rect = self._paint_badge(painter, rect, opt.font, t, EMBEDDING_TEXT, tag)
        fm = opt.fontMetrics
        line = fm.height()
        bold = QFont(opt.font)
        bold.setWeight(QFont.Weight.DemiBold)
        painter.setFont(bold)
        bold_fm = painter.fontMetrics()
        foreground = index.data(Qt.ItemDataRole.ForegroundRole)
        main = opt.palette.highlightedText().color() if selected else t.text
        painter.setPen(foreground.color() if foreground is not None and not selected else main)
        name_rect = QRect(rect.left(), rect.top(), rect.width(), line)
        painter.drawText(
            name_rect,
            Qt.AlignmentFlag.AlignVCenter,
            bold_fm.elidedText(text, Qt.TextElideMode.ElideRight, rect.width()),
        )
        painter.setFont(opt.font)
        painter.setPen(main if selected else t.muted)
        second = str(index.data(SECONDARY_ROLE) or "")
        second_rect = QRect(rect.left(), rect.top() + line + 2, rect.width(), line)
        painter.drawText(
            second_rect,
            Qt.AlignmentFlag.AlignVCenter,
            fm.elidedText(second, self.second_elide, rect.width()),
        )
        painter.restore()

    def _paint_badge(
        self, painter: QPainter, rect: QRect, font: QFont, t: Tokens, text: str = LOADED_TEXT, tag: QColor | None = None
    ) -> QRect:
        """A small pill at the right of ``rect``: "Loaded" in green, or a tag outlined in ``tag``; the rest of it."""
        small = QFont(font)
        small.setPointSizeF(max(font.pointSizeF() * 0.85, 7.0))
        small.setWeight(QFont.Weight.DemiBold)
        painter.setFont(small)
        width = painter.fontMetrics().horizontalAdvance(text) + 14
        height = painter.fontMetrics().height() + 2
        badge = QRect(rect.right() - width, rect.top(), width, height)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(tag or t.success)
        painter.setBrush(Qt.BrushStyle.NoBrush if tag is not None else t.success_bg)
        painter.drawRoundedRect(badge, height / 2, height / 2)
        painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)
        return rect.adjusted(0, 0, -(width + 6), 0)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        hint = super().sizeHint(option, index)
        return QSize(min(hint.width(), 320), option.fontMetrics.height() * 2 + 12)


class ActionDelegate(QStyledItemDelegate):
    """A small button drawn in the row (Chat / Serve); a click on it emits ``clicked`` with the row's index."""

    clicked = Signal(QModelIndex)

    def _button(self, option: QStyleOptionViewItem, text: str) -> QRect:
        width = option.fontMetrics.horizontalAdvance(text) + 24
        height = option.fontMetrics.height() + 8
        rect = option.rect
        return QRect(rect.center().x() - width // 2, rect.center().y() - height // 2, width, height)

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        text, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        if not text:
            return
        t = tokens(opt.palette)
        button = self._button(opt, text)
        hovered = bool(opt.state & QStyle.StateFlag.State_MouseOver)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(t.accent)
        painter.setBrush(t.accent if hovered else t.accent_soft)
        painter.drawRoundedRect(button, RADIUS, RADIUS)
        painter.setPen(t.on_accent if hovered else t.text)
        painter.drawText(button, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(option.fontMetrics.horizontalAdvance("Serve") + 40, option.fontMetrics.height() * 2 + 12)

    def editorEvent(
        self,
        event: QEvent,
        model: QAbstractItemModel,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> bool:
        text = str(index.data() or "")
        if not text or not isinstance(event, QMouseEvent) or event.type() != QEvent.Type.MouseButtonRelease:
            return super().editorEvent(event, model, option, index)
        if self._button(option, text).contains(event.position().toPoint()):
            self.clicked.emit(model.index(index.row(), index.column()))
            return True
        return super().editorEvent(event, model, option, index)


def make_table_view(proxy: LibraryFilter) -> QTableView:
    view = QTableView()
    view.setObjectName("library_table")
    view.setModel(proxy)
    view.setSortingEnabled(True)
    view.sortByColumn(NAME, Qt.SortOrder.AscendingOrder)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.setMouseTracking(True)  # the row's action button lights up under the pointer
    view.verticalHeader().hide()
    view.setShowGrid(False)
    view.setWordWrap(False)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    view.setItemDelegateForColumn(NAME, NameDelegate(view))
    view.setItemDelegateForColumn(ACTION, ActionDelegate(view))
    header = view.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
    header.setMinimumSectionSize(48)
    view.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    view.verticalHeader().setDefaultSectionSize(view.fontMetrics().height() * 2 + 14)
    return view
