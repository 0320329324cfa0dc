"""A model's own chat defaults, edited from the Library: the context size and GPU layers it loads with, and the
temperature, top P and reply length it samples with, kept in the per-model settings store
(``workstation.model_settings``) that the chat and the API server read whenever the model is loaded.

The store reads and writes its file: every call to it runs in the executor.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QSpinBox, QVBoxLayout, QWidget

from app.core.params import LoadParams, SamplingParams
from app.services.library.index import KIND_GGUF, SOURCE_OLLAMA
from app.services.model_settings import ModelSettings
from app.services.workstation import Workstation
from app.ui.pages.models.widgets import icon_button, shrinking_label
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.sampling_spin import sampling_spin
from app.ui.widgets.speculation_fields import SpeculationFields

log = logging.getLogger("app.ui.models")
MAX_CONTEXT = 1 << 20
USING_DEFAULTS = "Uses the app's defaults (Settings) until you save values for this model."


class ModelDefaultsBox(QWidget):
    """``set_entry(path)`` shows that model's defaults; Save keeps the form's values for it, Reset forgets them.
    ``speculative_changed`` carries the form's speculative decoding (``"off"``, ``"ngram"``, ``"draft:<path>"``) when
    a model's values are shown and on every edit (the Library's estimate adds the draft's memory)."""

    speculative_changed = Signal(str)

    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("model_defaults")
        self.workstation = workstation
        self.entry: str | None = None
        self.current: ModelSettings | None = None
        self._task: asyncio.Task[Any] | None = None
        self._build()

    def _build(self) -> None:
        self.context_size = QSpinBox()
        self.context_size.setRange(256, MAX_CONTEXT)
        self.context_size.setSingleStep(1024)
        self.context_size.setSuffix(" tokens")
        self.context_size.setGroupSeparatorShown(True)  # 4,096 as everywhere else
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("all (when there is a GPU)")
        self.temperature = sampling_spin(0.0, 2.0, 0.05, "Higher: more varied replies; 0: always the likeliest word.")
        self.top_p = sampling_spin(0.0, 1.0, 0.05, "Sample from the smallest set of words this likely together.")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, MAX_CONTEXT)
        self.max_tokens.setSingleStep(128)
        self.max_tokens.setSpecialValueText("until the context is full")
        self.max_tokens.setSuffix(" tokens")
        self.max_tokens.setGroupSeparatorShown(True)  # 4,096 as everywhere else
        self.speculation = SpeculationFields(self)  # speculative decoding (drafts from the library) and parallel
        self.speculation.changed.connect(self._speculation_edited)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow("Context", self.context_size)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top P", self.top_p)
        form.addRow("Reply length", self.max_tokens)
        self.speculation.add_rows(form)
        self.status = shrinking_label(USING_DEFAULTS, "model_defaults_status", "muted")
        self.save_button = icon_button("Save for this model", "check", self.save, accent=True)
        self.reset_button = icon_button("Use the defaults", "refresh", self.reset)
        buttons = QHBoxLayout()
        buttons.addWidget(self.save_button)
        buttons.addWidget(self.reset_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self._set_enabled(False)

    def _set_enabled(self, enabled: bool) -> None:
        for widget in (self.context_size, self.gpu_layers, self.temperature, self.top_p, self.max_tokens):
            widget.setEnabled(enabled)
        self.speculation.set_enabled(enabled)
        self.save_button.setEnabled(enabled)
        self.reset_button.setEnabled(enabled)

    # --- reading -----------------------------------------------------------------------------------------------
    def set_entry(self, entry: str | None) -> asyncio.Task[Any] | None:
        """Show the defaults of ``entry`` (a GGUF path), read off the Qt thread; None: nothing to edit."""
        self.entry, self.current = entry, None
        self._set_enabled(False)
        gguf = entry if entry is not None and entry.lower().endswith(".gguf") else None
        self.speculation.set_model(gguf, self._library_ggufs())
        if entry is None or not loop_running():
            return None
        self._task = spawn(self._read(entry), "models: read model defaults")
        return self._task

    async def _read(self, entry: str) -> None:
        store = self.workstation.model_settings

        def read() -> tuple[ModelSettings, bool, LoadParams, SamplingParams]:
            store.load()
            return (
                store.get(entry),
                store.saved(entry) is not None,
                store.effective_load(entry),
                store.effective_sampling(entry),
            )

        settings, saved, load, sampling = await asyncio.get_running_loop().run_in_executor(None, read)
        if entry != self.entry:
            return  # another model was chosen meanwhile
        self.current = settings
        self._show(load, sampling)
        self._set_enabled(store.problem is None)
        self.status.setText(self._describe(settings, saved, store.problem))

    def _library_ggufs(self) -> list[str]:
        """The library's GGUFs the chat offers: the draft candidates (the check leaves out projectors)."""
        scan = self.workstation.library.snapshot()
        entries = scan.entries if scan else []
        return [e.path for e in entries if e.kind is KIND_GGUF and not e.error and e.source != SOURCE_OLLAMA]

    def _show(self, load: LoadParams, sampling: SamplingParams) -> None:
        self.context_size.setValue(load.n_ctx)
        self.gpu_layers.setValue(-1 if load.n_gpu_layers is None else load.n_gpu_layers)
        self.temperature.setValue(sampling.temperature)
        self.top_p.setValue(sampling.top_p)
        self.max_tokens.setValue(sampling.max_tokens or 0)
        self.speculation.set_values(load.speculative, load.n_parallel)
        self.speculative_changed.emit(self.speculation.speculative())

    def _speculation_edited(self) -> None:
        self.speculative_changed.emit(self.speculation.speculative())

    @staticmethod
    def _describe(settings: ModelSettings, saved: bool, problem: str | None) -> str:
        if problem:
            return problem
        preset = f" Preset: {settings.preset}." if settings.preset else ""
        if saved:
            return "Saved for this model: used whenever it is loaded." + preset
        if not settings.empty:
            return "Its built-in defaults, until you save your own." + preset
        return USING_DEFAULTS

    # --- writing -----------------------------------------------------------------------------------------------
    def form_settings(self) -> ModelSettings:
        """The form's values over what the model has now (its other load and sampling options kept)."""
        current = self.current or ModelSettings()
        base_load = current.load or self.workstation.settings.load
        base_sampling = current.sampling or self.workstation.settings.sampling
        layers = self.gpu_layers.value()
        load = replace(base_load, n_ctx=self.context_size.value(), n_gpu_layers=None if layers < 0 else layers)
        load = self.speculation.apply(load)
        sampling = replace(
            base_sampling,
            temperature=round(self.temperature.value(), 3),
            top_p=round(self.top_p.value(), 3),
            max_tokens=self.max_tokens.value() or None,
        )
        return replace(current, load=load, sampling=sampling)

    def save(self) -> asyncio.Task[Any] | None:
        if self.entry is None:
            return None
        entry, settings = self.entry, self.form_settings()
        return spawn(
            self._write(entry, lambda: self.workstation.model_settings.set(entry, settings)), "models: save defaults"
        )

    def reset(self) -> asyncio.Task[Any] | None:
        if self.entry is None:
            return None
        entry = self.entry
        store = self.workstation.model_settings
        return spawn(self._write(entry, lambda: store.forget(entry)), "models: reset defaults")

    async def _write(self, entry: str, change: Any) -> None:
        self._set_enabled(False)
        try:
            await asyncio.get_running_loop().run_in_executor(None, change)
        except OSError as exc:
            log.warning("The per-model settings of %s were not saved: %s", entry, exc)
            self.status.setText(f"Not saved: {exc.strerror or exc}. Check the data folder's permissions.")
            self._set_enabled(True)
            return
        if entry == self.entry:
            await self._read(entry)
