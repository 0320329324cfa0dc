"""The Bench page's saved runs: the list (newest first), Show one, Compare two (after/before ratios)."""

from __future__ import annotations

import asyncio
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.services.bench.store import BenchStore, BenchStoreError, SavedRun
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button


class BenchSavedRuns(QGroupBox):
    """Reads the store off the Qt thread; ``run_loaded`` carries a saved run to show, ``failed`` a reason."""

    run_loaded = Signal(dict)
    failed = Signal(str)

    def __init__(self, store: BenchStore, parent: QWidget | None = None) -> None:
        super().__init__("Saved runs", parent)
        self.store = store
        self.list = QListWidget()
        self.list.setObjectName("bench_saved_runs")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.itemSelectionChanged.connect(self._selection_changed)
        self.show_button = slot_button("Show", self.show_selected)
        self.compare_button = slot_button("Compare two", self.compare_selected)
        self.compare_label = QLabel()
        self.compare_label.setObjectName("bench_compare")
        self.compare_label.setWordWrap(True)
        self.compare_label.hide()
        buttons = QHBoxLayout()
        buttons.addWidget(self.show_button)
        buttons.addWidget(self.compare_button)
        buttons.addStretch(1)
        box = QVBoxLayout(self)
        box.addWidget(self.list, 1)
        box.addLayout(buttons)
        box.addWidget(self.compare_label)
        self._selection_changed()

    async def refresh(self) -> list[SavedRun]:
        runs = await asyncio.get_running_loop().run_in_executor(None, self.store.runs)
        self.list.clear()
        for run in runs:
            item = QListWidgetItem(run.label())
            item.setData(Qt.ItemDataRole.UserRole, run.id)
            self.list.addItem(item)
        self._selection_changed()
        return runs

    def selected_ids(self) -> list[str]:
        return [str(item.data(Qt.ItemDataRole.UserRole)) for item in self.list.selectedItems()]

    def _selection_changed(self) -> None:
        count = len(self.selected_ids())
        self.show_button.setEnabled(count == 1)
        self.compare_button.setEnabled(count == 2)

    def show_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 1:
            spawn(self.load(ids[0]), "bench: show saved run")

    async def load(self, run_id: str) -> dict[str, Any] | None:
        try:
            run = await asyncio.get_running_loop().run_in_executor(None, self.store.load, run_id)
        except BenchStoreError as exc:
            self.failed.emit(str(exc))
            return None
        self.run_loaded.emit(run)
        return run

    def compare_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 2:
            spawn(self.compare(*sorted(ids)), "bench: compare runs")  # ids start with the time: older first

    async def compare(self, before_id: str, after_id: str) -> list[dict[str, Any]]:
        """Show after/before ratios of the two saved runs, per engine and concurrency."""
        try:
            ratios = await asyncio.get_running_loop().run_in_executor(None, self.store.compare, before_id, after_id)
        except BenchStoreError as exc:
            self.failed.emit(str(exc))
            return []
        lines = [f"{after_id} against {before_id}:"]
        for r in ratios:
            tps, p90 = r["output_tokens_per_s_ratio"], r["latency_p90_ms_ratio"]
            lines.append(f"{r['backend']} ×{r['concurrency']}: tok/s {_ratio(tps)}, latency p90 {_ratio(p90)}")
        if not ratios:
            lines.append("The two runs share no engine and concurrency.")
        self.compare_label.setText("\n".join(lines))
        self.compare_label.show()
        return ratios


def _ratio(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else "—"
