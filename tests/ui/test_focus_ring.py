"""Every kind of control shows where the keyboard focus is: a ring in the accent colour along its edge, in the
light and the dark palette, and the control keeps its size when it gets focus."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.style.theme import set_role, tokens
from tests.support.page_frame import themed

BAND = 3  # px along the edge where the ring is drawn


def _controls() -> dict[str, QWidget]:
    accent = QPushButton("Send")
    set_role(accent, "accent")
    tool = QToolButton()
    tool.setText("Tool")
    combo = QComboBox()
    combo.addItems(["Drop the oldest turns", "Stop"])
    nav = QListWidget()
    nav.setObjectName("nav")  # the main window's navigation (no frame of its own)
    nav.addItems(["Chat", "Models"])
    nav.setCurrentRow(0)
    listing = QListWidget()
    listing.addItems(["one", "two"])
    for view in (nav, listing):
        view.setFixedHeight(70)
    return {
        "button": QPushButton("Load"),
        "accent button": accent,
        "tool button": tool,
        "line edit": QLineEdit("text"),
        "text edit": QPlainTextEdit("text"),
        "spin box": QSpinBox(),
        "double spin box": QDoubleSpinBox(),
        "combo box": combo,
        "check box": QCheckBox("Restore the last model"),
        "radio button": QRadioButton("Light"),
        "slider": QSlider(Qt.Orientation.Horizontal),
        "list": listing,
        "navigation": nav,
    }


def _ring_pixels(image: QImage, colour: QColor, inset: QWidget | None = None) -> int:
    """Pixels near ``colour`` in the band along the edge (``inset``: the nav list's current item's rect)."""
    rect = image.rect() if inset is None else inset
    count = 0
    for y in range(rect.top(), rect.bottom() + 1):
        for x in range(rect.left(), rect.right() + 1):
            edge = min(x - rect.left(), rect.right() - x, y - rect.top(), rect.bottom() - y)
            if edge < BAND and _near(image.pixelColor(x, y), colour):
                count += 1
    return count


def _near(a: QColor, b: QColor) -> bool:
    return abs(a.red() - b.red()) + abs(a.green() - b.green()) + abs(a.blue() - b.blue()) < 90


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_control_kind_shows_a_focus_ring(qtbot, theme):
    with themed(theme):
        t = tokens()
        form = QWidget()
        qtbot.addWidget(form)
        layout = QVBoxLayout(form)
        start = QLineEdit("start")
        layout.addWidget(start)
        controls = _controls()
        for control in controls.values():
            layout.addWidget(control)
        form.resize(360, 700)
        form.show()
        form.activateWindow()
        qtbot.waitUntil(form.isActiveWindow)
        missing = []
        for name, control in controls.items():
            start.setFocus(Qt.FocusReason.TabFocusReason)
            qtbot.waitUntil(start.hasFocus)
            size, before = control.size(), control.grab().toImage()
            control.setFocus(Qt.FocusReason.TabFocusReason)
            qtbot.waitUntil(control.hasFocus)
            after = control.grab().toImage()
            ring = t.text if name == "accent button" else t.accent  # on an accent button the ring is the text's
            area = None
            if name == "navigation":  # a frameless list: the current item gets the ring
                assert isinstance(control, QListWidget)
                area = control.visualItemRect(control.item(0)).translated(control.viewport().pos())
            gained = _ring_pixels(after, ring, area) - _ring_pixels(before, ring, area)
            perimeter = 2 * ((area or after.rect()).width() + (area or after.rect()).height())
            if gained < perimeter * 0.6:
                missing.append(f"{name}: {gained} ring pixels of {perimeter}")
            assert control.size() == size, f"{name} changed size when focused"
        assert not missing, missing
