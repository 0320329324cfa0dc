"""The Modelfiles panel: the user's Modelfiles and the shipped presets, a form and the raw text kept in step,
Ollama's own errors, Check, Use in chat, and Create in Ollama.

The panel orchestrates; the file list with its New/Open/Save/Delete and inline questions is
:class:`~app.ui.pages.modelfiles.files.ModelfileFiles`, the create strip
:class:`~app.ui.pages.modelfiles.ollama_create_bar.OllamaCreateBar`."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSplitter, QVBoxLayout, QWidget

from app.core.modelfile.params import check_modelfile
from app.core.modelfile.parser import Modelfile, ModelfileError
from app.core.user_files import UserFileError
from app.services.ollama.client import OllamaError
from app.services.presets import shipped_presets_dir
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.modelfiles.editor import ModelfileTextPane
from app.ui.pages.modelfiles.files import SUFFIX, ModelfileFiles, read_document
from app.ui.pages.modelfiles.form import ModelfileForm
from app.ui.pages.modelfiles.ollama_create_bar import OllamaCreateBar
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_S, set_role
from app.ui.tasks import spawn
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.notices import NoticeArea

log = logging.getLogger("app.ui.modelfiles")
PROBLEM_KEY, CHECK_KEY = "problem", "check"
MAX_CHECK_LINES = 4  # more would push the editors down: the Parameters tab marks every row anyway


def _scan_ggufs(folders: list[Path], limit: int = 200) -> list[str]:
    found: list[str] = []
    for folder in folders:
        try:
            found += sorted(str(p) for p in folder.rglob("*.gguf") if p.is_file())
        except OSError:
            continue
    return list(dict.fromkeys(found))[:limit]


class ModelfilePanel(Page):
    use_in_chat_requested = Signal(object)  # the parsed Modelfile

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.saved_text = ""
        self.ollama_running = False
        self._started: asyncio.Task[Any] | None = None
        self._untitled = "Untitled Modelfile"
        self._rechecking = False
        self._build()
        self._show_title()

    # --- layout ------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.form = ModelfileForm()
        self.text = ModelfileTextPane()
        self.editor = self.text.editor
        self.files = ModelfileFiles(
            self.workstation.paths.modelfiles_dir, shipped_presets_dir(), self.editor.toPlainText
        )
        self.creator = OllamaCreateBar()
        self.title = ElidedLabel()
        self.title.setObjectName("modelfile_title")
        set_role(self.title, "section")
        self.badge = QLabel("Preset · read-only")
        self.badge.setObjectName("modelfile_badge")
        set_role(self.badge, "muted")
        self.copy_button = QPushButton(icon("copy"), "Duplicate to edit")
        self.copy_button.setToolTip("Make an editable copy of this preset (saved in your Modelfiles)")
        set_role(self.copy_button, "accent")
        self.notice = NoticeArea()
        self.check_button = QPushButton(icon("check"), "Check")
        self.check_button.setToolTip("Check the parameters as Ollama would")
        self.use_button = QPushButton(icon("chat"), "Use in chat")
        self.use_button.setToolTip("Apply this Modelfile to the chat as a preset")
        self.create_button = QPushButton("Create in Ollama…")
        self.ollama_label = QLabel("Checking for Ollama…")
        self.ollama_label.setObjectName("ollama_status")
        self.ollama_label.setWordWrap(True)
        self.ollama_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        set_role(self.ollama_label, "muted")
        self.recheck_button = QPushButton("Check again")
        self.recheck_button.hide()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.files)
        splitter.addWidget(self._center())
        splitter.setSizes([240, 960])
        splitter.setStretchFactor(1, 1)
        splitter.setCollapsible(1, False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_S, SPACE_S, SPACE_S, SPACE_S)
        layout.addWidget(splitter)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Save), self, self._save_shortcut).setContext(
            Qt.ShortcutContext.WidgetWithChildrenShortcut
        )
        self._connect()

    def _center(self) -> QWidget:
        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(SPACE_S, 0, 0, 0)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.badge)
        head.addWidget(self.copy_button)
        for button in (self.files.save_button, self.files.save_as_button, self.files.delete_button):
            head.addWidget(button)
        layout.addLayout(head)
        for widget in (self.notice, self.files.ask_bar, self.files.name_bar):
            layout.addWidget(widget)
        editors = QSplitter(Qt.Orientation.Horizontal)
        editors.addWidget(self.form)
        editors.addWidget(self.text)
        editors.setSizes([520, 440])
        editors.setChildrenCollapsible(False)
        layout.addWidget(editors, 1)
        actions = QHBoxLayout()
        for button in (self.check_button, self.use_button, self.create_button):
            actions.addWidget(button)
        actions.addWidget(self.ollama_label, 1)
        actions.addWidget(self.recheck_button)
        layout.addLayout(actions)
        layout.addWidget(self.creator)
        return column

    def _connect(self) -> None:
        self.files.open_requested.connect(self.open_path)
        self.files.new_requested.connect(self.new_file)
        self.files.saved.connect(self._saved)
        self.files.deleted.connect(lambda _path: self._new())
        self.files.problem.connect(self.show_notice)
        self.copy_button.clicked.connect(self.edit_copy)
        self.editor.textChanged.connect(self._show_title)
        self.text.parsed.connect(self._parsed)
        self.text.failed.connect(self._failed)
        self.form.edited.connect(self._form_edited)
        self.check_button.clicked.connect(self.check)
        self.use_button.clicked.connect(self.use_in_chat)
        self.create_button.clicked.connect(self._offer_create)
        self.creator.create_requested.connect(self.create_in_ollama)
        self.creator.created.connect(lambda _name: spawn(self.refresh_from_choices(), "modelfiles: FROM choices"))
        self.recheck_button.clicked.connect(self.recheck)
        self.create_button.setEnabled(False)

    # --- start ---------------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[Any]:
        """List the Modelfiles and the FROM choices, and ask Ollama whether it runs (all off the Qt thread)."""
        if self._started is None:
            self._started = spawn(self.refresh(), "modelfiles: refresh")
        return self._started

    def shown_again(self) -> None:
        """A later show asks Ollama again (it may have been started since)."""
        self.recheck()

    def recheck(self) -> None:
        """Ask Ollama again and refill the FROM choices: on a later show, Check again, or changed settings."""
        if self._started is not None and self._started.done() and not self._rechecking:
            self._rechecking = True
            spawn(self._recheck(), "modelfiles: recheck")

    def settings_changed(self, event: SettingsChanged) -> None:
        """The Ollama host, the model folders or the recent models changed: ask again."""
        if event.touches("ollama_host", "model_folders", "recent_models"):
            self.recheck()

    async def _recheck(self) -> None:
        try:
            await self.refresh_ollama()
            await self.refresh_from_choices()
        finally:
            self._rechecking = False

    async def refresh(self) -> None:
        await asyncio.gather(self.files.refresh(), self.refresh_ollama())
        await self.refresh_from_choices()

    async def refresh_from_choices(self) -> None:
        settings = self.workstation.settings
        folders = [self.workstation.paths.models_dir, *(Path(f) for f in settings.model_folders)]
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
            async with self.workstation.ollama.use() as service:
                models = await service.list_models()
        except OllamaError as exc:  # the list is a convenience: say why in the log and go on
            log.info("Ollama models not listed: %s", exc)
            return []
        return [("Ollama model", [m.name for m in models])]

    async def refresh_ollama(self) -> None:
        try:
            async with self.workstation.ollama.use() as service:
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
            self.creator.bar.hide()

    # --- documents ---------------------------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        """The file on screen; None while it is not saved yet."""
        return self.files.path

    @property
    def is_preset(self) -> bool:
        return self.files.is_preset

    def has_unsaved_changes(self) -> bool:
        return self.editor.toPlainText() != self.saved_text

    def _show_title(self) -> None:
        name = self.path.name if self.path else self._untitled
        mark = " •" if self.has_unsaved_changes() else ""
        self.title.set_full_text(f"{name}{mark}")
        self.title.setToolTip(str(self.path or "Not saved yet"))
        self.badge.setVisible(self.is_preset)
        self.copy_button.setVisible(self.is_preset)

    def _guard(self, then: Callable[[], None]) -> None:
        """Run ``then`` now, or after the user answers the unsaved-changes bar."""
        if not self.has_unsaved_changes():
            then()
            return
        name = self.path.name if self.path else "this Modelfile"
        self.files.ask_bar.ask(
            f"{name} has unsaved changes.",
            [("Save", lambda: self.save(then=then)), ("Discard", then), ("Cancel", self.files.select_current)],
        )

    def open_path(self, path: Path) -> None:
        preset = self.files.is_preset_path(path)
        self._guard(lambda: self._open(path, preset))

    def _open(self, path: Path, preset: bool) -> None:
        spawn(self._load(path, preset), "open Modelfile")

    async def _load(self, path: Path, preset: bool) -> None:
        try:
            text = await asyncio.get_running_loop().run_in_executor(None, read_document, path)
        except UserFileError as exc:  # a FIFO, a device, over 1 MiB
            self.show_notice(f"Cannot open it: {exc}")
            return
        except OSError as exc:
            self.show_notice(f"Cannot read {path}: {exc.strerror or exc}")
            return
        self._set_document(text, path, preset)

    def _set_document(self, text: str, path: Path | None, preset: bool, saved: str | None = None) -> None:
        self.files.set_current(path, preset)
        self.saved_text = text if saved is None else saved
        self.hide_notice()
        self.form.base_dir = path.parent if path else self.workstation.paths.modelfiles_dir
        self.form.set_read_only(preset)
        self.text.set_text(text, read_only=preset)
        self._show_title()

    def new_file(self) -> None:
        self._guard(self._new)

    def _new(self) -> None:
        self.files.name_edit.clear()
        self._untitled = "Untitled Modelfile"
        self._set_document("", None, False)

    def edit_copy(self) -> None:
        """Turn the preset on screen into an unsaved copy that can be edited and saved in the user's folder."""
        if self.is_preset and self.path is not None:
            name = self.path.name
            self._untitled = f"Copy of {name} (not saved yet)"
            self._set_document(self.editor.toPlainText(), None, False, saved="")
            self.files.name_edit.setText(Path(name).stem)

    def save(self, then: Callable[[], None] | None = None) -> None:
        """Save to the file on screen, or ask for a name (a new Modelfile, a preset); then run ``then``."""
        self.files.save(then)

    def save_as(self, then: Callable[[], None] | None = None) -> None:
        """Ask for a name inline; the file goes into the user's Modelfiles folder."""
        self.files.save_as(then)

    def _saved(self, target: Path, text: str) -> None:
        self.saved_text = text
        self.editor.setReadOnly(False)
        self.form.set_read_only(False)
        self.form.base_dir = target.parent
        self.hide_notice()
        self._show_title()

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
        lines = [str(p) for p in result.problems] + [str(w) for w in result.warnings]
        if not lines:
            text = f"No problems: Ollama accepts all {len(result.parameters)} parameter(s)."
            self.notice.show_notice(text, "success", key=CHECK_KEY)
            return
        shown = lines[:MAX_CHECK_LINES]
        if len(lines) > len(shown):
            shown.append(f"… and {len(lines) - len(shown)} more (the Parameters tab marks each).")
        level = "error" if result.problems else "warning"
        self.notice.show_notice("\n".join(shown), level, key=CHECK_KEY)

    def use_in_chat(self) -> None:
        modelfile = self.parsed()
        if modelfile is not None:
            self.use_in_chat_requested.emit(copy.deepcopy(modelfile))

    def _offer_create(self) -> None:
        self.creator.offer(self.path.name.removesuffix(SUFFIX) if self.path else "")

    def create_in_ollama(self) -> None:
        modelfile = self.parsed()
        if modelfile is not None:
            base = self.path.parent if self.path else self.workstation.paths.modelfiles_dir
            self.creator.create_from(modelfile, base, self.workstation.ollama)

    # --- notices --------------------------------------------------------------------------------------------
    def show_notice(self, text: str, level: str = "error") -> None:
        self.notice.show_notice(text, level, key=PROBLEM_KEY)

    def hide_notice(self) -> None:
        self.notice.clear()

    def _save_shortcut(self) -> None:
        if self.files.save_button.isEnabled():
            self.save()
