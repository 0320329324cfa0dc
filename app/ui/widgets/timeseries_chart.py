"""A time-series chart drawn with QPainter: a time axis with clock ticks, a y axis in the figure's unit, a legend
with each series' latest value, and a crosshair that shows the values at the hovered time.

QPainter rather than a plotting library: pyqtgraph costs ~0.5 s of imports on the Qt thread and more idle memory,
and four small live charts need none of its features. Colours come from the theme's tokens, so the series stay
distinct and readable in the light and the dark palette.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QMouseEvent, QPainter, QPainterPath, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.units import MISSING
from app.ui.style.theme import tokens
from app.ui.widgets.chart_axes import AXES, time_label, time_ticks

Points = Sequence[tuple[float, float | None]]
Formatter = Callable[[float], str]
PAD = 8  # px around the plot
MIN_TICK_GAP_PX = 70  # the narrowest room a time label gets


def series_colors(palette: QPalette) -> list[QColor]:
    """Line colours from the theme: accent, warning, success, error — four hues that stay apart in both
    palettes (no two blues)."""
    t = tokens(palette)
    return [t.accent, t.warning, t.success, t.error, t.muted]


def gap_segments(points: Points) -> list[list[tuple[float, float]]]:
    """The runs of consecutive non-None points: each is drawn as its own line, so a gap stays a gap."""
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for t, v in points:
        if v is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((t, v))
    if current:
        runs.append(current)
    return runs


def nearest(points: Points, t_s: float, within_s: float = float("inf")) -> tuple[float, float | None] | None:
    """The point closest in time to ``t_s`` (points sorted by time) if it lies ``within_s`` of it, else None."""
    if not points:
        return None
    times = [t for t, _v in points]
    i = bisect.bisect_left(times, t_s)
    candidates = [points[j] for j in (i - 1, i) if 0 <= j < len(points)]
    best = min(candidates, key=lambda p: abs(p[0] - t_s))
    return best if abs(best[0] - t_s) <= within_s else None


def reading_spacing(points: Points) -> float:
    """The usual time between readings (the mean over the points); 0 with fewer than two."""
    return (points[-1][0] - points[0][0]) / (len(points) - 1) if len(points) > 1 else 0.0


@dataclass(frozen=True)
class Hover:
    """What the crosshair shows: the time under the pointer and each series' reading there (None: a gap)."""

    t_s: float
    values: tuple[tuple[str, float | None], ...]


class ChartWidget(QWidget):
    """Lines over a sliding time window; ``set_series`` replaces what is drawn. ``axis`` is the y axis' kind
    (``bytes``, ``fraction``, ``count`` or ``number``, see ``chart_axes.AXES``)."""

    def __init__(
        self,
        title: str,
        formatter: Formatter,
        window_s: float = 120.0,
        parent: QWidget | None = None,
        *,
        axis: str = "number",
        empty_text: str = "Waiting for readings…",
    ) -> None:
        super().__init__(parent)
        if axis not in AXES:
            raise ValueError(f"axis must be one of {', '.join(AXES)}")
        self.title = title
        self.formatter = formatter
        self.window_s = window_s
        self.axis = axis
        self.empty_text = empty_text
        self.series: list[tuple[str, list[tuple[float, float]]]] = []  # the values shown (gaps left out)
        self.segments: list[list[list[tuple[float, float]]]] = []  # per series, the runs between gaps
        self._shown: list[tuple[str, list[tuple[float, float | None]]]] = []  # with the gaps, for the hover
        self.y_max: float | None = None  # fixed top (e.g. 1.0 for a fraction); None scales to the data
        self.now_s = 0.0
        self.hover: Hover | None = None
        self.setMouseTracking(True)
        self.setMinimumSize(200, 130)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(360, 180)

    # --- data ---------------------------------------------------------------------------------------------
    def set_series(self, series: Sequence[tuple[str, Points]], now_s: float) -> None:
        """Show ``series`` over the window ending at ``now_s``; a None value is a gap in its line."""
        start = now_s - self.window_s
        self.now_s = now_s
        self._shown = [(name, [(t, v) for t, v in points if t >= start]) for name, points in series]
        self.series = [(name, [(t, v) for t, v in points if v is not None]) for name, points in self._shown]
        self.segments = [gap_segments(points) for _name, points in self._shown]
        if self.hover is not None:
            self.hover = self.hover_at(self.hover.t_s)
        self.update()

    def latest_text(self) -> str:
        parts = [f"{name} {self.formatter(points[-1][1])}" for name, points in self.series if points]
        return ", ".join(parts) if parts else "no data"

    def has_data(self) -> bool:
        return any(points for _name, points in self.series)

    def y_ticks(self) -> list[float]:
        """The y axis' ticks, bottom to top (0 first; the last is the top of the plot)."""
        make, _label = AXES[self.axis]
        if self.y_max is not None:
            return make(self.y_max, 4)
        return make(max((v for _n, pts in self.series for _t, v in pts), default=0.0), 4)

    def y_labels(self) -> list[str]:
        _make, label = AXES[self.axis]
        return [label(v) for v in self.y_ticks()]

    def x_ticks(self) -> tuple[list[float], int]:
        """Tick times over the window and their step (s), as many as the width has room for."""
        width = max(1.0, self.plot_rect().width())
        return time_ticks(self.now_s - self.window_s, self.now_s, max(2, int(width // MIN_TICK_GAP_PX)))

    def x_labels(self) -> list[str]:
        ticks, step = self.x_ticks()
        return [time_label(t, step) for t in ticks]

    # --- geometry -----------------------------------------------------------------------------------------
    def plot_rect(self) -> QRectF:
        metrics = self.fontMetrics()
        label_w = max((metrics.horizontalAdvance(text) for text in self.y_labels()), default=0)
        top = PAD + metrics.height() + metrics.height() // 2 + 6  # the legend's line, and room for the top label
        left = PAD + label_w + 6
        bottom = self.height() - PAD - metrics.height() - 2  # the time labels
        return QRectF(left, top, max(1.0, self.width() - left - PAD), max(1.0, bottom - top))

    def x_at(self, t_s: float) -> float:
        plot = self.plot_rect()
        return plot.right() - plot.width() * (self.now_s - t_s) / self.window_s

    def t_at(self, x: float) -> float:
        plot = self.plot_rect()
        return self.now_s - (plot.right() - x) / max(1.0, plot.width()) * self.window_s

    def y_at(self, value: float, top: float) -> float:
        plot = self.plot_rect()
        return plot.bottom() - plot.height() * min(max(value / top, 0.0), 1.0)

    # --- hover --------------------------------------------------------------------------------------------
    def hover_at(self, t_s: float) -> Hover | None:
        """Each series' reading at ``t_s`` — the nearest within a reading's spacing or a few pixels; None where
        there is none, or it is a gap. None with no data at all."""
        if not self.has_data():
            return None
        pixel_s = self.window_s / max(1.0, self.plot_rect().width())
        values = []
        for name, points in self._shown:
            point = nearest(points, t_s, max(6 * pixel_s, 0.75 * reading_spacing(points)))
            values.append((name, None if point is None else point[1]))
        return Hover(t_s, tuple(values))

    def hover_text(self) -> str:
        """``14:05:31 · RAM 5.6 GiB · engines —`` for the hovered time; "" when nothing is hovered."""
        if self.hover is None:
            return ""
        when = time_label(self.hover.t_s, 1)
        parts = [f"{name} {MISSING if v is None else self.formatter(v)}" for name, v in self.hover.values]
        return " · ".join([when, *parts])

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        x = event.position().x()
        plot = self.plot_rect()
        inside = plot.left() <= x <= plot.right() and self.has_data()
        self.hover = self.hover_at(self.t_at(x)) if inside else None
        self.update()
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        self.hover = None
        self.update()
        super().leaveEvent(event)

    # --- painting -----------------------------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        t = tokens(self.palette())
        painter.fillRect(self.rect(), t.base)
        plot = self.plot_rect()
        colors = series_colors(self.palette())
        self._draw_legend(painter, t.text, t.muted, colors)
        ticks = self.y_ticks()
        top = ticks[-1] or 1.0
        self._draw_axes(painter, plot, ticks, t.border, t.muted)
        if not self.has_data():
            painter.setPen(t.muted)
            painter.drawText(plot, Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, self.empty_text)
        for runs, color in zip(self.segments, colors, strict=False):
            self._draw_runs(painter, runs, color, top, plot)
        if self.hover is not None:
            self._draw_hover(painter, plot, top, colors)
        painter.end()

    def _draw_legend(self, painter: QPainter, text: QColor, muted: QColor, colors: list[QColor]) -> None:
        """The title, then a swatch, the name and the latest value of each series."""
        metrics = painter.fontMetrics()
        baseline = PAD + metrics.ascent()
        bold = QFont(painter.font())
        bold.setBold(True)
        painter.save()
        painter.setFont(bold)
        painter.setPen(text)
        painter.drawText(QPointF(PAD, baseline), self.title)
        x = PAD + painter.fontMetrics().horizontalAdvance(self.title) + 14
        painter.restore()
        for (name, points), color in zip(self.series, colors, strict=False):
            swatch = QRectF(x, baseline - metrics.ascent() / 2 - 4, 10, 8)
            painter.fillRect(swatch, color)
            x += 14
            value = self.formatter(points[-1][1]) if points else MISSING
            painter.setPen(muted)
            painter.drawText(QPointF(x, baseline), name)
            x += metrics.horizontalAdvance(name + " ")
            painter.setPen(text)
            painter.drawText(QPointF(x, baseline), value)
            x += metrics.horizontalAdvance(value) + 14

    def _draw_axes(self, painter: QPainter, plot: QRectF, ticks: list[float], grid: QColor, muted: QColor) -> None:
        metrics = painter.fontMetrics()
        labels = self.y_labels()
        top = ticks[-1] or 1.0
        for value, label in zip(ticks, labels, strict=True):
            y = self.y_at(value, top)
            painter.setPen(QPen(grid, 1, Qt.PenStyle.SolidLine if value == 0 else Qt.PenStyle.DotLine))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(muted)
            box = QRectF(0, y - metrics.height() / 2, plot.left() - 6, metrics.height())
            painter.drawText(box, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, label)
        times, step = self.x_ticks()
        for t_s in times:
            x = self.x_at(t_s)
            painter.setPen(QPen(grid, 1, Qt.PenStyle.DotLine))
            painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
            painter.setPen(muted)
            label = time_label(t_s, step)
            width = metrics.horizontalAdvance(label) + 4
            left = min(max(x - width / 2, plot.left() - 4), self.width() - width)
            painter.drawText(QRectF(left, plot.bottom() + 2, width, metrics.height()), Qt.AlignmentFlag.AlignCenter,
                             label)  # fmt: skip

    def _draw_runs(
        self, painter: QPainter, runs: list[list[tuple[float, float]]], color: QColor, top: float, plot: QRectF
    ) -> None:
        fill = QColor(color)
        fill.setAlpha(36)
        for run in runs:
            points = [QPointF(self.x_at(t), self.y_at(v, top)) for t, v in run]
            if len(points) == 1:
                painter.setPen(QPen(color, 4, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
                painter.drawPoint(points[0])  # a lone reading between gaps
                continue
            area = QPainterPath(QPointF(points[0].x(), plot.bottom()))
            for point in points:
                area.lineTo(point)
            area.lineTo(QPointF(points[-1].x(), plot.bottom()))
            painter.fillPath(area, fill)
            painter.setPen(QPen(color, 2))
            painter.drawPolyline(QPolygonF(points))

    def _draw_hover(self, painter: QPainter, plot: QRectF, top: float, colors: list[QColor]) -> None:
        """A vertical line at the hovered time, a dot on each line and a box with the time and the values."""
        hover = self.hover
        assert hover is not None
        theme = tokens(self.palette())
        x = self.x_at(hover.t_s)
        painter.setPen(QPen(theme.muted, 1, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
        for (_name, value), color in zip(hover.values, colors, strict=False):
            if value is not None:
                painter.setPen(QPen(theme.base, 2))
                painter.setBrush(color)
                painter.drawEllipse(QPointF(x, self.y_at(value, top)), 4, 4)
        lines = self.hover_text().split(" · ")
        metrics = painter.fontMetrics()
        width = max(metrics.horizontalAdvance(line) for line in lines) + 16
        height = metrics.height() * len(lines) + 10
        left = x + 10 if x + 10 + width <= plot.right() else x - 10 - width
        box = QRectF(max(plot.left(), left), plot.top() + 4, width, height)
        painter.setPen(QPen(theme.border, 1))
        painter.setBrush(theme.surface)
        painter.drawRoundedRect(box, 6, 6)
        for index, line in enumerate(lines):
            painter.setPen(theme.text if index == 0 else colors[(index - 1) % len(colors)])
            baseline = box.top() + 5 + metrics.ascent() + index * metrics.height()
            painter.drawText(QPointF(box.left() + 8, baseline), line)
