"""Small building blocks of the Settings page: fields, hints, and a float field that keeps its exact value."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.ui.style.theme import SPACE_L, SPACE_M, SPACE_S, SPACE_XL, set_role

INT_MAX = 2**31 - 1
FIELD_WIDTH = 170  # spin boxes and combos line up at this width (wider when their text needs it)


def spin(minimum: int, maximum: int, special: str = "", tip: str = "") -> QSpinBox:
    """An integer box; ``special`` is shown instead of the minimum, which then means "none"/"automatic"."""
    box = QSpinBox()
    box.setRange(minimum, maximum)
    box.setSpecialValueText(special)
    box.setToolTip(tip)
    box.setMinimumWidth(FIELD_WIDTH)
    return box


def optional(box: QSpinBox) -> int | None:
    """The box's value, or None when it shows its special text."""
    return None if box.value() == box.minimum() and box.specialValueText() else box.value()


def combo(items: tuple[str, ...], editable: bool = False, tip: str = "") -> QComboBox:
    box = QComboBox(editable=editable)
    box.addItems(list(items))
    box.setToolTip(tip)
    box.setMinimumWidth(FIELD_WIDTH)
    return box


def set_combo(box: QComboBox, current: str) -> None:
    """Show ``current``; an unknown stored value is added rather than silently changed."""
    if box.findText(current) < 0:
        box.addItem(current)
    box.setCurrentText(current)


def check(text: str, tip: str = "") -> QCheckBox:
    box = QCheckBox(text)
    box.setToolTip(tip)
    return box


def line(placeholder: str = "", tip: str = "") -> QLineEdit:
    edit = QLineEdit()
    edit.setPlaceholderText(placeholder)
    edit.setToolTip(tip)
    return edit


class Hint(QLabel):
    """A wrapped label whose height is the height its text needs at its current width (a plain wrapped QLabel
    asks for the height of a much narrower one, leaving gaps in a form)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.setWordWrap(True)

    def _fitted(self, size: QSize) -> QSize:
        if self.width() > 0:
            size.setHeight(self.heightForWidth(self.width()))
        return size

    def sizeHint(self) -> QSize:
        return self._fitted(super().sizeHint())

    def minimumSizeHint(self) -> QSize:
        return self._fitted(super().minimumSizeHint())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()


def hint(text: str) -> QLabel:
    """A muted, wrapped sentence under a field: what it does, in plain words."""
    label = Hint(text)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    set_role(label, "muted")
    return label


def read_only_path(path: object) -> QLineEdit:
    """A path the user may read and copy but not change (it shrinks and scrolls instead of widening the page)."""
    edit = QLineEdit(str(path))
    edit.setReadOnly(True)
    edit.setToolTip(str(path))
    edit.setCursorPosition(0)
    return edit


class ExactFloat:
    """A float setting in a spin box: the stored value comes back exactly unless the user changes the box
    (the box rounds to its decimals, a settings file may hold more)."""

    def __init__(self, box: QDoubleSpinBox) -> None:
        self.box = box
        self._shown, self._stored = box.value(), box.value()

    def set(self, value: float) -> None:
        self.box.setValue(value)
        self._shown, self._stored = self.box.value(), value

    def value(self) -> float:
        return self._stored if self.box.value() == self._shown else self.box.value()


class PathField(QWidget):
    """A line edit with a Browse… button that opens a non-blocking file or folder dialog."""

    def __init__(self, placeholder: str, title: str, folder: bool, tip: str = "") -> None:
        super().__init__()
        self.edit = line(placeholder, tip)
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self.choose)
        self._title, self._folder = title, folder
        self._dialog: QFileDialog | None = None
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit, 1)
        row.addWidget(self.browse)

    def choose(self) -> None:
        self._dialog = QFileDialog(self, self._title, self.edit.text().strip())
        mode = QFileDialog.FileMode.Directory if self._folder else QFileDialog.FileMode.ExistingFile
        self._dialog.setFileMode(mode)
        self._dialog.fileSelected.connect(lambda path: self.edit.setText(path) if path else None)
        self._dialog.open()


class SectionBody(QWidget):
    """One section's content: a title, a sentence, then one form whose groups start with a heading row (one form,
    so the labels line up down the whole section)."""

    def __init__(self, title: str, summary: str) -> None:
        super().__init__()
        self.setObjectName("settings_section_body")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(SPACE_XL, SPACE_L, SPACE_XL, SPACE_L)
        self._layout.setSpacing(SPACE_S)
        heading = QLabel(title)
        set_role(heading, "title")
        self._layout.addWidget(heading)
        self._layout.addWidget(hint(summary))
        self.form = QFormLayout()
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        self.form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.form.setHorizontalSpacing(SPACE_L)
        self.form.setVerticalSpacing(SPACE_S)
        self._layout.addLayout(self.form)

    def group(self, title: str = "") -> QFormLayout:
        """Start a group of rows under ``title``; returns the section's form."""
        if title:
            label = QLabel(title)
            set_role(label, "section")
            if self.form.rowCount():
                label.setContentsMargins(0, SPACE_M, 0, 0)
            self.form.addRow(label)
        return self.form

    def add(self, widget: QWidget) -> None:
        """A widget across the whole width, below the rows so far."""
        self.form.addRow(widget)

    def finish(self) -> None:
        self._layout.addStretch(1)


def connect_edits(callback: Callable[[], None], *widgets: QWidget) -> None:
    """Call ``callback`` whenever any of these fields changes."""
    for widget in widgets:
        if isinstance(widget, QDoubleSpinBox | QSpinBox):
            widget.valueChanged.connect(lambda _v: callback())
        elif isinstance(widget, QCheckBox):
            widget.toggled.connect(lambda _on: callback())
        elif isinstance(widget, QComboBox):
            widget.currentTextChanged.connect(lambda _t: callback())
        elif isinstance(widget, QLineEdit):
            widget.textChanged.connect(lambda _t: callback())
