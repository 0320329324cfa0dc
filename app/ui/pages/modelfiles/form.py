"""The Modelfile form: FROM, SYSTEM, PARAMETER, MESSAGE, TEMPLATE (with preview), ADAPTER, LICENSE, REQUIRES.

The form shows one parsed Modelfile and says which field the user edited (``edited``); the panel applies
that field alone (``apply_field``), so commands the form does not show are kept as they are.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QSizePolicy,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.modelfile.parser import NON_PARAMETER_NAMES, Modelfile
from app.ui.pages.modelfiles.message_list import MessageList
from app.ui.pages.modelfiles.parameter_table import ParameterTable
from app.ui.pages.modelfiles.template_preview import TemplatePreview
from app.ui.style.theme import set_role
from app.ui.tasks import loop_running, spawn

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin")
NO_FROM_NOTE = "no FROM line: choose an Ollama model, a GGUF file or a model folder."


def looks_local(name: str) -> bool:
    """A FROM that names a file or folder rather than an Ollama model tag (``llama3.2``, ``hf.co/a/b``)."""
    name = name.strip()
    return (
        name.startswith(("/", "./", "../", "~", "\\", ".\\", "..\\"))
        or bool(_WINDOWS_DRIVE.match(name))
        or name.lower().endswith(_MODEL_SUFFIXES)
    )


def resolve_from(name: str, base_dir: Path | None) -> Path:
    """Where Ollama would look for a local FROM: ``~`` expanded, relative to the Modelfile's folder."""
    path = Path(os.path.expanduser(name.strip()))
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _missing_local_from(name: str, base_dir: Path | None) -> str | None:
    """Runs in an executor: a note when a FROM that looks local does not exist."""
    if not looks_local(name):
        return None
    path = resolve_from(name, base_dir)
    if path.exists():
        return None
    return f"{path} does not exist: Ollama would look for a model named “{name.strip()}” instead."


class ModelfileForm(QWidget):
    edited = Signal(str)  # the Modelfile command name whose field the user changed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.base_dir: Path | None = None
        self.read_only = False
        self._loading = False
        self._from_check = 0
        self._more_adapters: list[str] = []
        self._dialog: QFileDialog | None = None
        self.error = QLabel()
        self.error.setObjectName("form_error")
        self.error.setWordWrap(True)
        self.error.hide()
        self.from_combo = QComboBox()
        self.from_combo.setObjectName("from_combo")
        self.from_combo.setEditable(True)
        self.from_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.from_combo.setToolTip("A GGUF file, a Hugging Face (safetensors) folder, or an Ollama model tag")
        line = self.from_combo.lineEdit()
        assert line is not None
        line.setPlaceholderText("llama3.2, ./model.gguf or a model folder")
        self.from_browse = self._browse_button(self._set_from)
        self.from_note = QLabel()
        self.from_note.setObjectName("from_note")
        self.from_note.setWordWrap(True)
        self.from_note.hide()
        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("SYSTEM: how the assistant should behave")
        self.adapter = QLineEdit()
        self.adapter.setPlaceholderText("ADAPTER: a LoRA adapter (GGUF file or safetensors folder)")
        self.adapter_browse = self._browse_button(self._set_adapter)
        self.license = QPlainTextEdit()
        self.license.setPlaceholderText("LICENSE text")
        self.license.setMaximumHeight(70)
        self.requires = QLineEdit()
        self.requires.setPlaceholderText("REQUIRES: the least Ollama version, e.g. 0.6.0")
        self.params = ParameterTable()
        self.messages = MessageList()
        self.template = TemplatePreview()
        self.tabs = QTabWidget()
        self.tabs.addTab(self._model_tab(), "Model")
        self.tabs.addTab(self.params, "Parameters")
        self.tabs.addTab(self.messages, "Messages")
        self.tabs.addTab(self.template, "Template")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.error)
        layout.addWidget(self.tabs, 1)
        self._connect()
        self._style()

    def _model_tab(self) -> QWidget:
        tab = QWidget()
        form = QFormLayout(tab)
        from_row = QHBoxLayout()
        from_row.addWidget(self.from_combo, 1)
        from_row.addWidget(self.from_browse)
        form.addRow("FROM", from_row)
        form.addRow("", self.from_note)
        form.addRow("SYSTEM", self.system)
        adapter_row = QHBoxLayout()
        adapter_row.addWidget(self.adapter, 1)
        adapter_row.addWidget(self.adapter_browse)
        form.addRow("ADAPTER", adapter_row)
        form.addRow("LICENSE", self.license)
        form.addRow("REQUIRES", self.requires)
        return tab

    def _browse_button(self, chosen: Callable[[str], None]) -> QToolButton:
        button = QToolButton()
        button.setText("Browse…")
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(button)
        for text, folder in (("A model file…", False), ("A Hugging Face folder…", True)):
            action = QAction(text, menu)
            action.triggered.connect(lambda _=False, f=folder: self._browse(f, chosen))
            menu.addAction(action)
        button.setMenu(menu)
        return button

    def _browse(self, folder: bool, chosen: Callable[[str], None]) -> None:
        """A non-blocking file dialog."""
        start = str(self.base_dir or "")
        if folder:
            self._dialog = QFileDialog(self, "Choose a Hugging Face model folder", start)
            self._dialog.setFileMode(QFileDialog.FileMode.Directory)
            self._dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        else:
            filters = "Model files (*.gguf *.safetensors *.bin);;All files (*)"
            self._dialog = QFileDialog(self, "Choose a model file", start, filters)
            self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(chosen)
        self._dialog.open()

    def _set_from(self, path: str) -> None:
        if path:
            self.from_combo.setCurrentText(path)

    def _set_adapter(self, path: str) -> None:
        if path:
            self.adapter.setText(path)

    def _connect(self) -> None:
        self.from_combo.currentTextChanged.connect(self._from_edited)
        self.system.textChanged.connect(lambda: self._emit("system"))
        self.adapter.textChanged.connect(lambda: self._emit("adapter"))
        self.license.textChanged.connect(lambda: self._emit("license"))
        self.requires.textChanged.connect(lambda: self._emit("requires"))
        self.params.changed.connect(lambda: self._emit("parameters"))
        self.messages.changed.connect(lambda: self._emit("messages"))
        self.template.changed.connect(lambda: self._emit("template"))
        self.system.textChanged.connect(self._update_preview)
        self.messages.changed.connect(self._update_preview)

    def _emit(self, field: str) -> None:
        if not self._loading:
            self.edited.emit(field)
            if field != "model" and not self.from_combo.currentText().strip():
                self._check_from()  # a first edit of a new Modelfile: now its missing FROM is worth saying

    def _from_edited(self, _text: str) -> None:
        self._check_from()
        self._emit("model")

    # --- showing a Modelfile ----------------------------------------------------------------------
    def set_modelfile(self, modelfile: Modelfile) -> None:
        """Show ``modelfile`` in every field without reporting edits."""
        self._loading = True
        try:
            froms = modelfile.froms()
            _set_text(self.from_combo, froms[0] if froms else "")
            _set_text(self.system, modelfile.system or "")
            adapters = modelfile.adapters()
            self._more_adapters = adapters[1:]  # the field shows the first; the others are kept
            _set_text(self.adapter, adapters[0] if adapters else "")
            _set_text(self.license, "\n\n".join(modelfile.licenses()))
            _set_text(self.requires, modelfile.single("requires") or "")
            pairs = [(c.name, c.args) for c in modelfile.commands if c.name not in NON_PARAMETER_NAMES]
            if pairs != self.params.parameters():
                self.params.set_parameters(pairs)
            if modelfile.messages() != self.messages.messages():
                self.messages.set_messages(modelfile.messages())
            self.template.set_template(modelfile.template or "")
        finally:
            self._loading = False
        self._update_preview()
        self._check_from(untouched=not modelfile.commands)

    def apply_field(self, modelfile: Modelfile, field: str) -> None:
        """Write the form's value for ``field`` into ``modelfile`` (the other commands stay as they are)."""
        if field == "model":
            modelfile.set_single("model", self.from_combo.currentText().strip() or None)
        elif field in ("system", "template"):
            text = self.system.toPlainText() if field == "system" else self.template.template()
            modelfile.set_single(field, text if text.strip() else None)
        elif field == "requires":
            modelfile.set_single("requires", self.requires.text().strip() or None)
        elif field == "adapter":
            first = self.adapter.text().strip()
            modelfile.set_list("adapter", ([first] if first else []) + self._more_adapters)
        elif field == "license":
            text = self.license.toPlainText()
            modelfile.set_list("license", [text] if text.strip() else [])
        elif field == "parameters":
            modelfile.set_parameters([(n, v) for n, v in self.params.parameters() if n.strip()])
        elif field == "messages":
            modelfile.set_messages(self.messages.messages())

    def set_read_only(self, read_only: bool) -> None:
        """A preset: every tab can be browsed and every value read, but nothing can be changed."""
        self.read_only = read_only
        self.from_combo.setEnabled(not read_only)
        for button in (self.from_browse, self.adapter_browse):
            button.setEnabled(not read_only)
        for edit in (self.system, self.license, self.adapter, self.requires):
            edit.setReadOnly(read_only)
        self.params.set_read_only(read_only)
        self.messages.set_read_only(read_only)
        self.template.set_read_only(read_only)

    def set_error(self, text: str | None) -> None:
        """While the text does not parse, the form is disabled and says why."""
        self.error.setText(f"The text has an error, so the form is paused until it is fixed: {text}" if text else "")
        self.error.setVisible(bool(text))
        self.tabs.setEnabled(not text)

    def set_from_candidates(self, groups: list[tuple[str, list[str]]]) -> None:
        """Fill the FROM list (recent models, models folder, Ollama tags) keeping what is typed."""
        self._loading = True
        text = self.from_combo.currentText()
        self.from_combo.clear()
        for label, names in groups:
            for name in names:
                self.from_combo.addItem(name, name)
                self.from_combo.setItemData(self.from_combo.count() - 1, label, Qt.ItemDataRole.ToolTipRole)
        self.from_combo.setCurrentText(text)
        self._loading = False

    def from_candidates(self) -> list[str]:
        return [self.from_combo.itemText(i) for i in range(self.from_combo.count())]

    # --- FROM check -------------------------------------------------------------------------------
    def _check_from(self, untouched: bool = False) -> None:
        """Say what is wrong with the FROM field; an empty Modelfile nobody has typed in yet gets no error."""
        name = self.from_combo.currentText()
        self._from_check += 1
        if not looks_local(name):
            self._show_from_note(None if name.strip() or untouched else NO_FROM_NOTE)
            return
        if not loop_running():
            return
        spawn(self._check_from_async(name, self._from_check), "check FROM path")

    async def _check_from_async(self, name: str, check: int) -> None:
        loop = asyncio.get_running_loop()
        note = await loop.run_in_executor(None, _missing_local_from, name, self.base_dir)
        if check == self._from_check:
            self._show_from_note(note)

    def _show_from_note(self, note: str | None) -> None:
        self.from_note.setText(note or "")
        self.from_note.setVisible(bool(note))

    def _update_preview(self) -> None:
        system = self.system.toPlainText()
        self.template.set_conversation(system if system.strip() else None, self.messages.messages())

    def _style(self) -> None:
        set_role(self.error, "error")
        set_role(self.from_note, "error")


def _set_text(widget: QWidget, text: str) -> None:
    """Set a field's text only when it differs (keeps the cursor and avoids needless signals)."""
    if isinstance(widget, QComboBox):
        if widget.currentText() != text:
            widget.setCurrentText(text)
    elif isinstance(widget, QPlainTextEdit):
        if widget.toPlainText() != text:
            widget.setPlainText(text)
    elif isinstance(widget, QLineEdit) and widget.text() != text:
        widget.setText(text)
