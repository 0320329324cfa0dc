"""Colours taken from a widget's palette, so text and marks read in dark and light themes alike."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QWidget


def mix(a: QColor, b: QColor, share_of_b: float) -> QColor:
    """``a`` blended towards ``b``."""
    t = share_of_b
    return QColor(
        round(a.red() * (1 - t) + b.red() * t),
        round(a.green() * (1 - t) + b.green() * t),
        round(a.blue() * (1 - t) + b.blue() * t),
    )


def is_dark(palette: QPalette) -> bool:
    """True when the palette's text is lighter than its base: a dark theme."""
    return palette.color(QPalette.ColorRole.Text).lightness() > palette.color(QPalette.ColorRole.Base).lightness()


def error_color(palette: QPalette) -> QColor:
    """A red that reads on the palette's base colour, in dark and light themes."""
    return QColor("#ff8a80") if is_dark(palette) else QColor("#b3261e")


def muted_color(palette: QPalette) -> QColor:
    """Text colour moved towards the base: for notes and secondary figures."""
    return mix(palette.color(QPalette.ColorRole.Text), palette.color(QPalette.ColorRole.Base), 0.4)


def set_text_color(widget: QWidget, color: QColor) -> None:
    """Give a label (or any widget) a text colour through its palette."""
    palette = widget.palette()
    palette.setColor(QPalette.ColorRole.WindowText, color)
    palette.setColor(QPalette.ColorRole.Text, color)
    widget.setPalette(palette)
