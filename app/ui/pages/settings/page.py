"""The Settings page: a section list on the left, the section's form on the right (in a scroll area), Save and
Revert at the bottom. It edits a copy of the workstation's settings; Save sends the fields changed here through
``workstation.update_settings`` (the one road: saved, and every page listening follows). The log level takes
effect on Save; a theme applies, and is saved, as soon as it is chosen (on the next event-loop turn: never inside
the combo box's own signal)."""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import fields, replace
from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import Settings, SettingsError, load_settings
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation
from app.ui.page import Page
from app.ui.pages.settings.defaults_sections import LoadingSection, SamplingSection
from app.ui.pages.settings.section import Section
from app.ui.pages.settings.sections import (
    DownloadsSection,
    GeneralSection,
    LogSection,
    ModelsSection,
    MonitorSection,
    OllamaSection,
    VllmSection,
)
from app.ui.style.icons import icon, icon_size
from app.ui.style.restyle import NextTurn
from app.ui.style.theme import SPACE_M, SPACE_S, apply_theme, set_role, tokens
from app.ui.tasks import spawn
from app.ui.widgets.notices import NoticeArea

log = logging.getLogger("app.ui.settings")
SECTION_LIST_WIDTH = 176
FORM_MAX_WIDTH = 760  # roomy, but lines stay readable on a wide window
UNREADABLE = (
    "Your settings file could not be read, so the defaults are in use. Saving is off so that the file is not "
    "replaced: fix or remove it, then read it again."
)
STILL_UNREADABLE = "The settings file still cannot be read (the log says why). Fix or remove it, then try again."


class SettingsPage(Page):
    """Every setting of the app in sections; Save applies the fields changed here."""

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self._shown = copy.deepcopy(workstation.settings)
        self._loading = True  # until the first show_settings: building the fields emits their change signals
        self._theme_wanted = workstation.settings.theme
        self._apply_wanted_theme = NextTurn(self, lambda: self.apply_theme(self._theme_wanted))
        edited = self._edited
        self.general = GeneralSection(edited)
        self.loading = LoadingSection(edited)
        self.sampling = SamplingSection(edited)
        self.models = ModelsSection(edited, workstation.paths.models_dir)
        self.downloads = DownloadsSection(edited)
        self.ollama = OllamaSection(edited)
        self.vllm = VllmSection(edited)
        self.monitor = MonitorSection(edited)
        self.log_section = LogSection(edited, workstation.paths.log_file)
        self.sections: list[Section] = [
            self.general,
            self.loading,
            self.sampling,
            self.models,
            self.downloads,
            self.ollama,
            self.vllm,
            self.monitor,
            self.log_section,
        ]
        self._build()
        self.general.theme.currentTextChanged.connect(lambda _text: self._theme_chosen())
        self.show_settings(workstation.settings)
        self._sync_settings_problem()

    # --- layout ---------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.notices = NoticeArea()
        self.section_list = QListWidget()
        self.section_list.setObjectName("settings_sections")
        set_role(self.section_list, "sections")
        self.section_list.setFixedWidth(SECTION_LIST_WIDTH)
        self.section_list.setIconSize(icon_size(18))
        self.stack = QStackedWidget()
        for section in self.sections:
            self.section_list.addItem(QListWidgetItem(icon(section.icon), section.name))
            self.stack.addWidget(_scrolled(section.body))
        self.section_list.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.section_list.setCurrentRow(0)
        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(0)
        body.addWidget(self.section_list)
        body.addWidget(self.stack, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        notices = QVBoxLayout()
        notices.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, 0)
        notices.addWidget(self.notices)
        layout.addLayout(notices)
        layout.addLayout(body, 1)
        layout.addWidget(self._footer())
        shortcut = QShortcut(QKeySequence(QKeySequence.StandardKey.Save), self, lambda: self.save())
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)

    def _footer(self) -> QWidget:
        footer = QFrame()
        footer.setObjectName("settings_footer")
        set_role(footer, "footer")
        self.problems_icon = QLabel()
        self.problems_label = QLabel()
        self.problems_label.setObjectName("settings_problems")
        self.problems_label.setWordWrap(True)
        self.problems_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problems_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        set_role(self.problems_label, "error")
        self.unsaved_label = QLabel("Unsaved changes")
        set_role(self.unsaved_label, "muted")
        self.revert_button = QPushButton("Revert")
        self.revert_button.setToolTip("Forget the changes made here since the last save.")
        self.revert_button.clicked.connect(self.revert)
        self.save_button = QPushButton("Save")
        set_role(self.save_button, "accent")
        self.save_button.setDefault(True)
        self.save_button.clicked.connect(lambda _checked=False: self.save())
        row = QHBoxLayout(footer)
        row.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_S)
        row.addWidget(self.problems_icon, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.problems_label, 1)
        row.addStretch(0)
        row.addWidget(self.unsaved_label)
        row.addWidget(self.revert_button)
        row.addWidget(self.save_button)
        self._style()
        return footer

    def _style(self) -> None:
        colours = tokens(self.palette())
        self.problems_icon.setPixmap(icon("warning", colours.error).pixmap(icon_size(16)))
        for row, section in enumerate(self.sections):
            item = self.section_list.item(row)
            if item is not None:
                item.setIcon(icon(section.icon))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        palette_events = (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)
        if event.type() in palette_events and hasattr(self, "problems_label"):  # not while being built
            self._style()

    def show_section(self, name: str) -> None:
        """Show the section called ``name`` (as listed)."""
        row = next(i for i, section in enumerate(self.sections) if section.name == name)
        self.section_list.setCurrentRow(row)

    # --- the Page lifecycle --------------------------------------------------------------------------------
    def settings_changed(self, event: SettingsChanged) -> None:
        """Settings changed (here or on another page: the vLLM interpreter, the Monitor's port): show them unless
        the user is editing."""
        if not self.has_unsaved_changes():
            self.show_settings(self.workstation.settings)
        self._sync_settings_problem()

    # --- values ---------------------------------------------------------------------------------------------
    def show_settings(self, settings: Settings) -> None:
        """Fill every field from ``settings``; the page then has no unsaved changes."""
        self._loading = True
        try:
            for section in self.sections:
                section.show(settings)
        finally:
            self._loading = False
        self._shown = copy.deepcopy(settings)
        self._update()

    def settings(self) -> Settings:
        """The settings as entered: the fields shown here over the settings last shown (others carried over)."""
        values: dict[str, Any] = {}
        for section in self.sections:
            values.update(section.values(self._shown))
        return copy.deepcopy(replace(self._shown, **values))

    def changed_fields(self) -> list[str]:
        """The names of the settings the user changed here since they were last shown."""
        entered = self.settings()
        return [f.name for f in fields(Settings) if getattr(entered, f.name) != getattr(self._shown, f.name)]

    def has_unsaved_changes(self) -> bool:
        return bool(self.changed_fields())

    def problems(self) -> list[str]:
        """Why the entered settings cannot be saved; empty when they can."""
        return [problem for section in self.sections for problem in section.problems(self._shown)]

    def _edited(self) -> None:
        if not self._loading:
            self._update()

    def _update(self) -> None:
        problems = self.problems()
        self.problems_label.setText("\n".join(problems))
        self.problems_label.setVisible(bool(problems))
        self.problems_icon.setVisible(bool(problems))
        dirty = self.has_unsaved_changes()
        self.unsaved_label.setVisible(dirty and not problems)
        self.revert_button.setEnabled(dirty)
        blocked = self.workstation.settings_problem
        self.save_button.setEnabled(dirty and not problems and not blocked)
        if blocked:
            tip = "Saving is off: the settings file could not be read."
        elif problems:
            tip = "Fix the problems shown at the bottom first."
        else:
            tip = "Save the settings." if dirty else "Nothing changed yet."
        self.save_button.setToolTip(tip)

    # --- actions --------------------------------------------------------------------------------------------
    def save(self) -> Settings | None:
        """Apply the fields changed here (another page may have changed others meanwhile: they stay), the theme
        and the log level; None when nothing can be saved (no change, a problem, or an unreadable settings file)."""
        changed = self.changed_fields()
        if not changed or self.problems() or self.workstation.settings_problem:
            return None
        entered = self.settings()
        if "theme" in changed:
            self._set_theme(entered.theme)
        if "log_level" in changed:
            logging.getLogger("app").setLevel(entered.log_level)
        self.workstation.update_settings(**{name: getattr(entered, name) for name in changed})
        self.show_settings(self.workstation.settings)
        return self.workstation.settings

    def revert(self) -> None:
        """Forget the edits: show the settings in use."""
        self.show_settings(self.workstation.settings)

    def _theme_chosen(self) -> None:
        """A theme chosen in the list applies at once and is saved; the page's other edits stay unsaved."""
        if self._loading:
            return
        theme = self.general.values(self._shown)["theme"]
        self._set_theme(theme)
        if theme == self.workstation.settings.theme or self.workstation.settings_problem:
            return  # an unreadable settings file: shown now, saved with the rest once it reads
        self._shown = replace(self._shown, theme=theme)
        self.workstation.update_settings(theme=theme)
        self._update()

    def _set_theme(self, theme: str) -> None:
        """Apply ``theme`` on the next event-loop turn (several choices in one turn: the last one)."""
        self._theme_wanted = theme
        self._apply_wanted_theme()

    def theme_pending(self) -> bool:
        """A chosen theme is still waiting to be applied."""
        return self._apply_wanted_theme.pending()

    @staticmethod
    def apply_theme(theme: str) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_theme(app, theme)

    # --- an unreadable settings file ------------------------------------------------------------------------
    def _sync_settings_problem(self) -> None:
        if self.workstation.settings_problem:
            self.notices.show_notice(UNREADABLE, "warning", key="unreadable", action=("Read it again", self.reread))
        else:
            self.notices.dismiss("unreadable")
        self._update()

    def reread(self) -> asyncio.Task[Any]:
        """Read the settings file again (off the Qt thread); once it reads, its settings are used."""
        return spawn(self._reread(), "settings: read the file again")

    async def _reread(self) -> None:
        path = self.workstation.paths.settings_file
        try:
            loaded = await asyncio.get_running_loop().run_in_executor(None, load_settings, path)
        except SettingsError as exc:
            log.error("%s", exc)
            self.notices.show_notice(STILL_UNREADABLE, "warning", key="unreadable", action=("Try again", self.reread))
            return
        self.workstation.replace_settings(loaded)  # readable now: in use, and saving may replace it again
        self.show_settings(self.workstation.settings)
        self._sync_settings_problem()


def _scrolled(body: QWidget) -> QScrollArea:
    """A section's body in a frameless scroll area, no wider than ``FORM_MAX_WIDTH``."""
    body.setMaximumWidth(FORM_MAX_WIDTH)
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    area.setWidget(body)
    return area
