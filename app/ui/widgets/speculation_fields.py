"""A model's llama.cpp speculative decoding and parallel sequences, as form rows (the chat drawer and the Library).

Speculative decoding is Off, N-gram lookup (no second model) or a Draft model from the library. The draft picker
lists the library's GGUFs that can draft for the model first; the others are disabled with the failed check's
words as their tooltip (``app.core.gguf.draft_compat``). The headers are read off the Qt thread; projector files
are never listed. Values travel as ``LoadParams.speculative`` ("off" | "ngram" | "draft:<path>") and
``LoadParams.n_parallel`` (None, shown "auto": the API server runs as many as fit by the memory estimate, chats
one at a time; 1: one at a time; N > 1 runs the window's chats side by side on the parallel engine too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QSizePolicy, QSpinBox, QWidget

from app.core.gguf.draft_compat import DraftVerdict, check_draft
from app.core.gguf.projector import looks_like_projector_name
from app.core.params import LoadParams
from app.core.speculative import DRAFT_PREFIX, OFF, SpeculativeSetting, parse_speculative
from app.ui.style.theme import set_role
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.factories import wrapped_label

MODES = (("Off", "off"), ("N-gram lookup", "ngram"), ("Draft model", "draft"))
MAX_PARALLEL = 64
CHECKING = "Checking which library models can draft for this one…"
NO_DRAFTS = "No model in the library can draft for this one (same tokenizer needed); speculative decoding stays off."
NO_DRAFT_CHOSEN = "Choose a draft model; until then speculative decoding stays off."


def draft_verdicts(entry: str, candidates: Sequence[str]) -> list[tuple[str, DraftVerdict]]:
    """Each candidate but the model itself and projector files, with its verdict; compatible ones first.
    Reads GGUF headers: call it off the Qt thread."""
    others = [c for c in candidates if c != entry and not looks_like_projector_name(Path(c).name)]
    verdicts = [(path, check_draft(path, entry)) for path in others]
    return sorted(verdicts, key=lambda item: (not item[1].ok, Path(item[0]).name.lower()))


class SpeculationFields(QObject):
    """Rows for a form (:meth:`add_rows`, so their labels line up with the form's); ``changed`` fires on every
    edit; :meth:`apply` puts the choice into a ``LoadParams``."""

    changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._form: QFormLayout | None = None
        self._enabled = True
        self.entry: str | None = None
        self.verdicts: list[tuple[str, DraftVerdict]] = []
        self._wanted_draft: str | None = None  # the saved draft, selected once the list is known
        self._task: asyncio.Task[Any] | None = None
        self._checking = False
        self.mode = _combo("speculative_mode")
        for text, value in MODES:
            self.mode.addItem(text, value)
        self.mode.setToolTip(
            "Speculative decoding: a cheap guess proposes several tokens that the model checks in one step. N-gram "
            "lookup copies from the conversation (best when the reply repeats it); a draft model needs the same "
            "tokenizer. It loads the model with flash attention, so that a checked guess is computed exactly as one "
            "token at a time: at temperature 0 the reply is the same text, only sooner."
        )
        self.draft = _combo("speculative_draft")
        self.draft.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)  # file names are long
        self.draft_note = wrapped_label(name="speculative_note", hidden=True)
        set_role(self.draft_note, "muted")
        self.n_parallel = QSpinBox()
        self.n_parallel.setObjectName("n_parallel")
        self.n_parallel.setRange(0, MAX_PARALLEL)
        self.n_parallel.setSpecialValueText("auto")
        self.n_parallel.setToolTip(
            "Replies generated at once on this model, each with its full context (continuous batching; the memory "
            "estimate refuses what does not fit). Auto: the local API server runs as many requests at once as fit "
            "(up to 4), chats one at a time. 1: one at a time. 2 or more: up to that many, chats in this window "
            "too (several chats generating at once, with the API server's requests; beyond N they wait in a "
            "visible queue). Replies run side by side are not speculative. `serve --parallel N|auto` overrides it "
            "for the API server."
        )
        self.mode.currentIndexChanged.connect(self._mode_changed)
        self.draft.currentIndexChanged.connect(self._draft_changed)
        self.n_parallel.valueChanged.connect(self.changed)

    def add_rows(self, form: QFormLayout) -> None:
        """Speculative decoding, its draft (shown for a draft model) and a note, then parallel sequences."""
        self._form = form
        form.addRow(_label("Speculation", self.mode), self.mode)  # speculative decoding
        form.addRow(_label("Draft model", self.draft), self.draft)
        form.addRow(self.draft_note)
        form.addRow(_label("Parallel sequences", self.n_parallel), self.n_parallel)
        self._show_draft_row()

    def set_enabled(self, enabled: bool) -> None:
        self._enabled = enabled
        self.mode.setEnabled(enabled)
        self.n_parallel.setEnabled(enabled)
        self._show_draft_row()

    # --- values -------------------------------------------------------------------------------------------------
    def set_values(self, speculative: str, n_parallel: int | None) -> None:
        """Show saved values without emitting ``changed``."""
        blocked = self.blockSignals(True)
        try:
            setting = parse_speculative(speculative)
        except ValueError:  # a hand-edited settings file: shown as off
            setting = SpeculativeSetting(OFF)
        mode, self._wanted_draft = setting.mode, setting.draft_path
        self.mode.setCurrentIndex(max(0, self.mode.findData(mode)))
        self._fill_drafts()
        self.n_parallel.setValue(n_parallel or 0)
        self.blockSignals(blocked)

    def speculative(self) -> str:
        """``"off"``, ``"ngram"`` or ``"draft:<path>"`` ("off" once the list shows no compatible draft chosen)."""
        mode = str(self.mode.currentData())
        if mode != "draft":
            return mode
        path = self.draft.currentData()
        if not path and (self._checking or not self.verdicts):  # the list is not known yet: keep the saved one
            path = self._wanted_draft
        return f"{DRAFT_PREFIX}{path}" if path else "off"

    def apply(self, params: LoadParams) -> LoadParams:
        return replace(params, speculative=self.speculative(), n_parallel=self.n_parallel.value() or None)

    # --- the draft list ---------------------------------------------------------------------------------------
    def set_model(self, entry: str | None, candidates: Sequence[str]) -> asyncio.Task[Any] | None:
        """Check which of ``candidates`` (library GGUFs) can draft for ``entry``, off the Qt thread."""
        self.entry, self.verdicts = entry, []
        self._checking = entry is not None and loop_running()
        self._fill_drafts()
        if not self._checking or entry is None:
            return None
        self._task = spawn(self._check(entry, list(candidates)), "speculation: check drafts")
        return self._task

    async def _check(self, entry: str, candidates: list[str]) -> None:
        verdicts = await asyncio.get_running_loop().run_in_executor(None, draft_verdicts, entry, candidates)
        if entry == self.entry:  # not another model meanwhile
            self.verdicts, self._checking = verdicts, False
            self._fill_drafts()

    def _fill_drafts(self) -> None:
        """The list: compatible drafts enabled, the others disabled with the failed check's words."""
        wanted = self._wanted_draft or self.draft.currentData()
        self.draft.blockSignals(True)
        self.draft.clear()
        model = self.draft.model()
        for path, verdict in self.verdicts:
            self.draft.addItem(Path(path).name, path)
            index = self.draft.count() - 1
            tip = path if verdict.ok else f"Cannot draft for this model: {verdict.reason}."
            self.draft.setItemData(index, tip, Qt.ItemDataRole.ToolTipRole)
            if not verdict.ok and isinstance(model, QStandardItemModel) and (item := model.item(index)) is not None:
                item.setEnabled(False)
        ok = [path for path, verdict in self.verdicts if verdict.ok]
        self.draft.setCurrentIndex(self.draft.findData(wanted) if wanted in ok else (0 if ok else -1))
        self.draft.blockSignals(False)
        self._show_draft_row()

    def _show_draft_row(self) -> None:
        drafting = self.mode.currentData() == "draft"
        if self._form is not None:
            self._form.setRowVisible(self.draft, drafting)
        self.draft.setEnabled(self._enabled and any(verdict.ok for _path, verdict in self.verdicts))
        self.draft_note.setText(self._note())
        self.draft_note.setVisible(drafting and bool(self.draft_note.text()))

    def _note(self) -> str:
        if self.entry is None:
            return "Load or choose a model to list its drafts."
        if self._checking:
            return CHECKING
        if not any(verdict.ok for _path, verdict in self.verdicts):
            return NO_DRAFTS
        return "" if self.draft.currentData() else NO_DRAFT_CHOSEN

    def _mode_changed(self) -> None:
        self._show_draft_row()
        self.changed.emit()

    def _draft_changed(self) -> None:
        self._wanted_draft = self.draft.currentData()
        self._show_draft_row()
        self.changed.emit()


def _label(text: str, buddy: QWidget) -> QLabel:
    """A form label that shares its field's tooltip."""
    label = QLabel(text)
    label.setBuddy(buddy)
    label.setToolTip(buddy.toolTip())
    return label


def _combo(name: str) -> QComboBox:
    combo = QComboBox()
    combo.setObjectName(name)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(8)
    return combo
