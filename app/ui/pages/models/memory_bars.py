"""Horizontal stacked bars: what a model needs (weights / KV cache / compute) against the memory a device has.

Each segment has its own colour from the palette's tokens (weights: accent blue, KV cache: green, compute:
amber), distinct in dark and light themes alike; a bar that needs more than the device has shows the overflow in
the error red.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.units import format_bytes
from app.ui.style.theme import tokens
from app.ui.widgets.palette import error_color

SEGMENT_NAMES = ("Weights", "KV cache", "Compute")
_ROW_HEIGHT = 22
_LABEL_WIDTH = 64
_GAP = 8


@dataclass(frozen=True)
class BarRow:
    """One device: its label, the bytes per segment (in ``SEGMENT_NAMES`` order), and its capacity."""

    label: str
    segment_bytes: tuple[int, int, int]
    capacity_bytes: int | None  # None: unknown (no bar outline, no overflow)

    @property
    def needed_bytes(self) -> int:
        return sum(self.segment_bytes)


def segment_colors(palette: QPalette) -> tuple[QColor, QColor, QColor]:
    """Weights, KV cache, compute: three hues, not three shades of one."""
    t = tokens(palette)
    return t.accent, t.success, t.warning


class MemoryBars(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[BarRow] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setObjectName("memory_bars")

    def set_rows(self, rows: list[BarRow]) -> None:
        self.rows = list(rows)
        self.setToolTip("\n".join(self.describe()))
        self.setAccessibleDescription(" ".join(self.describe()))
        self.updateGeometry()
        self.update()

    def describe(self) -> list[str]:
        """The bars in words (tooltip, screen readers, tests)."""
        lines = []
        for row in self.rows:
            parts = ", ".join(f"{n} {format_bytes(b)}" for n, b in zip(SEGMENT_NAMES, row.segment_bytes, strict=True))
            have = f" of {format_bytes(row.capacity_bytes)}" if row.capacity_bytes is not None else ""
            lines.append(f"{row.label}: {format_bytes(row.needed_bytes)}{have} ({parts})")
        return lines

    def sizeHint(self) -> QSize:
        return QSize(320, (len(self.rows) + 1) * (_ROW_HEIGHT + _GAP))

    def minimumSizeHint(self) -> QSize:
        return QSize(200, self.sizeHint().height())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        colors = segment_colors(palette)
        text_color = palette.color(QPalette.ColorRole.WindowText)
        bar_width = max(40, self.width() - _LABEL_WIDTH - 4)
        scale = max([1, *(max(r.needed_bytes, r.capacity_bytes or 0) for r in self.rows)])
        for index, row in enumerate(self.rows):
            top = index * (_ROW_HEIGHT + _GAP)
            painter.setPen(text_color)
            painter.drawText(QRectF(0, top, _LABEL_WIDTH - 4, _ROW_HEIGHT), Qt.AlignmentFlag.AlignVCenter, row.label)
            self._paint_bar(painter, row, QRectF(_LABEL_WIDTH, top, bar_width, _ROW_HEIGHT), scale, colors)
        self._paint_legend(painter, len(self.rows) * (_ROW_HEIGHT + _GAP), colors, text_color)
        painter.end()

    def _paint_bar(self, painter: QPainter, row: BarRow, rect: QRectF, scale: int, colors: tuple[QColor, ...]) -> None:
        x = rect.left()
        for n_bytes, color in zip(row.segment_bytes, colors, strict=True):
            width = rect.width() * n_bytes / scale
            painter.fillRect(QRectF(x, rect.top() + 3, width, rect.height() - 6), color)
            x += width
        if row.capacity_bytes is None:
            return
        capacity_x = rect.left() + rect.width() * row.capacity_bytes / scale
        outline = self.palette().color(QPalette.ColorRole.WindowText)
        painter.setPen(QPen(outline, 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(QRectF(rect.left(), rect.top() + 1, capacity_x - rect.left(), rect.height() - 2))
        if row.needed_bytes > row.capacity_bytes:
            painter.fillRect(QRectF(capacity_x, rect.top(), x - capacity_x, 3), error_color(self.palette()))

    def _paint_legend(self, painter: QPainter, top: int, colors: tuple[QColor, ...], text: QColor) -> None:
        x = float(_LABEL_WIDTH)
        metrics = painter.fontMetrics()
        for name, color in zip(SEGMENT_NAMES, colors, strict=True):
            painter.fillRect(QRectF(x, top + 6, 10, 10), color)
            painter.setPen(text)
            painter.drawText(QRectF(x + 14, top, 200, _ROW_HEIGHT), Qt.AlignmentFlag.AlignVCenter, name)
            x += 14 + metrics.horizontalAdvance(name) + 16
