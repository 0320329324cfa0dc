"""Measuring a read-only text widget's height for a width, as it will be drawn."""

from __future__ import annotations

import math

from PySide6.QtWidgets import QTextEdit


def fitted_height(edit: QTextEdit, width: int) -> int:
    """The height ``edit``'s text takes laid out ``width`` wide (the width it is then given).

    The widget takes that width before its document is measured: a QTextEdit lays its document out for its own
    width, and a hidden one that was resized puts its old width back over one set on the document (seen on a
    restored chat, measured while the page was hidden: the text was drawn wrapped for the new width in a row
    measured for the old one, its last line cut off).
    """
    width = max(1, width)
    if edit.width() != width:
        edit.resize(width, max(1, edit.height()))
    document = edit.document()
    if document.textWidth() != width:  # setting it, even unchanged, lays the whole text out again
        document.setTextWidth(width)
    return math.ceil(document.size().height())
