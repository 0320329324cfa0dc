"""Layout checks for one page without the rest of the window: the page inside a frame shaped like the main window
(menu bar, navigation column, status bar), and the app's light or dark theme applied for the length of a test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

NAV_WIDTH = 150  # the main window's navigation column


@contextlib.contextmanager
def window_frame(page) -> Iterator:
    """A QMainWindow like the app's (menus, a navigation column, a status bar) around ``page``, shown at 1024×700;
    afterwards the page is its own (hidden) window again, for its owner to shut down and close."""
    from PySide6.QtWidgets import QHBoxLayout, QListWidget, QMainWindow, QWidget

    frame = QMainWindow()
    for title in ("File", "View", "Help"):
        frame.menuBar().addMenu(title)
    frame.statusBar().showMessage("llama.cpp: stopped    No model loaded    Context: —    Last reply: —")
    nav = QListWidget()
    nav.setFixedWidth(NAV_WIDTH)
    nav.addItems(["Chat", "Models", "Modelfiles", "Batch", "Bench", "Monitor"])
    central = QWidget()
    layout = QHBoxLayout(central)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(nav)
    layout.addWidget(page, 1)
    frame.setCentralWidget(central)
    frame.resize(1024, 700)
    frame.show()
    try:
        yield frame
    finally:
        page.hide()
        page.setParent(None)
        frame.hide()  # not close(): closing the last window would quit the app and stop the test's loop
        frame.deleteLater()


@contextlib.contextmanager
def themed(name: str) -> Iterator[None]:
    """The app's ``light`` or ``dark`` theme (Fusion, palette, style sheet) until the block ends."""
    from PySide6.QtWidgets import QApplication, QStyleFactory

    from app.ui.style.theme import apply_theme

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    style, palette, sheet = app.style().name(), app.palette(), app.styleSheet()
    apply_theme(app, name)
    try:
        yield
    finally:
        app.setStyleSheet(sheet)
        app.setPalette(palette)
        app.setStyle(QStyleFactory.create(style))
