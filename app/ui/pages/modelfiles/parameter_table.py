"""The PARAMETER table: typed editors for Ollama's options, defaults and help, Ollama's own error per row."""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.modelfile.params import OLLAMA_OPTIONS, OllamaOption, format_params
from app.core.modelfile.parser import ModelfileError
from app.core.units import format_sampling_value
from app.ui.widgets.palette import error_color
from app.ui.widgets.sampling_spin import sampling_spin

NAME, VALUE, DEFAULT, CHECK = range(4)
FLOAT_DECIMALS = 4  # a PARAMETER value typed with more keeps its text unless changed in the spin box
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_BOOLS = {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}

AnyIndex = QModelIndex | QPersistentModelIndex
EDIT_TRIGGERS = (
    QAbstractItemView.EditTrigger.DoubleClicked
    | QAbstractItemView.EditTrigger.SelectedClicked
    | QAbstractItemView.EditTrigger.EditKeyPressed
    | QAbstractItemView.EditTrigger.AnyKeyPressed
)
NO_EDITS = QAbstractItemView.EditTrigger.NoEditTriggers


def format_default(option: OllamaOption) -> str:
    value = option.default
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_sampling_value(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _as_int(raw: str) -> int | None:
    if _INT.fullmatch(raw.strip()):
        value = int(raw)
        return value if INT_MIN <= value <= INT_MAX else None
    return None


def _as_float(raw: str) -> float | None:
    return float(raw) if _FLOAT.fullmatch(raw.strip()) else None


def _as_bool(raw: str) -> bool | None:
    return _BOOLS.get(raw.strip().lower())


class _Delegate(QStyledItemDelegate):
    """A combo of option names for the name, and an editor of the option's type for the value.

    A value that does not read as its type is edited as text, so nothing typed is lost.
    """

    def createEditor(self, parent: QWidget, option: QStyleOptionViewItem, index: AnyIndex) -> QWidget:
        if index.column() == NAME:
            combo = QComboBox(parent)
            combo.setEditable(True)
            combo.addItems(list(OLLAMA_OPTIONS))
            return combo
        known = OLLAMA_OPTIONS.get(str(index.model().index(index.row(), NAME).data() or ""))
        raw = str(index.data() or "")
        kind = known.kind if known else ""
        editor: QWidget
        if kind == "int" and _as_int(raw) is not None:
            editor = QSpinBox(parent)
            editor.setRange(INT_MIN, INT_MAX)
        elif kind == "float" and _as_float(raw) is not None:
            editor = sampling_spin(-1e9, 1e9, 0.05)
            editor.setParent(parent)
            editor.setDecimals(FLOAT_DECIMALS)
        elif kind == "bool" and _as_bool(raw) is not None:
            editor = QCheckBox(parent)
            editor.setAutoFillBackground(True)
            editor.toggled.connect(lambda on: editor.setText("true" if on else "false"))
        else:
            editor = QLineEdit(parent)
        return editor

    def setEditorData(self, editor: QWidget, index: AnyIndex) -> None:
        raw = str(index.data() or "")
        if isinstance(editor, QComboBox):
            editor.setCurrentText(raw)
        elif isinstance(editor, QSpinBox):
            editor.setValue(_as_int(raw) or 0)
        elif isinstance(editor, QDoubleSpinBox):
            editor.setValue(_as_float(raw) or 0.0)
        elif isinstance(editor, QCheckBox):
            editor.setChecked(bool(_as_bool(raw)))
            editor.setText("true" if editor.isChecked() else "false")
        elif isinstance(editor, QLineEdit):
            editor.setText(raw)

    def setModelData(self, editor: QWidget, model: QAbstractItemModel, index: AnyIndex) -> None:
        old = str(index.data() or "")
        if isinstance(editor, QComboBox):
            text = editor.currentText().strip()
        elif isinstance(editor, QSpinBox):
            text = old if _as_int(old) == editor.value() else str(editor.value())
        elif isinstance(editor, QDoubleSpinBox):
            same = _as_float(old) is not None and round(_as_float(old) or 0.0, FLOAT_DECIMALS) == editor.value()
            text = old if same else format_sampling_value(editor.value(), FLOAT_DECIMALS)
        elif isinstance(editor, QCheckBox):
            text = old if _as_bool(old) == editor.isChecked() else ("true" if editor.isChecked() else "false")
        else:
            assert isinstance(editor, QLineEdit)
            text = editor.text()
        if text != old:
            model.setData(index, text)


class ParameterTable(QWidget):
    """Rows of (name, raw value); ``changed`` fires when the user edits, adds or removes a row."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("parameter_table")
        self.table.setHorizontalHeaderLabels(["Parameter", "Value", "Default", "Check"])
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(EDIT_TRIGGERS)
        self.table.setItemDelegate(_Delegate(self.table))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(CHECK, QHeaderView.ResizeMode.Stretch)
        self.table.setColumnWidth(NAME, 150)
        self.table.setColumnWidth(VALUE, 110)
        self.table.setColumnWidth(DEFAULT, 80)
        self.help = QLabel()
        self.help.setObjectName("parameter_help")
        self.help.setWordWrap(True)
        self.help.setTextFormat(Qt.TextFormat.RichText)
        self.add_button = QPushButton("Add")
        self.remove_button = QPushButton("Remove")
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.help)
        layout.addLayout(buttons)
        self._problems: dict[int, str] = {}
        self._loading = False
        self.add_button.clicked.connect(self.add_row)
        self.remove_button.clicked.connect(self.remove_row)
        self.table.itemChanged.connect(self._item_changed)
        self.table.currentCellChanged.connect(lambda *_: self._show_help())
        self._show_help()

    def set_read_only(self, read_only: bool) -> None:
        """Rows can be selected (their help shows) but not edited, added or removed."""
        self.table.setEditTriggers(NO_EDITS if read_only else EDIT_TRIGGERS)
        self.add_button.setEnabled(not read_only)
        self.remove_button.setEnabled(not read_only)

    # --- data -------------------------------------------------------------------------------------
    def set_parameters(self, pairs: list[tuple[str, str]]) -> None:
        self._loading = True
        self.table.setRowCount(0)
        for name, value in pairs:
            self._append(name, value)
        self._loading = False
        self._validate()

    def parameters(self) -> list[tuple[str, str]]:
        return [(self._text(row, NAME), self._text(row, VALUE)) for row in range(self.table.rowCount())]

    def problem(self, row: int) -> str:
        """Ollama's error for the row's parameter ('' when it is fine)."""
        return self._problems.get(row, "")

    def problems(self) -> dict[int, str]:
        return dict(self._problems)

    def set_value(self, row: int, value: str) -> None:
        """Set a row's raw value as if typed (for tests and scripting)."""
        item = self.table.item(row, VALUE)
        assert item is not None
        item.setText(value)

    # --- rows -------------------------------------------------------------------------------------
    def add_row(self) -> None:
        used = {name for name, _ in self.parameters()}
        name = next((n for n in OLLAMA_OPTIONS if n not in used), "stop")
        self._loading = True
        self._append(name, format_default(OLLAMA_OPTIONS[name]) if name in OLLAMA_OPTIONS else "")
        self._loading = False
        row = self.table.rowCount() - 1
        self.table.setCurrentCell(row, NAME)
        self._validate()
        self.changed.emit()

    def remove_row(self) -> None:
        row = self.table.currentRow()
        if row < 0:
            return
        self.table.removeRow(row)
        self._validate()
        self.changed.emit()

    def _append(self, name: str, value: str) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        for column, text in ((NAME, name), (VALUE, value)):
            self.table.setItem(row, column, QTableWidgetItem(text))
        for column in (DEFAULT, CHECK):
            item = QTableWidgetItem()
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
            self.table.setItem(row, column, item)

    def _text(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return item.text() if item is not None else ""

    def _item_changed(self, item: QTableWidgetItem) -> None:
        if self._loading or item.column() not in (NAME, VALUE):
            return
        self._validate()
        self.changed.emit()

    # --- checking ---------------------------------------------------------------------------------
    def _validate(self) -> None:
        """Run Ollama's type rules per parameter name and mark the rows it refuses."""
        grouped: dict[str, list[str]] = {}
        for name, value in self.parameters():
            grouped.setdefault(name, []).append(value)
        verdicts: dict[str, tuple[str, str]] = {}
        for name, values in grouped.items():
            try:
                _typed, warnings = format_params({name: values})
            except ModelfileError as exc:
                verdicts[name] = ("error", str(exc))
            else:
                verdicts[name] = ("warning", "; ".join(str(w) for w in warnings)) if warnings else ("ok", "")
        self._problems = {}
        self._loading = True
        red = error_color(self.palette())
        style = self.style()
        for row, (name, _value) in enumerate(self.parameters()):
            kind, text = verdicts[name]
            option = OLLAMA_OPTIONS.get(name)
            default = self.table.item(row, DEFAULT)
            check = self.table.item(row, CHECK)
            assert default is not None and check is not None
            default.setText(format_default(option) if option else "")
            check.setText(text or "ok")
            check.setToolTip(text)
            tip = self._help_html(name)
            for column in (NAME, VALUE, DEFAULT):
                cell = self.table.item(row, column)
                if cell is not None:
                    cell.setToolTip(tip)
            if kind == "error":
                self._problems[row] = text
                check.setForeground(red)
                check.setIcon(style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical))
            else:
                check.setData(Qt.ItemDataRole.ForegroundRole, None)
                icon = QStyle.StandardPixmap.SP_MessageBoxWarning if kind == "warning" else None
                check.setIcon(style.standardIcon(icon) if icon is not None else QIcon())
        self._loading = False
        self._show_help()

    def _help_html(self, name: str) -> str:
        option = OLLAMA_OPTIONS.get(name)
        if option is None:
            return f"<b>{html.escape(name)}</b> is not an Ollama parameter."
        default = format_default(option)
        facts = [option.kind] + ([f"default {html.escape(default)}"] if default else [])
        if option.load_time:
            facts.append("applied when the model loads")
        return f"<b>{html.escape(name)}</b> ({', '.join(facts)}): {html.escape(option.help)}"

    def _show_help(self) -> None:
        row = self.table.currentRow()
        if row < 0 or row >= self.table.rowCount():
            count = len(self._problems)
            self.help.setText(
                f"{count} parameter(s) Ollama would refuse." if count else "Select a row to see what it does."
            )
            return
        text = self._help_html(self._text(row, NAME))
        if row in self._problems:
            red = error_color(self.palette()).name()
            text += f'<br><span style="color:{red}">{html.escape(self._problems[row], quote=False)}</span>'
        self.help.setText(text)
