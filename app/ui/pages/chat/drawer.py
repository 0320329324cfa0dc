"""The chat's settings drawer (at the side, collapsible): the model's preset at its top, then its sampling, context
and load options — saved for that model — and the global defaults; last this chat's own: its tools and what happens
when its context is full."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.params import LoadParams, SamplingParams
from app.ui.pages.chat.overflow_picker import OverflowPicker
from app.ui.pages.chat.sampling_form import SamplingForm
from app.ui.pages.chat.thinking_form import ThinkingForm
from app.ui.pages.chat.tools_picker import ToolsPicker
from app.ui.style.icons import icon
from app.ui.style.theme import set_role
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.factories import wrapped_label
from app.ui.widgets.speculation_fields import SpeculationFields

DRAWER_WIDTH = 300
NO_PRESET = "No preset"


class LoadForm(QWidget):
    """The load options a person changes most: context size, GPU layers, speculative decoding and parallel sequences
    (the rest keep their values)."""

    changed = Signal()

    def __init__(self, params: LoadParams, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(256, 1_048_576)
        self.n_ctx.setSingleStep(1024)
        self.n_ctx.setGroupSeparatorShown(True)
        self.n_ctx.setToolTip("Tokens the model can hold: the conversation and the reply together.")
        self.n_gpu_layers = QSpinBox()
        self.n_gpu_layers.setRange(-1, 999)
        self.n_gpu_layers.setSpecialValueText("all")
        self.n_gpu_layers.setToolTip("Layers put on the GPU; 'all' when this llama.cpp build can offload.")
        self.speculation = SpeculationFields(self)
        self._base = params
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Context", self.n_ctx)
        form.addRow("GPU layers", self.n_gpu_layers)
        self.speculation.add_rows(form)
        self.set_params(params)
        self.n_ctx.valueChanged.connect(self.changed)
        self.n_gpu_layers.valueChanged.connect(self.changed)
        self.speculation.changed.connect(self.changed)

    def set_params(self, params: LoadParams) -> None:
        self._base = params
        for box in (self.n_ctx, self.n_gpu_layers):
            box.blockSignals(True)
        self.n_ctx.setValue(params.n_ctx)
        self.n_gpu_layers.setValue(-1 if params.n_gpu_layers is None else params.n_gpu_layers)
        for box in (self.n_ctx, self.n_gpu_layers):
            box.blockSignals(False)
        self.speculation.set_values(params.speculative, params.n_parallel)

    def params(self) -> LoadParams:
        layers = self.n_gpu_layers.value()
        params = replace(self._base, n_ctx=self.n_ctx.value(), n_gpu_layers=None if layers < 0 else layers)
        return self.speculation.apply(params)


class SettingsDrawer(QFrame):
    """Emits what the person does; the chat page saves it (per model) and applies it."""

    preset_chosen = Signal(str, str)  # path, name
    sampling_changed = Signal()
    load_changed = Signal()
    reload_requested = Signal()
    save_defaults_requested = Signal()
    reset_requested = Signal()
    restore_toggled = Signal(bool)
    close_requested = Signal()

    def __init__(self, sampling: SamplingParams, load: LoadParams, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chat_drawer")
        set_role(self, "drawer")
        self.setMinimumWidth(240)
        self.setMaximumWidth(DRAWER_WIDTH + 60)
        self.model_name = ElidedLabel(mode=Qt.TextElideMode.ElideMiddle)
        set_role(self.model_name, "muted")
        self.close_button = QToolButton()
        self.close_button.setIcon(icon("chevron-right"))
        self.close_button.setToolTip("Hide the settings")
        self.presets = QComboBox()
        self.presets.setObjectName("preset_picker")
        self.presets.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.presets.setMinimumContentsLength(10)
        self.presets.setToolTip("A Modelfile preset: its sampling, load options and system prompt")
        self.presets.addItem(NO_PRESET, "")
        self.sampling = SamplingForm(sampling)
        self.thinking = ThinkingForm()  # shown only for a model that offers thinking switches
        self.load = LoadForm(load)
        self.reload_note = wrapped_label("Reload the model to use the new load options.", hidden=True)
        set_role(self.reload_note, "muted")
        self.reload_button = QPushButton("Reload now")
        self.reload_button.hide()
        self.save_defaults_button = QPushButton("Save as defaults")
        self.save_defaults_button.setToolTip("Use these settings for every model without its own")
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Forget this model's own settings: back to the defaults")
        self.restore_last = QCheckBox("Load the last model at start-up")
        self.overflow = OverflowPicker()
        self.tools = ToolsPicker()
        self._build()
        self._connect()

    def _build(self) -> None:
        header = QHBoxLayout()
        title = QLabel("Settings")
        set_role(title, "section")
        header.addWidget(title)
        header.addStretch(1)
        header.addWidget(self.close_button)
        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(12, 4, 12, 12)
        column.addWidget(_section("This model"))  # what is changed most comes first; the chat's own last
        column.addWidget(self.model_name)
        preset = QFormLayout()
        preset.setContentsMargins(0, 4, 0, 0)
        preset.addRow("Preset", self.presets)
        column.addLayout(preset)
        column.addWidget(self.thinking)
        column.addWidget(_section("Sampling"))
        column.addWidget(self.sampling)
        column.addWidget(_section("Context and loading"))
        column.addWidget(self.load)
        column.addWidget(self.reload_note)
        column.addWidget(self.reload_button)
        row = QHBoxLayout()
        row.addWidget(self.save_defaults_button)
        row.addWidget(self.reset_button)
        column.addSpacing(6)
        column.addLayout(row)
        column.addWidget(self.restore_last)
        column.addWidget(_section("This chat"))
        column.addWidget(self.tools)
        column.addSpacing(6)
        column.addWidget(self.overflow)
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(body)
        scroll.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Ignored)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 0)
        layout.setSpacing(0)
        top = QWidget()
        top.setLayout(header)
        header.setContentsMargins(12, 0, 6, 0)
        layout.addWidget(top)
        layout.addWidget(scroll, 1)

    def _connect(self) -> None:
        self.presets.activated.connect(self._preset_activated)
        self.sampling.changed.connect(self.sampling_changed)
        self.load.changed.connect(self.load_changed)
        self.reload_button.clicked.connect(self.reload_requested)
        self.save_defaults_button.clicked.connect(self.save_defaults_requested)
        self.reset_button.clicked.connect(self.reset_requested)
        self.restore_last.toggled.connect(self.restore_toggled)
        self.close_button.clicked.connect(self.close_requested)

    # --- what it shows ------------------------------------------------------------------------------------------
    def show_model(self, name: str | None) -> None:
        self.model_name.set_full_text(f"For {name}" if name else "For the next model you load")
        self.reset_button.setEnabled(name is not None)

    def set_presets(self, presets: list[tuple[str, str]]) -> None:
        """(name, path) of every preset, shipped and the person's own."""
        current = self.presets.currentText()
        self.presets.blockSignals(True)
        self.presets.clear()
        self.presets.addItem(NO_PRESET, "")
        for name, path in presets:
            self.presets.addItem(name, path)
            self.presets.setItemData(self.presets.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        self.show_preset(current if current != NO_PRESET else None)
        self.presets.blockSignals(False)

    def show_preset(self, name: str | None) -> None:
        """The preset the model's settings came from (None: none)."""
        index = self.presets.findText(name) if name else 0
        self.presets.blockSignals(True)
        self.presets.setCurrentIndex(max(index, 0))
        self.presets.blockSignals(False)

    def show_settings(self, sampling: SamplingParams, load: LoadParams, preset: str | None) -> None:
        """The model's settings, without emitting changes."""
        self.sampling.blockSignals(True)
        self.sampling.set_params(sampling)
        self.sampling.blockSignals(False)
        self.load.set_params(load)
        self.show_preset(preset)

    def show_reload_needed(self, needed: bool) -> None:
        self.reload_note.setVisible(needed)
        self.reload_button.setVisible(needed)

    def set_restore_last(self, checked: bool) -> None:
        self.restore_last.blockSignals(True)
        self.restore_last.setChecked(checked)
        self.restore_last.blockSignals(False)

    def _preset_activated(self, index: int) -> None:
        path = str(self.presets.itemData(index) or "")
        if path:
            self.preset_chosen.emit(path, self.presets.itemText(index))


def _section(text: str) -> QLabel:
    label = QLabel(text)
    set_role(label, "section")
    return label
