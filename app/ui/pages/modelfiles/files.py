"""The Modelfiles panel's files: the user's Modelfiles and the shipped presets, which one is on screen, and
New / Open / Save / Save as / Delete, with the inline bars that ask for a name or a decision."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.modelfile.parser import read_modelfile
from app.core.user_files import UserFileError
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_M, set_role
from app.ui.tasks import spawn

SUFFIX = ".Modelfile"
_PATH = Qt.ItemDataRole.UserRole


def is_modelfile(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and (name.endswith(".modelfile") or name == "modelfile" or name.startswith("modelfile."))


def scan(folder: Path) -> list[Path]:
    try:
        return sorted((p for p in folder.iterdir() if is_modelfile(p)), key=lambda p: p.name.lower())
    except OSError:
        return []


def decode(data: bytes) -> str:
    """Text as Ollama reads the file: a UTF-16 byte order mark wins, anything else is UTF-8."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def read_document(path: Path) -> str:
    """The text of the Modelfile at ``path``, read in an executor: a FIFO, a device or a file over 1 MiB raises
    ``UserFileError`` before anything is read; ``OSError``s pass through."""
    return decode(read_modelfile(path))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def import_name(source: Path, folder: Path) -> Path:
    """A free ``<stem>.Modelfile`` in ``folder`` for a file named like ``source`` (``-2``, ``-3`` … when taken)."""
    name = source.name
    stem = name[: -len(SUFFIX)] if name.lower().endswith(SUFFIX.lower()) else source.stem
    stem = re.sub(r"[\\/:*?\"<>|]+", "-", stem).strip(". ") or "imported"
    if stem.lower() == "modelfile":
        stem = source.parent.name or "imported"
    target, count = folder / f"{stem}{SUFFIX}", 1
    while target.exists():
        count += 1
        target = folder / f"{stem}-{count}{SUFFIX}"
    return target


def _import(text: str, source: Path, folder: Path) -> Path:
    target = import_name(source, folder)
    _write(target, text)
    return target


class EmptyState(QFrame):
    """What "My Modelfiles" shows before there is one: what a Modelfile is for, and the two ways to start."""

    def __init__(self, new: Callable[[], None], import_file: Callable[[], None]) -> None:
        super().__init__()
        self.setObjectName("modelfiles_empty")
        set_role(self, "card")
        title = QLabel("No Modelfiles yet")
        set_role(title, "empty-title")
        text = QLabel("A Modelfile is a reusable preset: a model, a system prompt and sampling settings.")
        text.setWordWrap(True)
        set_role(text, "muted")
        self.new_button = QPushButton("New Modelfile")
        set_role(self.new_button, "accent")
        self.new_button.clicked.connect(lambda _checked=False: new())
        self.import_button = QPushButton("Import…")
        self.import_button.clicked.connect(lambda _checked=False: import_file())
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_button)
        buttons.addWidget(self.import_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
        layout.addWidget(title)
        layout.addWidget(text)
        more = QLabel("Or open a preset below and duplicate it.")
        more.setWordWrap(True)
        layout.addWidget(more)
        layout.addLayout(buttons)


class InlineBar(QFrame):
    """An inline, non-modal bar: a ``message`` and its ``buttons``; hidden until shown."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.message = QLabel(text)
        self.message.setWordWrap(True)
        row = QHBoxLayout(self)
        row.addWidget(self.message, 1)
        self.buttons = QHBoxLayout()
        row.addLayout(self.buttons)
        self.hide()


class AskBar(InlineBar):
    """An inline question: each choice is a button that hides the bar, then runs its action."""

    def ask(self, text: str, choices: list[tuple[str, Callable[[], None]]]) -> None:
        self.message.setText(text)
        while self.buttons.count():
            old = self.buttons.takeAt(0)
            widget = old.widget() if old is not None else None
            if widget is not None:
                widget.deleteLater()
        for label, action in choices:
            button = QPushButton(label)
            button.clicked.connect(lambda _=False, a=action: self._answer(a))
            self.buttons.addWidget(button)
        self.show()

    def _answer(self, action: Callable[[], None]) -> None:
        self.hide()
        action()


class ModelfileFiles(QWidget):
    """The file list and its buttons, and which file is on screen (``path``, ``is_preset``).

    ``ask_bar`` and ``name_bar`` are laid out by the panel. Saving writes ``text()``; the panel hears of it
    through ``saved``. Opening and New go through the panel (``open_requested``, ``new_requested``), which asks
    about unsaved changes first.
    """

    open_requested = Signal(object)  # Path: chosen in the list or in the Open dialog
    new_requested = Signal()
    saved = Signal(object, str)  # the Path written, and the text written to it
    deleted = Signal(object)  # the Path deleted, which was the file on screen
    problem = Signal(str)  # a sentence for the panel's notice line

    def __init__(
        self, modelfiles_dir: Path, presets: Path, text: Callable[[], str], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.modelfiles_dir, self.presets_dir, self._text = modelfiles_dir, presets, text
        self.path: Path | None = None
        self.is_preset = False
        self._after_save: Callable[[], None] | None = None
        self._dialog: QFileDialog | None = None
        self.tree = QTreeWidget()
        self.tree.setObjectName("modelfile_list")
        self.tree.setHeaderHidden(True)
        self.user_root = QTreeWidgetItem(["My Modelfiles"])
        self.preset_root = QTreeWidgetItem(["Presets (read-only)"])
        self.tree.addTopLevelItems([self.user_root, self.preset_root])
        self.new_button = QPushButton(icon("plus"), "New")
        self.new_button.setToolTip("Start a new, empty Modelfile")
        self.import_button = QPushButton("Import…")
        self.import_button.setToolTip("Copy a Modelfile from elsewhere into your Modelfiles folder")
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Open a Modelfile where it is, without copying it")
        self.save_button = QPushButton("Save")
        self.save_as_button = QPushButton("Save as…")
        self.delete_button = QPushButton(icon("trash"), "")
        self.delete_button.setToolTip("Delete this Modelfile")
        self.empty_state = EmptyState(self.new_requested.emit, self.choose_import)
        self.ask_bar = AskBar()
        self.name_bar = InlineBar()
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("Name")
        self.name_save = QPushButton("Save")
        self.name_elsewhere = QPushButton("Elsewhere…")
        self.name_cancel = QPushButton("Cancel")
        for widget in (self.name_edit, self.name_save, self.name_elsewhere, self.name_cancel):
            self.name_bar.buttons.addWidget(widget)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.empty_state)
        layout.addWidget(self.tree, 1)
        row = QHBoxLayout()
        for button in (self.new_button, self.import_button, self.open_button):
            row.addWidget(button)
        layout.addLayout(row)
        self.empty_state.hide()
        self._connect()
        self._sync_buttons()

    def _connect(self) -> None:
        self.tree.itemActivated.connect(self._file_chosen)
        self.tree.itemClicked.connect(self._file_chosen)
        self.new_button.clicked.connect(self.new_requested)
        self.open_button.clicked.connect(self.choose_file)
        self.import_button.clicked.connect(self.choose_import)
        self.save_button.clicked.connect(lambda: self.save())  # not save(checked)
        self.save_as_button.clicked.connect(lambda: self.save_as())
        self.delete_button.clicked.connect(self.delete_file)
        self.name_save.clicked.connect(self._save_named)
        self.name_edit.returnPressed.connect(self._save_named)
        self.name_elsewhere.clicked.connect(self._save_elsewhere)
        self.name_cancel.clicked.connect(self._cancel_name)

    # --- the list ------------------------------------------------------------------------------------------
    async def refresh(self) -> None:
        loop = asyncio.get_running_loop()
        user = await loop.run_in_executor(None, scan, self.modelfiles_dir)
        presets = await loop.run_in_executor(None, scan, self.presets_dir)
        for root, paths in ((self.user_root, user), (self.preset_root, presets)):
            root.takeChildren()
            for path in paths:
                item = QTreeWidgetItem([path.name])
                item.setData(0, _PATH, str(path))
                item.setToolTip(0, str(path))
                root.addChild(item)
        self.tree.expandAll()
        self.user_root.setHidden(not user)  # none yet: the empty state above the list says what to do
        self.empty_state.setVisible(not user)
        self.new_button.setVisible(bool(user))  # the empty state has its own New and Import
        self.import_button.setVisible(bool(user))
        self.select_current()

    def select_current(self) -> None:
        self.tree.clearSelection()
        for root in (self.user_root, self.preset_root):
            for i in range(root.childCount()):
                child = root.child(i)
                if child is not None and self.path is not None and child.data(0, _PATH) == str(self.path):
                    self.tree.setCurrentItem(child)

    def set_current(self, path: Path | None, preset: bool) -> None:
        """The file now on screen (None: not saved yet)."""
        self.path, self.is_preset = path, preset
        self.name_bar.hide()
        self._sync_buttons()
        self.select_current()

    def is_preset_path(self, path: Path) -> bool:
        return os.path.normpath(path.parent) == os.path.normpath(self.presets_dir)

    def _sync_buttons(self) -> None:
        self.delete_button.setEnabled(self.path is not None and not self.is_preset)
        self.save_button.setEnabled(not self.is_preset)
        self.save_button.setToolTip(
            "Presets are read-only: Duplicate to edit, or Save as… a copy" if self.is_preset else "Save (Ctrl+S)"
        )

    def _file_chosen(self, item: QTreeWidgetItem) -> None:
        data = item.data(0, _PATH)
        if data and Path(data) != self.path:
            self.open_requested.emit(Path(data))

    def choose_file(self) -> None:
        self._dialog = QFileDialog(self, "Open a Modelfile", str(self.modelfiles_dir))
        self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(lambda p: self.open_requested.emit(Path(p)) if p else None)
        self._dialog.open()

    def choose_import(self) -> None:
        self._dialog = QFileDialog(self, "Import a Modelfile", str(Path.home()))
        self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(lambda p: spawn(self.import_file(Path(p)), "import Modelfile") if p else None)
        self._dialog.open()

    async def import_file(self, source: Path) -> Path | None:
        """Copy the Modelfile at ``source`` into the user's folder (under a free name), list it and open it."""
        loop = asyncio.get_running_loop()
        try:
            text = await loop.run_in_executor(None, read_document, source)
            target = await loop.run_in_executor(None, _import, text, source, self.modelfiles_dir)
        except UserFileError as exc:  # a FIFO, a device, over 1 MiB
            self.problem.emit(f"Cannot import it: {exc}")
            return None
        except OSError as exc:
            self.problem.emit(f"Cannot import {source.name}: {exc.strerror or exc}")
            return None
        await self.refresh()
        self.open_requested.emit(target)
        return target

    # --- saving and deleting -------------------------------------------------------------------------------
    def save(self, then: Callable[[], None] | None = None) -> None:
        if self.path is not None and not self.is_preset:
            spawn(self._write(self.path, then), "save Modelfile")
        else:
            self.save_as(then)

    def save_as(self, then: Callable[[], None] | None = None) -> None:
        """Ask for a name inline; the file goes into the user's Modelfiles folder."""
        self._after_save = then
        stem = self.path.name.removesuffix(SUFFIX) if self.path else self.name_edit.text() or "my-model"
        self.name_bar.message.setText("Save in My Modelfiles as")
        self.name_bar.message.setToolTip(str(self.modelfiles_dir))
        self.name_edit.setText(stem)
        self.name_bar.show()
        self.name_edit.setFocus()
        self.name_edit.selectAll()

    def _save_named(self) -> None:
        name = re.sub(r"[\\/:*?\"<>|]+", "-", self.name_edit.text().strip()).strip(". ")
        if not name:
            self.problem.emit("Type a name for the Modelfile.")
            return
        target = self.modelfiles_dir / (name if name.endswith(SUFFIX) else name + SUFFIX)
        spawn(self._save_new(target), "save Modelfile")

    async def _save_new(self, target: Path) -> None:
        """Write to ``target``, after asking when that would replace another Modelfile."""
        exists = await asyncio.get_running_loop().run_in_executor(None, target.exists)
        then = self._after_save
        if exists and target != self.path:
            self.ask_bar.ask(
                f"{target.name} already exists in your Modelfiles. Replace it?",
                [("Replace", lambda: self._save_to(target, then)), ("Cancel", lambda: None)],
            )
            return
        await self._write(target, then)

    def _save_to(self, target: Path, then: Callable[[], None] | None) -> None:
        spawn(self._write(target, then), "save Modelfile")

    def _save_elsewhere(self) -> None:
        self._dialog = QFileDialog(self, "Save the Modelfile", str(self.modelfiles_dir))
        self._dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        self._dialog.fileSelected.connect(lambda p: self._save_to(Path(p), self._after_save) if p else None)
        self._dialog.open()

    def _cancel_name(self) -> None:
        self.name_bar.hide()
        self._after_save = None

    async def _write(self, target: Path, then: Callable[[], None] | None = None) -> None:
        text = self._text()
        try:
            await asyncio.get_running_loop().run_in_executor(None, _write, target, text)
        except OSError as exc:
            self.problem.emit(f"Cannot save {target}: {exc.strerror or exc}")
            return
        self.path, self.is_preset = target, False
        self.name_bar.hide()
        self._sync_buttons()
        self.saved.emit(target, text)
        await self.refresh()
        if then is not None:
            then()

    def delete_file(self) -> None:
        path = self.path
        if path is None or self.is_preset:
            return
        self.ask_bar.ask(
            f"Delete {path.name}? This cannot be undone.", [("Delete", self._delete), ("Cancel", lambda: None)]
        )

    def _delete(self) -> None:
        spawn(self._delete_async(), "delete Modelfile")

    async def _delete_async(self) -> None:
        path = self.path
        assert path is not None
        try:
            await asyncio.get_running_loop().run_in_executor(None, path.unlink)
        except OSError as exc:
            self.problem.emit(f"Cannot delete {path}: {exc.strerror or exc}")
            return
        if self.path == path:
            self.deleted.emit(path)
        await self.refresh()
