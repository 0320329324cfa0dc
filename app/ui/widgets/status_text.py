"""A status line under a form: what happened, in the error colour when it failed, muted for a note."""

from __future__ import annotations

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel

from app.ui.widgets.palette import error_color, muted_color, set_text_color


def show_status(label: QLabel, text: str, error: bool = False, muted: bool = False) -> None:
    """Show ``text`` in ``label`` (hidden when empty), coloured as an error, a muted note, or plain text."""
    label.setText(text)
    label.setVisible(bool(text))
    palette = (label.parentWidget() or label).palette()  # not the label's own: it holds the last colour set
    color = error_color(palette) if error else muted_color(palette) if muted else None
    set_text_color(label, color or palette.color(QPalette.ColorRole.WindowText))
