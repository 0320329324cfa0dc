"""Small widget factories the panels share: labels, buttons, rows and read-only tables."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QPushButton, QTableWidget, QWidget


def wrapped_label(text: str = "", name: str = "", *, hidden: bool = False, selectable: bool = False) -> QLabel:
    """A word-wrapped label with an object name (for tests and style sheets); ``hidden`` until it has news."""
    label = QLabel(text)
    label.setObjectName(name)
    label.setWordWrap(True)
    if selectable:
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if hidden:
        label.hide()
    return label


def slot_button(text: str, slot: Callable[[], object]) -> QPushButton:
    """A push button that calls ``slot()`` (without Qt's ``checked`` argument)."""
    button = QPushButton(text)
    button.clicked.connect(lambda _checked=False: slot())
    return button


def widget_row(*widgets: QWidget, stretch_at: int = -1) -> QHBoxLayout:
    """The widgets side by side; the one at ``stretch_at`` (if any) takes the spare width."""
    row = QHBoxLayout()
    for index, widget in enumerate(widgets):
        row.addWidget(widget, 1 if index == stretch_at else 0)
    return row


def read_only_table(columns: tuple[str, ...], name: str, stretch: int = 0) -> QTableWidget:
    """A table of whole-row, single selection that cannot be edited; column ``stretch`` fills the width."""
    table = QTableWidget(0, len(columns))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(list(columns))
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.verticalHeader().hide()
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table
