"""The Modelfiles panel: the user's Modelfiles and the shipped presets, a form and the raw text kept in step,
Ollama's own errors, Check, Use in chat, and Create in Ollama."""

from __future__ import annotations

import asyncio
import copy
import html
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QPalette, QShowEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

import app
from app.core.modelfile import Modelfile, ModelfileError
from app.core.modelfile_params import check_modelfile
from app.services.ollama_create import CreateProgress, build_create_request, create_model
from app.services.ollama_service import OllamaError, OllamaService
from app.ui.context import AppContext
from app.ui.tasks import spawn
from app.ui.widgets.modelfile_form import ModelfileForm
from app.ui.widgets.modelfile_highlighter import ModelfileTextPane, error_color, muted_color, set_text_color

log = logging.getLogger("app.ui.modelfiles")
SUFFIX = ".Modelfile"
_PATH = Qt.ItemDataRole.UserRole


def presets_dir() -> Path:
    """The shipped presets (the repository's modelfiles/; may be absent in an installed package)."""
    return Path(app.__file__).resolve().parents[1] / "modelfiles"


def is_modelfile(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and (name.endswith(".modelfile") or name == "modelfile" or name.startswith("modelfile."))


def _scan(folder: Path) -> list[Path]:
    try:
        return sorted((p for p in folder.iterdir() if is_modelfile(p)), key=lambda p: p.name.lower())
    except OSError:
        return []


def _scan_ggufs(folders: list[Path], limit: int = 200) -> list[str]:
    found: list[str] = []
    for folder in folders:
        try:
            found += sorted(str(p) for p in folder.rglob("*.gguf") if p.is_file())
        except OSError:
            continue
    return list(dict.fromkeys(found))[:limit]


def _decode(data: bytes) -> str:
    """Text as Ollama reads the file: a UTF-16 byte order mark wins, anything else is UTF-8."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class ModelfilePanel(QWidget):
    use_in_chat_requested = Signal(object)  # the parsed Modelfile

    def __init__(self, context: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.presets_dir = presets_dir()
        self.path: Path | None = None
        self.is_preset = False
        self.saved_text = ""
        self.ollama_running = False
        self._started: asyncio.Task[Any] | None = None
        self._after_save: Callable[[], None] | None = None
        self._dialog: QFileDialog | None = None
        self._untitled = "Untitled Modelfile"
        self._rechecking = False
        self._build()
        self._style()
        self._show_title()

    # --- layout ------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.files = QTreeWidget()
        self.files.setObjectName("modelfile_list")
        self.files.setHeaderHidden(True)
        self.user_root = QTreeWidgetItem(["My Modelfiles"])
        self.preset_root = QTreeWidgetItem(["Presets (read-only)"])
        self.files.addTopLevelItems([self.user_root, self.preset_root])
        names = ("New", "Open…", "Save", "Save as…", "Delete")
        self.new_button, self.open_button, self.save_button, self.save_as_button, self.delete_button = (
            QPushButton(n) for n in names
        )
        self.title = QLabel()
        self.title.setObjectName("modelfile_title")
        self.copy_button = QPushButton("Edit a copy")
        self.ask_bar, self.ask_text, self.ask_buttons = self._bar()
        self.name_bar, self.name_text, name_buttons = self._bar()
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("Name")
        name_buttons.addWidget(self.name_edit)
        self.name_save = QPushButton("Save")
        self.name_elsewhere = QPushButton("Elsewhere…")
        self.name_cancel = QPushButton("Cancel")
        for button in (self.name_save, self.name_elsewhere, self.name_cancel):
            name_buttons.addWidget(button)
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.hide()
        self.form = ModelfileForm()
        self.text = ModelfileTextPane()
        self.editor = self.text.editor
        self.check_button = QPushButton("Check")
        self.use_button = QPushButton("Use in chat")
        self.create_button = QPushButton("Create in Ollama…")
        self.check_label = QLabel()
        self.check_label.setObjectName("check_result")
        self.check_label.setWordWrap(True)
        self.check_label.setTextFormat(Qt.TextFormat.RichText)
        self.check_label.hide()
        self.ollama_label = QLabel("Checking for Ollama…")
        self.ollama_label.setObjectName("ollama_status")
        self.ollama_label.setWordWrap(True)
        self.recheck_button = QPushButton("Check again")
        self.recheck_button.hide()
        self.create_bar, _text, create_buttons = self._bar()
        _text.setText("Create the model in Ollama as")
        self.create_name = QLineEdit()
        self.create_name.setPlaceholderText("my-model:latest")
        self.create_go = QPushButton("Create")
        self.create_cancel = QPushButton("Close")
        self.create_progress = QProgressBar()
        self.create_progress.setMaximumWidth(200)
        self.create_progress.hide()
        self.create_status = QLabel()
        self.create_status.setObjectName("create_status")
        self.create_status.setWordWrap(True)
        for widget in (self.create_name, self.create_go, self.create_progress, self.create_cancel):
            create_buttons.addWidget(widget)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._files_column())
        splitter.addWidget(self._center())
        splitter.setSizes([220, 980])
        splitter.setCollapsible(1, False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)
        self._connect()

    def _bar(self) -> tuple[QFrame, QLabel, QHBoxLayout]:
        """An inline, non-modal question: a message and its buttons."""
        bar = QFrame()
        bar.setFrameShape(QFrame.Shape.StyledPanel)
        text = QLabel()
        text.setWordWrap(True)
        row = QHBoxLayout(bar)
        row.addWidget(text, 1)
        buttons = QHBoxLayout()
        row.addLayout(buttons)
        bar.hide()
        return bar, text, buttons

    def _files_column(self) -> QWidget:
        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.files, 1)
        for pair in ((self.new_button, self.open_button), (self.save_button, self.save_as_button)):
            row = QHBoxLayout()
            for button in pair:
                row.addWidget(button)
            layout.addLayout(row)
        layout.addWidget(self.delete_button)
        return column

    def _center(self) -> QWidget:
        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.copy_button)
        layout.addLayout(head)
        for widget in (self.ask_bar, self.name_bar, self.notice):
            layout.addWidget(widget)
        editors = QSplitter(Qt.Orientation.Horizontal)
        editors.addWidget(self.form)
        editors.addWidget(self.text)
        editors.setSizes([520, 460])
        layout.addWidget(editors, 1)
        actions = QHBoxLayout()
        for button in (self.check_button, self.use_button, self.create_button):
            actions.addWidget(button)
        actions.addWidget(self.ollama_label, 1)
        actions.addWidget(self.recheck_button)
        layout.addLayout(actions)
        for widget in (self.check_label, self.create_bar, self.create_status):
            layout.addWidget(widget)
        return column

    def _connect(self) -> None:
        self.files.itemActivated.connect(self._file_chosen)
        self.files.itemClicked.connect(self._file_chosen)
        self.new_button.clicked.connect(self.new_file)
        self.open_button.clicked.connect(self.choose_file)
        self.save_button.clicked.connect(lambda: self.save())  # not save(checked)
        self.save_as_button.clicked.connect(lambda: self.save_as())
        self.delete_button.clicked.connect(self.delete_file)
        self.copy_button.clicked.connect(self.edit_copy)
        self.name_save.clicked.connect(self._save_named)
        self.name_edit.returnPressed.connect(self._save_named)
        self.name_elsewhere.clicked.connect(self._save_elsewhere)
        self.name_cancel.clicked.connect(self._cancel_name)
        self.editor.textChanged.connect(self._show_title)
        self.text.parsed.connect(self._parsed)
        self.text.failed.connect(self._failed)
        self.form.edited.connect(self._form_edited)
        self.check_button.clicked.connect(self.check)
        self.use_button.clicked.connect(self.use_in_chat)
        self.create_button.clicked.connect(self._show_create_bar)
        self.create_go.clicked.connect(self.create_in_ollama)
        self.create_name.returnPressed.connect(self.create_in_ollama)
        self.create_cancel.clicked.connect(self.create_bar.hide)
        self.recheck_button.clicked.connect(self.recheck)
        self.create_button.setEnabled(False)

    def _style(self) -> None:
        red, muted = error_color(self.palette()), muted_color(self.palette())
        set_text_color(self.notice, red)
        set_text_color(self.ollama_label, muted)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._style()

    # --- start ---------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """List the Modelfiles and the FROM choices, and ask Ollama whether it runs (all off the Qt thread)."""
        if self._started is None:
            self._started = spawn(self.refresh(), "modelfiles: refresh")
        return self._started

    def showEvent(self, event: QShowEvent) -> None:
        """The first show lists everything; a later one asks Ollama again (it may have been started since)."""
        super().showEvent(event)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._started is None:
            self.start()
        else:
            self.recheck()

    def recheck(self) -> None:
        """Ask Ollama again and refill the FROM choices: on a later show, Check again, or changed settings."""
        if self._started is not None and self._started.done() and not self._rechecking:
            self._rechecking = True
            spawn(self._recheck(), "modelfiles: recheck")

    def settings_changed(self) -> None:
        """Call after the settings change (Ollama host, model folders, recent models)."""
        self.recheck()

    async def _recheck(self) -> None:
        try:
            await self.refresh_ollama()
            await self.refresh_from_choices()
        finally:
            self._rechecking = False

    async def refresh(self) -> None:
        await asyncio.gather(self.refresh_files(), self.refresh_ollama())
        await self.refresh_from_choices()

    async def refresh_files(self) -> None:
        loop = asyncio.get_running_loop()
        user = await loop.run_in_executor(None, _scan, self.context.paths.modelfiles_dir)
        presets = await loop.run_in_executor(None, _scan, self.presets_dir)
        for root, paths in ((self.user_root, user), (self.preset_root, presets)):
            root.takeChildren()
            for path in paths:
                item = QTreeWidgetItem([path.name])
                item.setData(0, _PATH, str(path))
                item.setToolTip(0, str(path))
                root.addChild(item)
        self.files.expandAll()
        self._select_current()

    async def refresh_from_choices(self) -> None:
        settings = self.context.settings
        folders = [self.context.paths.models_dir, *(Path(f) for f in settings.model_folders)]
        local = await asyncio.get_running_loop().run_in_executor(None, _scan_ggufs, folders)
        recent = [p for p in settings.recent_models if p.lower().endswith(".gguf")]
        tags = await self._ollama_tags()
        self.form.set_from_candidates(
            [("Recent model", recent), ("In your model folders", [p for p in local if p not in recent]), *tags]
        )

    async def _ollama_tags(self) -> list[tuple[str, list[str]]]:
        if not self.ollama_running:
            return []
        try:
            async with OllamaService(self.context.settings.ollama_host) as service:
                models = await service.list_models()
        except OllamaError as exc:  # the list is a convenience: say why in the log and go on
            log.info("Ollama models not listed: %s", exc)
            return []
        return [("Ollama model", [m.name for m in models])]

    async def refresh_ollama(self) -> None:
        try:
            async with OllamaService(self.context.settings.ollama_host) as service:
                status = await service.status()
            running, reason = status.running, status.reason
        except OllamaError as exc:  # an unusable host setting
            running, reason = False, str(exc)
        self.ollama_running = running
        self.create_button.setEnabled(running)
        self.ollama_label.setText("" if running else reason)
        self.ollama_label.setVisible(not running)
        self.recheck_button.setVisible(not running)
        if not running:
            self.create_bar.hide()

    # --- documents ---------------------------------------------------------------------------------
    def has_unsaved_changes(self) -> bool:
        return self.editor.toPlainText() != self.saved_text

    def _show_title(self) -> None:
        name = self.path.name if self.path else self._untitled
        mark = " •" if self.has_unsaved_changes() else ""
        extra = " — preset, read-only: Edit a copy to change it" if self.is_preset else ""
        self.title.setText(f"<b>{name}{mark}</b>{extra}")
        self.title.setToolTip(str(self.path or "Not saved yet"))
        self.copy_button.setVisible(self.is_preset)
        self.delete_button.setEnabled(self.path is not None and not self.is_preset)

    def _select_current(self) -> None:
        self.files.clearSelection()
        for root in (self.user_root, self.preset_root):
            for i in range(root.childCount()):
                child = root.child(i)
                if child is not None and self.path is not None and child.data(0, _PATH) == str(self.path):
                    self.files.setCurrentItem(child)

    def _guard(self, then: Callable[[], None]) -> None:
        """Run ``then`` now, or after the user answers the unsaved-changes bar."""
        if not self.has_unsaved_changes():
            then()
            return
        name = self.path.name if self.path else "this Modelfile"
        self.ask(
            f"{name} has unsaved changes.",
            [("Save", lambda: self.save(then=then)), ("Discard", then), ("Cancel", self._select_current)],
        )

    def ask(self, text: str, choices: list[tuple[str, Callable[[], None]]]) -> None:
        self.ask_text.setText(text)
        while self.ask_buttons.count():
            old = self.ask_buttons.takeAt(0)
            widget = old.widget() if old is not None else None
            if widget is not None:
                widget.deleteLater()
        for label, action in choices:
            button = QPushButton(label)
            button.clicked.connect(lambda _=False, a=action: self._answer(a))
            self.ask_buttons.addWidget(button)
        self.ask_bar.show()

    def _answer(self, action: Callable[[], None]) -> None:
        self.ask_bar.hide()
        action()

    def _file_chosen(self, item: QTreeWidgetItem) -> None:
        data = item.data(0, _PATH)
        if data and Path(data) != self.path:
            self.open_path(Path(data))

    def open_path(self, path: Path) -> None:
        preset = os.path.normpath(path.parent) == os.path.normpath(self.presets_dir)
        self._guard(lambda: self._open(path, preset))

    def _open(self, path: Path, preset: bool) -> None:
        spawn(self._load(path, preset), "open Modelfile")

    async def _load(self, path: Path, preset: bool) -> None:
        try:
            data = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
        except OSError as exc:
            self.show_notice(f"Cannot read {path}: {exc.strerror or exc}")
            return
        self._set_document(_decode(data), path, preset)

    def _set_document(self, text: str, path: Path | None, preset: bool, saved: str | None = None) -> None:
        self.path, self.is_preset = path, preset
        self.saved_text = text if saved is None else saved
        self.hide_notice()
        self.name_bar.hide()
        self.check_label.hide()
        self.form.base_dir = path.parent if path else self.context.paths.modelfiles_dir
        self.form.setEnabled(not preset)
        self.text.set_text(text, read_only=preset)
        self._show_title()
        self._select_current()

    def new_file(self) -> None:
        self._guard(self._new)

    def _new(self) -> None:
        self.name_edit.clear()
        self._untitled = "Untitled Modelfile"
        self._set_document("", None, False)

    def edit_copy(self) -> None:
        """Turn the preset on screen into an unsaved copy that can be edited and saved in the user's folder."""
        if self.is_preset and self.path is not None:
            name = self.path.name
            self._untitled = f"Copy of {name} (not saved yet)"
            self._set_document(self.editor.toPlainText(), None, False, saved="")
            self.name_edit.setText(Path(name).stem)
            self.files.clearSelection()

    def choose_file(self) -> None:
        self._dialog = QFileDialog(self, "Open a Modelfile", str(self.context.paths.modelfiles_dir))
        self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(self._file_opened)
        self._dialog.open()

    def _file_opened(self, path: str) -> None:
        if path:
            self.open_path(Path(path))

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
        self.name_text.setText(f"Save in {self.context.paths.modelfiles_dir} as")
        self.name_edit.setText(stem)
        self.name_bar.show()
        self.name_edit.setFocus()
        self.name_edit.selectAll()

    def _save_named(self) -> None:
        name = re.sub(r"[\\/:*?\"<>|]+", "-", self.name_edit.text().strip()).strip(". ")
        if not name:
            self.show_notice("Type a name for the Modelfile.")
            return
        target = self.context.paths.modelfiles_dir / (name if name.endswith(SUFFIX) else name + SUFFIX)
        spawn(self._save_new(target), "save Modelfile")

    async def _save_new(self, target: Path) -> None:
        """Write to ``target``, after asking when that would replace another Modelfile."""
        exists = await asyncio.get_running_loop().run_in_executor(None, target.exists)
        then = self._after_save
        if exists and target != self.path:
            self.ask(
                f"{target.name} already exists in your Modelfiles. Replace it?",
                [("Replace", lambda: self._save_to(target, then)), ("Cancel", lambda: None)],
            )
            return
        await self._write(target, then)

    def _save_to(self, target: Path, then: Callable[[], None] | None) -> None:
        spawn(self._write(target, then), "save Modelfile")

    def _save_elsewhere(self) -> None:
        self._dialog = QFileDialog(self, "Save the Modelfile", str(self.context.paths.modelfiles_dir))
        self._dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        self._dialog.fileSelected.connect(lambda p: self._save_to(Path(p), self._after_save) if p else None)
        self._dialog.open()

    def _cancel_name(self) -> None:
        self.name_bar.hide()
        self._after_save = None

    async def _write(self, target: Path, then: Callable[[], None] | None = None) -> None:
        text = self.editor.toPlainText()
        try:
            await asyncio.get_running_loop().run_in_executor(None, _write, target, text)
        except OSError as exc:
            self.show_notice(f"Cannot save {target}: {exc.strerror or exc}")
            return
        self.path, self.is_preset, self.saved_text = target, False, text
        self.editor.setReadOnly(False)
        self.form.setEnabled(True)
        self.form.base_dir = target.parent
        self.name_bar.hide()
        self.hide_notice()
        self._show_title()
        await self.refresh_files()
        if then is not None:
            then()

    def delete_file(self) -> None:
        path = self.path
        if path is None or self.is_preset:
            return
        self.ask(f"Delete {path.name}? This cannot be undone.", [("Delete", self._delete), ("Cancel", lambda: None)])

    def _delete(self) -> None:
        spawn(self._delete_async(), "delete Modelfile")

    async def _delete_async(self) -> None:
        path = self.path
        assert path is not None
        try:
            await asyncio.get_running_loop().run_in_executor(None, path.unlink)
        except OSError as exc:
            self.show_notice(f"Cannot delete {path}: {exc.strerror or exc}")
            return
        if self.path == path:
            self._new()
        await self.refresh_files()

    # --- text <-> form ------------------------------------------------------------------------------------
    @property
    def modelfile(self) -> Modelfile | None:
        """The commands in the editor (also while only the FROM line is missing), or None."""
        return self.text.modelfile

    def _parsed(self, modelfile: Modelfile) -> None:
        self.form.set_error(None)
        self.form.set_modelfile(modelfile)

    def _failed(self, error: ModelfileError | None) -> None:
        self.form.set_error(str(error))

    def _form_edited(self, field: str) -> None:
        """Write the edited field into the Modelfile and show its canonical text (never while text is typed)."""
        if self.text.timer.isActive():  # text typed a moment ago: take it in, leaving the edited field alone
            self.text.parse_now(notify=False)
            if self.text.modelfile is None:
                self._failed(self.text.error)
        if self.text.modelfile is None or self.is_preset:
            return
        modelfile = copy.deepcopy(self.text.modelfile)
        try:
            self.form.apply_field(modelfile, field)
            text = modelfile.format()
        except ModelfileError as exc:
            self.show_notice(f"The form cannot write this {field} into the Modelfile yet: {exc}")
            return
        self.hide_notice()
        self.text.replace_text(text)

    def parsed(self) -> Modelfile | None:
        """The Modelfile in the editor, or None (the error is on screen) when Ollama would refuse the text."""
        modelfile = self.text.parse_now()
        if modelfile is None:
            self.show_notice(f"Fix the Modelfile first: {self.text.error}")
        return modelfile

    # --- actions ---------------------------------------------------------------------------------------------
    def check(self) -> None:
        modelfile = self.parsed()
        if modelfile is not None:
            spawn(self._check(modelfile), "check Modelfile")

    async def _check(self, modelfile: Modelfile) -> None:
        result = await asyncio.get_running_loop().run_in_executor(None, check_modelfile, modelfile)
        red = error_color(self.palette()).name()
        lines = [f'<span style="color:{red}">✖ {_esc(p)}</span>' for p in result.problems]
        lines += [f"⚠ {_esc(w)}" for w in result.warnings]
        if not lines:
            lines = [f"✔ No problems: {len(result.parameters)} parameter(s) Ollama accepts."]
        self.check_label.setText("<br>".join(lines))
        self.check_label.show()

    def use_in_chat(self) -> None:
        modelfile = self.parsed()
        if modelfile is not None:
            self.use_in_chat_requested.emit(copy.deepcopy(modelfile))

    def _show_create_bar(self) -> None:
        if not self.create_name.text():
            stem = self.path.name.removesuffix(SUFFIX) if self.path else ""
            self.create_name.setText(re.sub(r"[^A-Za-z0-9._:-]+", "-", stem).strip("-").lower())
        self.create_status.setText("")
        self.create_bar.show()
        self.create_name.setFocus()

    def create_in_ollama(self) -> None:
        name = self.create_name.text().strip()
        modelfile = self.parsed()
        if modelfile is None:
            return
        if not name:
            self.create_status.setText("Type a name for the new Ollama model.")
            return
        spawn(self._create(name, modelfile), "create in Ollama")

    async def _create(self, name: str, modelfile: Modelfile) -> None:
        loop = asyncio.get_running_loop()
        self.create_go.setEnabled(False)
        self.create_progress.setRange(0, 0)
        self.create_progress.show()
        self._create_said(f"Preparing {name}: reading the files that FROM and ADAPTER name…")
        base = self.path.parent if self.path else self.context.paths.modelfiles_dir
        try:
            plan = await loop.run_in_executor(None, build_create_request, modelfile, base)
            async with OllamaService(self.context.settings.ollama_host) as service:
                await create_model(service, name, plan, self._create_progress)
        except (OllamaError, ModelfileError, OSError) as exc:
            log.warning("create %s failed: %s", name, exc)
            self._create_said(f"{name} was not created: {exc}", error=True)
        else:
            self._create_said(f"Created {name} in Ollama. It is ready for ollama run {name}.")
            spawn(self.refresh_from_choices(), "modelfiles: FROM choices")
        finally:
            self.create_go.setEnabled(True)
            self.create_progress.hide()

    def _create_progress(self, progress: CreateProgress) -> None:
        if progress.total:
            self.create_progress.setRange(0, 1000)
            self.create_progress.setValue(int(1000 * progress.completed / progress.total))
        else:
            self.create_progress.setRange(0, 0)
        self._create_said(progress.status)

    def _create_said(self, text: str, error: bool = False) -> None:
        self.create_status.setText(text)
        color = error_color(self.palette()) if error else self.palette().color(QPalette.ColorRole.WindowText)
        set_text_color(self.create_status, color)

    # --- notices --------------------------------------------------------------------------------------------
    def show_notice(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.show()

    def hide_notice(self) -> None:
        self.notice.hide()


def _esc(text: object) -> str:
    return html.escape(str(text))
