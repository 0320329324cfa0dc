"""A line chart of bench rows against concurrency, drawn with QPainter in the theme's colours.

``BenchChart("throughput")`` plots output tokens/s per engine; ``BenchChart("latency")`` plots end-to-end latency
p50 (solid) and p90 (dashed) per engine. Concurrency levels are evenly spaced on the x axis (they are usually
powers of two); the y axis starts at 0 with round ticks. Hovering a level shows every line's value there.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QMouseEvent, QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.bench.stats import BenchRow
from app.ui.style.theme import tokens
from app.ui.widgets.chart_axes import number_label, value_ticks
from app.ui.widgets.timeseries_chart import PAD, series_colors

Series = tuple[str, Qt.PenStyle, list[tuple[int, float]]]  # (label, line style, [(concurrency, value)])
KINDS = {"throughput": ("Output", "tok/s"), "latency": ("Latency p50 / p90 (dashed)", "ms")}


class BenchChart(QWidget):
    def __init__(self, kind: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        if kind not in KINDS:
            raise ValueError("kind must be 'throughput' or 'latency'")
        self.kind = kind
        self.rows: list[BenchRow] = []
        self.hover_level: int | None = None  # the concurrency under the pointer
        self.setMouseTracking(True)
        self.setMinimumSize(200, 150)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(360, 220)

    def set_rows(self, rows: Sequence[BenchRow]) -> None:
        self.rows = [r for r in rows if not r.skipped and r.requests]
        self.hover_level = None
        self.update()

    def title(self) -> str:
        return KINDS[self.kind][0]

    def unit(self) -> str:
        return KINDS[self.kind][1]

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

    def levels(self) -> list[int]:
        return sorted({c for _label, _style, points in self.series() for c, _v in points})

    def y_ticks(self) -> list[float]:
        return value_ticks(max((v for _l, _s, points in self.series() for _c, v in points), default=0.0), 4)

    def y_labels(self) -> list[str]:
        return [number_label(v) for v in self.y_ticks()]

    def backends(self) -> list[str]:
        return list(dict.fromkeys(label.split(" ")[0] for label, _s, _p in self.series()))

    # --- geometry ------------------------------------------------------------------------------------------
    def plot_rect(self) -> QRectF:
        metrics = self.fontMetrics()
        label_w = max((metrics.horizontalAdvance(text) for text in self.y_labels()), default=0)
        top = PAD + 2 * metrics.height() + 6  # the title and the legend
        left = PAD + label_w + 6
        bottom = self.height() - PAD - 2 * metrics.height()  # the levels and "concurrency"
        return QRectF(left, top, max(1.0, self.width() - left - PAD - 6), max(1.0, bottom - top))

    def x_at(self, level: int) -> float:
        plot, levels = self.plot_rect(), self.levels()
        if len(levels) < 2:
            return plot.center().x()
        return plot.left() + levels.index(level) * plot.width() / (len(levels) - 1)

    def y_at(self, value: float) -> float:
        plot, top = self.plot_rect(), self.y_ticks()[-1] or 1.0
        return plot.bottom() - plot.height() * min(max(value / top, 0.0), 1.0)

    # --- hover ---------------------------------------------------------------------------------------------
    def level_at(self, x: float) -> int | None:
        levels = self.levels()
        if not levels:
            return None
        return min(levels, key=lambda level: abs(self.x_at(level) - x))

    def hover_text(self) -> str:
        """``concurrency 8 · llamacpp 41.2 tok/s`` for the hovered level; "" when none."""
        if self.hover_level is None:
            return ""
        parts = [f"concurrency {self.hover_level}"]
        for label, _style, points in self.series():
            value = dict(points).get(self.hover_level)
            if value is not None:
                parts.append(f"{label} {number_label(value) if value >= 10 else f'{value:.2f}'} {self.unit()}")
        return " · ".join(parts)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        x = event.position().x()
        plot = self.plot_rect()
        self.hover_level = self.level_at(x) if plot.left() - 20 <= x <= plot.right() + 20 else None
        self.update()
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        self.hover_level = None
        self.update()
        super().leaveEvent(event)

    # --- painting ------------------------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        t = tokens(self.palette())
        painter.fillRect(self.rect(), t.base)
        bold = QFont(painter.font())
        bold.setBold(True)
        painter.save()
        painter.setFont(bold)
        painter.setPen(t.text)
        painter.drawText(QPointF(PAD, PAD + painter.fontMetrics().ascent()), f"{self.title()}, {self.unit()}")
        painter.restore()
        plot = self.plot_rect()
        levels = self.levels()
        self._axes(painter, plot, levels, t.border, t.muted)
        if not levels:
            painter.setPen(t.muted)
            painter.drawText(plot, Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, "No results yet")
            painter.end()
            return
        colors = series_colors(self.palette())
        backends = self.backends()
        for label, style, points in self.series():
            color = colors[backends.index(label.split(" ")[0]) % len(colors)]
            painter.setPen(QPen(color, 2, style))
            dots = [QPointF(self.x_at(c), self.y_at(v)) for c, v in points]
            painter.drawPolyline(QPolygonF(dots))
            painter.setPen(QPen(t.base, 1.5))
            painter.setBrush(color)
            for dot in dots:
                painter.drawEllipse(dot, 3.5, 3.5)
        self._legend(painter, backends, colors, t.text)
        if self.hover_level is not None:
            self._hover(painter, plot)
        painter.end()

    def _axes(self, painter: QPainter, plot: QRectF, levels: list[int], grid: QColor, muted: QColor) -> None:
        metrics = painter.fontMetrics()
        for value, label in zip(self.y_ticks(), self.y_labels(), strict=True):
            y = self.y_at(value)
            painter.setPen(QPen(grid, 1, Qt.PenStyle.SolidLine if value == 0 else Qt.PenStyle.DotLine))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(muted)
            box = QRectF(0, y - metrics.height() / 2, plot.left() - 6, metrics.height())
            painter.drawText(box, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, label)
        for level in levels:
            x = self.x_at(level)
            width = metrics.horizontalAdvance(str(level)) + 8
            painter.drawText(QRectF(x - width / 2, plot.bottom() + 2, width, metrics.height()),
                             Qt.AlignmentFlag.AlignCenter, str(level))  # fmt: skip
        caption = QRectF(plot.left(), plot.bottom() + 2 + metrics.height(), plot.width(), metrics.height())
        painter.drawText(caption, Qt.AlignmentFlag.AlignRight, "concurrency")

    def _legend(self, painter: QPainter, backends: list[str], colors: list[QColor], text: QColor) -> None:
        metrics = painter.fontMetrics()
        baseline = PAD + metrics.height() + metrics.ascent() + 2
        x = float(PAD)
        painter.setPen(text)
        for index, backend in enumerate(backends):
            painter.fillRect(QRectF(x, baseline - metrics.ascent() / 2 - 4, 10, 8), colors[index % len(colors)])
            painter.drawText(QPointF(x + 14, baseline), backend)
            x += 30 + metrics.horizontalAdvance(backend)

    def _hover(self, painter: QPainter, plot: QRectF) -> None:
        theme = tokens(self.palette())
        assert self.hover_level is not None
        x = self.x_at(self.hover_level)
        painter.setPen(QPen(theme.muted, 1, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
        lines = self.hover_text().split(" · ")
        metrics = painter.fontMetrics()
        width = max(metrics.horizontalAdvance(line) for line in lines) + 16
        height = metrics.height() * len(lines) + 10
        left = x + 10 if x + 10 + width <= plot.right() else x - 10 - width
        box = QRectF(max(plot.left(), left), plot.top() + 4, width, height)
        painter.setPen(QPen(theme.border, 1))
        painter.setBrush(theme.surface)
        painter.drawRoundedRect(box, 6, 6)
        painter.setPen(theme.text)
        for index, line in enumerate(lines):
            painter.drawText(QPointF(box.left() + 8, box.top() + 5 + metrics.ascent() + index * metrics.height()), line)
