"""The drawer's thinking control: thinking on or off and the reasoning effort, shown only where the loaded model's
chat template (or engine) offers them, and remembered for that model in the per-model settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QWidget

from app.core.chat.thinking import NO_CONTROLS, ThinkingChoice, ThinkingControls
from app.core.params import REASONING_EFFORTS
from app.ui.tasks import spawn

if TYPE_CHECKING:
    from app.services.chat.workspace import ChatWorkspace

DEFAULT = "Model's default"
TOGGLES: tuple[tuple[str, bool | None], ...] = ((DEFAULT, None), ("On", True), ("Off", False))


class ThinkingForm(QWidget):
    """Two choices; ``changed`` when the person picks one. Hidden while the model offers neither."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thinking_form")
        self.toggle = QComboBox()
        self.toggle.setObjectName("thinking_toggle")
        self.toggle.setToolTip("Let the model think before it answers (slower, often better on hard questions)")
        for text, value in TOGGLES:
            self.toggle.addItem(text, value)
        self.effort = QComboBox()
        self.effort.setObjectName("thinking_effort")
        self.effort.setToolTip("How much the model thinks before it answers")
        self.effort.addItem(DEFAULT, None)
        for effort in REASONING_EFFORTS:
            self.effort.addItem(effort.capitalize(), effort)
        self.title = QLabel("Thinking")
        self.title.setProperty("role", "section")
        self.form = QFormLayout(self)
        self.form.setContentsMargins(0, 0, 0, 0)
        self.form.addRow(self.title)
        self.form.addRow("Thinking", self.toggle)
        self.form.addRow("Effort", self.effort)
        self.controls = NO_CONTROLS
        self.toggle.activated.connect(self.changed)
        self.effort.activated.connect(self.changed)
        self.show_controls(NO_CONTROLS, ThinkingChoice())

    def show_controls(self, controls: ThinkingControls, choice: ThinkingChoice) -> None:
        """What the model offers, set to ``choice`` (without emitting ``changed``)."""
        self.controls = controls
        self.form.setRowVisible(1, bool(controls.toggle))
        self.form.setRowVisible(2, bool(controls.effort))
        self.toggle.setCurrentIndex(max(0, self.toggle.findData(choice.enabled)))
        self.effort.setCurrentIndex(max(0, self.effort.findData(choice.effort)))
        self.setVisible(controls.any)

    def choice(self) -> ThinkingChoice:
        enabled = self.toggle.currentData() if self.controls.toggle else None
        effort = self.effort.currentData() if self.controls.effort else None
        return ThinkingChoice(enabled, effort)


class ThinkingControl:
    """Keeps ``form`` in step with the model the chats run on, and saves the person's choice for that model."""

    def __init__(self, form: ThinkingForm, workspace: ChatWorkspace) -> None:
        self.form = form
        self.workspace = workspace
        form.changed.connect(self._chosen)

    def refresh(self) -> None:
        """The loaded model changed: show what it offers (read off the Qt thread)."""
        spawn(self.show_model(), "thinking controls")

    async def show_model(self) -> None:
        from app.services.engines.reply_formats import thinking_controls_for

        workspace = self.workspace
        loaded = workspace.host.loaded(workspace.engine)
        controls = await thinking_controls_for(workspace.engine, loaded)
        entry = workspace.entry
        choice = workspace.settings_of(entry).thinking_choice if entry else ThinkingChoice()
        self.form.show_controls(controls, choice)

    def _chosen(self) -> None:
        entry = self.workspace.entry
        if entry is None:
            return
        choice = self.form.choice()
        spawn(self.workspace.remember(entry, thinking=choice.enabled, effort=choice.effort), "save thinking choice")
