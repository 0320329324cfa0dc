"""The Bench page's saved runs: the list (newest first), Show one, Compare two (after/before ratios)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.services.bench.store import BenchStore, BenchStoreError, SavedRun
from app.ui.style.theme import SPACE_M, SPACE_S, set_role
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button


class BenchSavedRuns(QFrame):
    """Reads the store off the Qt thread; ``run_loaded`` carries a saved run to show, ``failed`` a reason,
    ``listed`` how many runs the store holds after each refresh."""

    run_loaded = Signal(dict)
    failed = Signal(str)
    listed = Signal(int)

    def __init__(self, store: BenchStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "card")
        self.setObjectName("bench_saved_card")
        self.setMinimumWidth(180)
        self.store = store
        title = QLabel("Saved runs")
        set_role(title, "section")
        self.list = QListWidget()
        self.list.setObjectName("bench_saved_runs")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setWordWrap(False)
        self.list.setSpacing(3)
        self.list.setAlternatingRowColors(True)
        self._names: dict[str, str] = {}  # run id → "backend · model (saved at)"
        self.list.itemSelectionChanged.connect(self._selection_changed)
        self.show_button = slot_button("Show", self.show_selected)
        self.compare_button = slot_button("Compare", self.compare_selected)
        self.compare_button.setToolTip("After/before ratios of the two selected runs")
        self.compare_label = QLabel()
        self.compare_label.setObjectName("bench_compare")
        self.compare_label.setWordWrap(True)
        self.compare_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.compare_label.hide()
        self.list.setToolTip("Select one to show it, two to compare them (Ctrl+click)")
        buttons = QHBoxLayout()
        buttons.addWidget(self.show_button)
        buttons.addWidget(self.compare_button)
        buttons.addStretch(1)
        box = QVBoxLayout(self)
        box.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_M)
        box.addWidget(title)
        box.addWidget(self.list, 1)
        box.addLayout(buttons)
        box.addWidget(self.compare_label)
        self._selection_changed()

    async def refresh(self) -> list[SavedRun]:
        runs = await asyncio.get_running_loop().run_in_executor(None, self.store.runs)
        self.list.clear()
        for run in runs:
            item = QListWidgetItem(_two_lines(run))
            item.setToolTip(run.label())
            self._names[run.id] = f"{run.backend} · {Path(run.model).name or run.model} ({run.saved_at})"
            item.setData(Qt.ItemDataRole.UserRole, run.id)
            self.list.addItem(item)
        self._selection_changed()
        self.listed.emit(len(runs))
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
        name = self._names.get
        lines = [f"{name(after_id, after_id)} against {name(before_id, before_id)}:"]
        for r in ratios:
            tps, p90 = r["output_tokens_per_s_ratio"], r["latency_p90_ms_ratio"]
            lines.append(f"{r['backend']} ×{r['concurrency']}: tok/s {_ratio(tps)}, latency p90 {_ratio(p90)}")
        if not ratios:
            lines.append("The two runs share no engine and concurrency.")
        self.compare_label.setText("\n".join(lines))
        self.compare_label.show()
        return ratios


def _two_lines(run: SavedRun) -> str:
    """``vllm · tiny`` over ``2026-12-01 15:39 · best 610.0 tok/s``."""
    best = f"best {run.best_tokens_per_s:,.1f} tok/s" if run.best_tokens_per_s is not None else "no result"
    return f"{run.backend} · {Path(run.model).name or run.model}\n{run.saved_at} · {best}"


def _ratio(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else "—"
