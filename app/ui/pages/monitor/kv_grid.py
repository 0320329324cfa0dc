"""vLLM's KV block pool as a grid of cells: used blocks filled, free ones hollow.

Large pools are aggregated so at most ``MAX_CELLS`` cells are drawn; the caption says how many blocks a
cell stands for.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

MAX_CELLS = 2000


def grid_cells(total_blocks: int, used_blocks: int, max_cells: int = MAX_CELLS) -> tuple[int, int, int]:
    """(cells drawn, cells filled, blocks per cell) for a pool; a partly used cell counts as used."""
    if total_blocks <= 0:
        return 0, 0, 1
    per_cell = max(1, math.ceil(total_blocks / max_cells))
    cells = math.ceil(total_blocks / per_cell)
    used = min(cells, math.ceil(max(0, used_blocks) / per_cell))
    return cells, used, per_cell


class KvGridWidget(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.total_blocks = 0
        self.used_blocks = 0
        self.cells, self.used_cells, self.blocks_per_cell = 0, 0, 1
        self.setMinimumSize(200, 80)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(360, 160)

    def set_pool(self, total_blocks: int, used_blocks: int) -> None:
        self.total_blocks, self.used_blocks = total_blocks, used_blocks
        self.cells, self.used_cells, self.blocks_per_cell = grid_cells(total_blocks, used_blocks)
        self.update()

    def caption(self) -> str:
        if not self.total_blocks:
            return "No vLLM KV pool to show."
        text = f"{self.used_blocks:,} of {self.total_blocks:,} blocks used"
        if self.blocks_per_cell > 1:
            text += f" (each cell = {self.blocks_per_cell:,} blocks; {self.cells:,} cells drawn)"
        return text

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        if self.cells:
            columns = max(1, int(math.sqrt(self.cells * self.width() / max(self.height(), 1))))
            rows = math.ceil(self.cells / columns)
            size = min(self.width() / columns, self.height() / rows)
            used = palette.color(QPalette.ColorRole.Highlight)
            free = QColor(palette.color(QPalette.ColorRole.Text))
            free.setAlpha(40)
            gap = 1.0 if size >= 4 else 0.0
            for i in range(self.cells):
                r, c = divmod(i, columns)
                rect = QRectF(c * size, r * size, size - gap, size - gap)
                painter.fillRect(rect, used if i < self.used_cells else free)
        painter.end()
