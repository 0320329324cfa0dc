"""A small line chart of bench rows against concurrency, drawn with QPainter in the palette's colours.

``BenchChart("throughput")`` plots output tokens/s per engine; ``BenchChart("latency")`` plots end-to-end
latency p50 (solid) and p90 (dashed) per engine. Concurrency levels are evenly spaced on the x axis (they are
usually powers of two); the y axis starts at 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.bench.stats import BenchRow
from app.ui.widgets.palette import mix, muted_color

Series = tuple[str, Qt.PenStyle, list[tuple[int, float]]]  # (label, line style, [(concurrency, value)])
_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 56, 12, 24, 30


def _nice_ceiling(value: float) -> float:
    """The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6, 7.5 or 8 times a power of ten) at least ``value``."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 7.5, 8, 10):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10 * power


def axis_top(largest: float) -> float:
    """The y axis' top: four round ticks that cover ``largest``."""
    return 4 * _nice_ceiling(largest / 4)


class BenchChart(QWidget):
    def __init__(self, kind: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        if kind not in ("throughput", "latency"):
            raise ValueError("kind must be 'throughput' or 'latency'")
        self.kind = kind
        self.rows: list[BenchRow] = []
        self.setMinimumSize(280, 180)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def set_rows(self, rows: Sequence[BenchRow]) -> None:
        self.rows = [r for r in rows if not r.skipped and r.requests]
        self.update()

    def title(self) -> str:
        return "Output tokens/s" if self.kind == "throughput" else "Latency p50 (solid) / p90 (dashed), ms"

    def series(self) -> list[Series]:
        """What the chart draws: one line per engine (throughput), or two per engine (latency p50, p90)."""
        found: list[Series] = []
        for backend in dict.fromkeys(r.backend for r in self.rows):
            rows = sorted((r for r in self.rows if r.backend == backend), key=lambda r: r.concurrency)
            if self.kind == "throughput":
                found.append((backend, Qt.PenStyle.SolidLine, [(r.concurrency, r.output_tokens_per_s) for r in rows]))
                continue
            for pct, style in (("p50", Qt.PenStyle.SolidLine), ("p90", Qt.PenStyle.DashLine)):
                points = [(r.concurrency, v) for r in rows if (v := getattr(r, f"latency_{pct}_ms")) is not None]
                found.append((f"{backend} {pct}", style, points))
        return found

    def _colors(self) -> list[QColor]:
        palette = self.palette()
        highlight = palette.color(QPalette.ColorRole.Highlight)
        link = palette.color(QPalette.ColorRole.Link)
        text = palette.color(QPalette.ColorRole.WindowText)
        return [highlight, mix(link, text, 0.35), mix(highlight, text, 0.55)]

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        painter.setPen(text)
        painter.drawText(QRectF(0, 2, self.width(), _MARGIN_TOP - 4), Qt.AlignmentFlag.AlignCenter, self.title())
        plot = QRectF(_MARGIN_LEFT, _MARGIN_TOP, self.width() - _MARGIN_LEFT - _MARGIN_RIGHT,
                      self.height() - _MARGIN_TOP - _MARGIN_BOTTOM)  # fmt: skip
        series = self.series()
        levels = sorted({c for _label, _style, points in series for c, _v in points})
        if not levels or plot.width() < 20 or plot.height() < 20:
            painter.setPen(muted_color(palette))
            painter.drawText(plot, Qt.AlignmentFlag.AlignCenter, "Run a bench to see the chart")
            painter.end()
            return
        top = axis_top(max(v for _l, _s, points in series for _c, v in points))
        self._axes(painter, plot, levels, top, muted_color(palette), text)

        def at(concurrency: int, value: float) -> QPointF:
            step = plot.width() / max(1, len(levels) - 1)
            x = plot.left() + (levels.index(concurrency) * step if len(levels) > 1 else plot.width() / 2)
            return QPointF(x, plot.bottom() - value / top * plot.height())

        colors = self._colors()
        backends = list(dict.fromkeys(label.split(" ")[0] for label, _s, _p in series))
        for label, style, points in series:
            color = colors[backends.index(label.split(" ")[0]) % len(colors)]
            pen = QPen(color, 2, style)
            painter.setPen(pen)
            dots = [at(c, v) for c, v in points]
            for a, b in itertools.pairwise(dots):
                painter.drawLine(a, b)
            painter.setBrush(color)
            for dot in dots:
                painter.drawEllipse(dot, 3, 3)
        self._legend(painter, plot, backends, colors)
        painter.end()

    def _axes(self, painter: QPainter, plot: QRectF, levels: list[int], top: float, grid: QColor,
              text: QColor) -> None:  # fmt: skip
        metrics = painter.fontMetrics()
        for i in range(5):
            value = top * i / 4
            y = plot.bottom() - plot.height() * i / 4
            painter.setPen(QPen(grid, 1, Qt.PenStyle.DotLine))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(text)
            label = f"{value:,.0f}" if top >= 10 else f"{value:.2g}"
            painter.drawText(QRectF(0, y - 8, _MARGIN_LEFT - 6, 16), Qt.AlignmentFlag.AlignRight, label)
        step = plot.width() / max(1, len(levels) - 1)
        for index, level in enumerate(levels):
            x = plot.left() + (index * step if len(levels) > 1 else plot.width() / 2)
            width = metrics.horizontalAdvance(str(level)) + 8
            painter.drawText(QRectF(x - width / 2, plot.bottom() + 4, width, 16), Qt.AlignmentFlag.AlignCenter,
                             str(level))  # fmt: skip
        painter.drawText(QRectF(plot.left(), plot.bottom() + 14, plot.width(), 16), Qt.AlignmentFlag.AlignRight,
                         "concurrency")  # fmt: skip
        painter.drawLine(plot.bottomLeft(), plot.bottomRight())
        painter.drawLine(plot.bottomLeft(), plot.topLeft())

    def _legend(self, painter: QPainter, plot: QRectF, backends: list[str], colors: list[QColor]) -> None:
        x = plot.left() + 8
        for index, backend in enumerate(backends):
            color = colors[index % len(colors)]
            painter.setPen(QPen(color, 2))
            painter.drawLine(QPointF(x, plot.top() + 8), QPointF(x + 14, plot.top() + 8))
            painter.drawText(QPointF(x + 18, plot.top() + 12), backend)
            x += 30 + painter.fontMetrics().horizontalAdvance(backend)
