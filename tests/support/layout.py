"""Layout checks shared by the UI tests: nothing may force the window beyond a small laptop screen."""

from __future__ import annotations

SMALL_SCREEN = (1024, 700)


def assert_fits(widget, size: tuple[int, int] = SMALL_SCREEN) -> None:
    """The top-level window of ``widget`` can be as small as ``size``: its minimum size hint (and minimum size)
    fit. Names the widgets whose own minimum is widest/tallest when it fails."""
    from PySide6.QtWidgets import QWidget

    window = widget.window()
    hint = window.minimumSizeHint().expandedTo(window.minimumSize())
    if hint.width() <= size[0] and hint.height() <= size[1]:
        return
    culprits = sorted(
        ((w.minimumSizeHint().width(), w.minimumSizeHint().height(), type(w).__name__, w.objectName())
         for w in window.findChildren(QWidget) if w.isVisible()),
        reverse=True,
    )[:6]  # fmt: skip
    raise AssertionError(f"window minimum {hint.width()}x{hint.height()} exceeds {size[0]}x{size[1]}: {culprits}")
