"""The Models panel's table: one row per library entry, sortable by value, filterable across every column."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from app.core.units import format_bytes
from app.services.library.index import LibraryEntry, human_count

COLUMNS = ("Name", "Architecture", "Parameters", "Quantization", "Size", "Context", "Backend", "Source")
SOURCE_LABELS = {"folder": "Model folder", "hf-cache": "Hugging Face cache", "ollama": "Ollama"}
ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1  # the LibraryEntry (column 0)
SORT_ROLE = Qt.ItemDataRole.UserRole + 2  # a number for numeric columns, lower-case text otherwise


def _cells(entry: LibraryEntry) -> list[tuple[str, object]]:
    """(text, sort key) per column."""
    return [
        (entry.name, entry.name.lower()),
        (entry.architecture or "", (entry.architecture or "").lower()),
        (human_count(entry.parameter_count), entry.parameter_count or 0),
        (entry.quantization or "", (entry.quantization or "").lower()),
        (format_bytes(entry.size_bytes), entry.size_bytes),
        (f"{entry.context_length:,}" if entry.context_length else "", entry.context_length or 0),
        ("error" if entry.error else entry.backend, "~" if entry.error else entry.backend.lower()),
        (SOURCE_LABELS.get(entry.source, entry.source), entry.source),
    ]


class LibraryTableModel(QStandardItemModel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(list(COLUMNS))

    def set_entries(self, entries: list[LibraryEntry], error: QColor) -> None:
        self.removeRows(0, self.rowCount())
        for entry in entries:
            row = []
            for column, (text, key) in enumerate(_cells(entry)):
                item = QStandardItem(text)
                item.setEditable(False)
                item.setData(key, SORT_ROLE)
                item.setToolTip(entry.error or entry.path)
                if column in (2, 4, 5):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if entry.error:
                    item.setForeground(error)
                row.append(item)
            row[0].setData(entry, ENTRY_ROLE)
            self.appendRow(row)


class LibraryFilter(QSortFilterProxyModel):
    """Case-insensitive search in every column; sorts by ``SORT_ROLE``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setFilterKeyColumn(-1)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self._words: list[str] = []

    def set_search(self, text: str) -> None:
        """Every word must appear somewhere in the row (name, architecture, quantization, path…)."""
        self.beginFilterChange()
        self._words = text.lower().split()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        if not self._words:
            return True
        model = self.sourceModel()
        texts = [str(model.index(source_row, c, source_parent).data() or "") for c in range(model.columnCount())]
        entry = model.index(source_row, 0, source_parent).data(ENTRY_ROLE)
        if isinstance(entry, LibraryEntry):
            texts.append(entry.path)
        haystack = " ".join(texts).lower()
        return all(word in haystack for word in self._words)


def make_table_view(proxy: LibraryFilter) -> QTableView:
    view = QTableView()
    view.setObjectName("library_table")
    view.setModel(proxy)
    view.setSortingEnabled(True)
    view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.verticalHeader().hide()
    view.setAlternatingRowColors(True)
    view.setWordWrap(False)
    view.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # long HF names keep their file name visible
    header = view.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
    header.resizeSection(0, 260)
    header.setStretchLastSection(True)
    return view
