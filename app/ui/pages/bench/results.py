"""The Bench page's results: the table with its copy buttons above the throughput and latency charts."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.bench.stats import COLUMNS, BenchRow, cell
from app.ui.pages.bench.chart import BenchChart
from app.ui.style.icons import icon
from app.ui.widgets.factories import slot_button, widget_row


class BenchResults(QSplitter):
    """A vertical splitter: table (and Copy as Markdown / CSV) above the two charts side by side."""

    def __init__(self, copy_markdown: Callable[[], object], copy_csv: Callable[[], object]) -> None:
        super().__init__(Qt.Orientation.Vertical)
        self.setObjectName("bench_results_split")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("bench_results")
        self.table.setHorizontalHeaderLabels([title for _key, title in COLUMNS])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMinimumHeight(70)
        self.copy_markdown_button = slot_button("Copy as Markdown", copy_markdown)
        self.copy_csv_button = slot_button("Copy as CSV", copy_csv)
        for button in (self.copy_markdown_button, self.copy_csv_button):
            button.setIcon(icon("copy"))
        self.throughput_chart, self.latency_chart = BenchChart("throughput"), BenchChart("latency")
        table_box = QWidget()
        box = QVBoxLayout(table_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.table, 1)
        box.addLayout(widget_row(self.copy_markdown_button, self.copy_csv_button, QWidget(), stretch_at=2))
        charts = QSplitter()
        charts.addWidget(self.throughput_chart)
        charts.addWidget(self.latency_chart)
        self.addWidget(table_box)
        self.addWidget(charts)
        self.setStretchFactor(0, 2)
        self.setStretchFactor(1, 3)

    def show_rows(self, rows: Sequence[BenchRow]) -> None:
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            for column, (key, _title) in enumerate(COLUMNS):
                self.table.setItem(index, column, QTableWidgetItem(cell(row, key)))
        self.throughput_chart.set_rows(rows)
        self.latency_chart.set_rows(rows)
