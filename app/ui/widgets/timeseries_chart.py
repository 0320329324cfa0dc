"""A small time-series chart drawn with QPainter (PySide6-Essentials has no QtCharts).

Colours come from the widget's palette, so the chart reads in dark and light themes alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

Points = Sequence[tuple[float, float | None]]
Formatter = Callable[[float], str]


def series_colors(palette: QPalette) -> list[QColor]:
    """Line colours that stand out on the palette's base colour (dark or light)."""
    dark = palette.color(QPalette.ColorRole.Base).lightness() < 128
    named = ("#6cb6ff", "#f0a35e", "#7ee787", "#ff7b9c") if dark else ("#0b62d6", "#c25e00", "#1a7f37", "#cf222e")
    return [palette.color(QPalette.ColorRole.Highlight), *(QColor(c) for c in named[1:])]


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


class ChartWidget(QWidget):
    """Lines over a sliding time window; ``set_series`` replaces what is drawn."""

    def __init__(
        self, title: str, formatter: Formatter, window_s: float = 120.0, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.title = title
        self.formatter = formatter
        self.window_s = window_s
        self.series: list[tuple[str, list[tuple[float, float]]]] = []  # the values shown (gaps left out)
        self.segments: list[list[list[tuple[float, float]]]] = []  # per series, the runs between gaps
        self.y_max: float | None = None  # fixed top (e.g. 1.0 for a fraction); None scales to the data
        self.setMinimumSize(220, 120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(320, 150)

    def set_series(self, series: Sequence[tuple[str, Points]], now_s: float) -> None:
        """Show ``series`` over the window ending at ``now_s``; a None value is a gap in its line."""
        start = now_s - self.window_s
        self._now = now_s
        shown = [(name, [(t, v) for t, v in points if t >= start]) for name, points in series]
        self.series = [(name, [(t, v) for t, v in points if v is not None]) for name, points in shown]
        self.segments = [gap_segments(points) for _name, points in shown]
        self.update()

    def latest_text(self) -> str:
        parts = [f"{name} {self.formatter(points[-1][1])}" for name, points in self.series if points]
        return ", ".join(parts) if parts else "no data"

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        metrics = painter.fontMetrics()
        line_h = metrics.height()
        self._draw_legend(painter, text, line_h)
        plot = QRectF(6, line_h + 6, self.width() - 12, self.height() - line_h - 12)
        grid = QColor(text)
        grid.setAlpha(60)
        painter.setPen(QPen(grid, 1))
        painter.drawRect(plot)
        for i in (1, 2, 3):
            y = plot.top() + plot.height() * i / 4
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
        values = [v for _n, pts in self.series for _t, v in pts]
        top = self.y_max if self.y_max is not None else max(values, default=0.0) * 1.1 or 1.0
        painter.setPen(text)
        painter.drawText(QPointF(plot.left() + 3, plot.top() + line_h), self.formatter(top))
        now = getattr(self, "_now", 0.0)
        for runs, color in zip(self.segments, series_colors(palette), strict=False):
            painter.setPen(QPen(color, 2, Qt.PenStyle.SolidLine))
            for run in runs:
                polygon = QPolygonF(
                    [
                        QPointF(
                            plot.right() - plot.width() * (now - t) / self.window_s,
                            plot.bottom() - plot.height() * min(v / top, 1.0),
                        )
                        for t, v in run
                    ]
                )
                if len(run) == 1:
                    painter.drawPoints(polygon)  # a lone reading between gaps
                else:
                    painter.drawPolyline(polygon)
        painter.end()

    def _draw_legend(self, painter: QPainter, text: QColor, line_h: int) -> None:
        """The title, then each series' latest value in its line colour (the legend)."""
        painter.setPen(text)
        x = 6.0
        title = f"{self.title}:"
        painter.drawText(QPointF(x, line_h), title)
        x += painter.fontMetrics().horizontalAdvance(title + " ")
        for (name, points), color in zip(self.series, series_colors(self.palette()), strict=False):
            label = f"■ {name} {self.formatter(points[-1][1]) if points else 'N/A'}"
            painter.setPen(color)
            painter.drawText(QPointF(x, line_h), label)
            x += painter.fontMetrics().horizontalAdvance(label + "  ")
