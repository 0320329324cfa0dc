"""The vLLM server options as a form: what each field means, inline problems, and flags the installed vLLM lacks.

Numbers are typed as text (empty: vLLM's own default), so a half-typed value is a sentence below the form,
never a silently clamped spin box. The API key is only held in memory: :meth:`VllmOptionsForm.settings` leaves
it out, and the field echoes as a password.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.vllm.options import VllmServerOptions, cpu_build_problems, unsupported_flags, validate
from app.core.vllm.speculative import SPECULATIVE_METHODS
from app.ui.style.icons import icon
from app.ui.widgets.palette import error_color, muted_color, set_text_color

KV_CACHE_CHOICES = ("", "auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
QUANTIZATION_CHOICES = ("", "awq", "gptq", "fp8", "bitsandbytes", "gguf", "compressed-tensors")
DTYPE_CHOICES = ("", "auto", "bfloat16", "float16", "half", "float32")
PREFIX_CHOICES = (("vLLM default", None), ("on", True), ("off", False))
SPECULATIVE_CHOICES = (("Off", None), *((text, method) for method, text in SPECULATIVE_METHODS.items()))
# (field, label, placeholder, parse as) for the typed numbers.
NUMBERS: tuple[tuple[str, str, str, type], ...] = (
    ("max_model_len", "Max context length", "model's own (-1: as long as fits)", int),
    ("gpu_memory_utilization", "GPU memory use", "0.9 (fraction of the GPU)", float),
    ("max_num_seqs", "Max sequences at once", "vLLM default", int),
    ("max_num_batched_tokens", "Max batched tokens", "vLLM default", int),
    ("tensor_parallel_size", "Tensor-parallel size", "1 (GPUs to split over)", int),
    ("kv_offloading_size", "KV offloading (GiB)", "off (CPU memory for KV blocks)", float),
    ("port", "Port", "any free port", int),
    ("speculative_tokens", "Draft tokens per step", "e.g. 4", int),
    ("speculative_lookup_min", "N-gram min", "vLLM: as max", int),
    ("speculative_lookup_max", "N-gram max", "vLLM: as min (5)", int),
)
# The fields each speculative method uses (the others are disabled).
SPECULATIVE_FIELDS = {
    None: (),
    "ngram": ("speculative_tokens", "speculative_lookup_min", "speculative_lookup_max"),
    "draft_model": ("speculative_tokens", "speculative_draft_model"),
}


# The fields always shown, and those under "More options" (field name, label), two per row.
ESSENTIAL = (
    ("served_model_name", "Served name"),
    ("api_key", "API key"),
    ("max_model_len", "Max context length"),
    ("gpu_memory_utilization", "GPU memory use"),
)
ADVANCED = (
    ("max_num_seqs", "Max sequences at once"),
    ("max_num_batched_tokens", "Max batched tokens"),
    ("tensor_parallel_size", "Tensor-parallel size"),
    ("kv_offloading_size", "KV offloading (GiB)"),
    ("port", "Port"),
    ("kv_cache_dtype", "KV-cache dtype"),
    ("quantization", "Quantization"),
    ("dtype", "Weights dtype"),
    ("enable_prefix_caching", "Prefix caching"),
    ("speculative_method", "Speculative decoding"),
    ("speculative_tokens", "Draft tokens per step"),
    ("speculative_draft_model", "Draft model"),
    ("speculative_lookup_min", "N-gram min"),
    ("speculative_lookup_max", "N-gram max"),
)


class VllmOptionsForm(QWidget):
    """``edited`` fires on every change; :meth:`options` returns the options and the problems found."""

    edited = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.version: str | None = None
        self.use_module = True
        self.cpu_build = False
        self._dialog: QFileDialog | None = None
        self.model = QLineEdit()
        self.model.setPlaceholderText("A Hugging Face model folder, or a repo id such as Qwen/Qwen3-0.6B")
        self.browse_button = QPushButton("Folder…")
        self.served_name = QLineEdit()
        self.served_name.setPlaceholderText("the model as given")
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("none (only this computer can reach it)")
        self.numbers = {name: _line(hint) for name, _label, hint, _kind in NUMBERS}
        self.kv_cache_dtype = _combo(KV_CACHE_CHOICES, editable=True)
        self.quantization = _combo(QUANTIZATION_CHOICES, editable=True)
        self.dtype = _combo(DTYPE_CHOICES, editable=False)
        self.prefix_caching = QComboBox()
        for text, value in PREFIX_CHOICES:
            self.prefix_caching.addItem(text, value)
        self.speculative_method = QComboBox()
        self.speculative_method.setObjectName("vllm_speculative_method")
        for text, method in SPECULATIVE_CHOICES:
            self.speculative_method.addItem(text, method)
        self.speculative_method.setToolTip(
            "Propose several tokens cheaply and let the model check them in one step: n-gram lookup copies from "
            "the prompt (no second model); a draft model needs the same tokenizer as the served one."
        )
        self.draft_model = QLineEdit()
        self.draft_model.setObjectName("vllm_draft_model")
        self.draft_model.setPlaceholderText("small model folder or repo id, same tokenizer")
        self.enforce_eager = QCheckBox("Enforce eager (no graph compilation: starts faster, runs slower)")
        self.extra_args = QLineEdit()
        self.extra_args.setPlaceholderText("more vLLM flags, e.g. --scheduling-policy priority")
        self.problems = QLabel()
        self.problems.setObjectName("vllm_options_problems")
        self.problems.setWordWrap(True)
        self.warnings = QLabel()
        self.warnings.setObjectName("vllm_options_warnings")
        self.warnings.setWordWrap(True)
        self._lay_out()
        self._connect()
        self.check()

    def _lay_out(self) -> None:
        essential = _grid()
        model_row = QHBoxLayout()
        model_row.addWidget(self.model, 1)
        model_row.addWidget(self.browse_button)
        essential.addWidget(QLabel("Model"), 0, 0)
        essential.addLayout(model_row, 0, 1, 1, 3)
        _pairs(essential, 1, [(label, self._field(name)) for name, label in ESSENTIAL])
        self.advanced = QWidget()
        self.advanced.setObjectName("vllm_more_options")
        advanced = _grid(self.advanced)
        last = _pairs(advanced, 0, [(label, self._field(name)) for name, label in ADVANCED])
        advanced.addWidget(self.enforce_eager, last, 0, 1, 4)
        advanced.addWidget(QLabel("Extra arguments"), last + 1, 0)
        advanced.addWidget(self.extra_args, last + 1, 1, 1, 3)
        self.more_button = QToolButton()
        self.more_button.setObjectName("vllm_more_button")
        self.more_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.more_button.setCheckable(True)
        self.more_button.toggled.connect(self._show_advanced)
        self._show_advanced(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(essential)
        layout.addWidget(self.more_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.advanced)
        layout.addWidget(self.problems)
        layout.addWidget(self.warnings)

    def _field(self, name: str) -> QWidget:
        named: dict[str, QWidget] = {
            "served_model_name": self.served_name,
            "api_key": self.api_key,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "dtype": self.dtype,
            "enable_prefix_caching": self.prefix_caching,
            "speculative_method": self.speculative_method,
            "speculative_draft_model": self.draft_model,
        }
        return named.get(name) or self.numbers[name]

    def _show_advanced(self, shown: bool) -> None:
        self.advanced.setVisible(shown)
        self.more_button.setIcon(icon("chevron-down" if shown else "chevron-right"))
        self._name_more_button()

    def _name_more_button(self) -> None:
        count = self.advanced_set()
        self.more_button.setText("More options" + (f" ({count} set)" if count else ""))

    def advanced_set(self) -> int:
        """How many of the options under "More options" differ from vLLM's defaults."""
        values = self.settings()
        return sum(1 for name, _label in ADVANCED if name in values) + sum(
            1 for name in ("enforce_eager", "extra_args") if name in values
        )

    def _connect(self) -> None:
        edits = (self.model, self.served_name, self.api_key, self.extra_args, self.draft_model, *self.numbers.values())
        for edit in edits:
            edit.textChanged.connect(self.check)
        for combo in (self.kv_cache_dtype, self.quantization, self.dtype):
            combo.currentTextChanged.connect(self.check)
        self.prefix_caching.currentIndexChanged.connect(self.check)
        self.speculative_method.currentIndexChanged.connect(self.check)
        self.enforce_eager.toggled.connect(self.check)
        self.browse_button.clicked.connect(self.browse)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.check()

    # --- values -------------------------------------------------------------------------------------------------
    def options(self) -> tuple[VllmServerOptions, list[str]]:
        """The options as typed, and the problems with them (one sentence each; empty when they can start)."""
        options, problems = self._read()
        return options, problems + validate(options)

    def _read(self) -> tuple[VllmServerOptions, list[str]]:
        problems: list[str] = []
        values: dict[str, Any] = {"model": self.model.text().strip()}
        values["speculative_method"] = method = self.speculative_method.currentData()
        unused = set(SPECULATIVE_FIELDS["ngram"] + SPECULATIVE_FIELDS["draft_model"]) - set(SPECULATIVE_FIELDS[method])
        for name, label, _hint, kind in NUMBERS:  # a method's fields are kept in the form, sent only when used
            text = "" if name in unused else self.numbers[name].text()
            values[name] = _parse_number(text, label, kind, problems)
        values["kv_cache_dtype"] = _combo_value(self.kv_cache_dtype)
        values["quantization"] = _combo_value(self.quantization)
        values["dtype"] = _combo_value(self.dtype)
        values["served_model_name"] = self.served_name.text().strip() or None
        values["enable_prefix_caching"] = self.prefix_caching.currentData()
        draft = self.draft_model.text().strip()
        values["speculative_draft_model"] = draft if draft and "speculative_draft_model" not in unused else None
        values["enforce_eager"] = self.enforce_eager.isChecked()
        values["api_key"] = self.api_key.text() or None
        try:
            values["extra_args"] = shlex.split(self.extra_args.text())
        except ValueError as exc:
            values["extra_args"] = []
            problems.append(f"The extra arguments cannot be split into words ({exc}): check the quotes.")
        return VllmServerOptions(**values), problems

    def settings(self) -> dict[str, Any]:
        """The options worth remembering (those that differ from the defaults), without the API key."""
        options, _problems = self.options()
        default = VllmServerOptions(model="")
        return {
            f.name: getattr(options, f.name)
            for f in fields(VllmServerOptions)
            if f.name != "api_key" and getattr(options, f.name) != getattr(default, f.name)
        }

    def set_values(self, values: dict[str, Any]) -> None:
        """Fill the form from remembered settings (``VllmServerOptions`` field names); unknown keys are ignored."""
        self.model.setText(str(values.get("model") or ""))
        self.served_name.setText(str(values.get("served_model_name") or ""))
        for name, _label, _hint, _kind in NUMBERS:
            value = values.get(name)
            self.numbers[name].setText("" if value is None else str(value))
        _set_combo(self.kv_cache_dtype, values.get("kv_cache_dtype"))
        _set_combo(self.quantization, values.get("quantization"))
        _set_combo(self.dtype, values.get("dtype"))
        index = [value for _text, value in PREFIX_CHOICES].index(values.get("enable_prefix_caching"))
        self.prefix_caching.setCurrentIndex(index)
        methods = [value for _text, value in SPECULATIVE_CHOICES]
        method = values.get("speculative_method")
        self.speculative_method.setCurrentIndex(methods.index(method) if method in methods else 0)
        self.draft_model.setText(str(values.get("speculative_draft_model") or ""))
        self.enforce_eager.setChecked(bool(values.get("enforce_eager")))
        if "api_key" in values:
            self.api_key.setText(str(values.get("api_key") or ""))
        self.extra_args.setText(shlex.join(str(arg) for arg in values.get("extra_args") or []))

    def set_version(self, version: str | None, use_module: bool = True, cpu_build: bool = False) -> None:
        """The installed vLLM's version (None: unknown): flags it lacks (or its CPU build refuses) are then named
        below the form."""
        self.version, self.use_module, self.cpu_build = version, use_module, cpu_build
        self.check()

    # --- checks ---------------------------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Show the problems (empty model excepted while nothing is typed) and version warnings; return them."""
        options, parse_problems = self._read()
        self._enable_speculative_fields(options.speculative_method)
        problems = parse_problems + validate(options)
        # An empty model is only a problem once Start is pressed: the form starts empty.
        shown = problems if options.model else parse_problems + validate(replace(options, model="model"))
        self.problems.setText("\n".join(shown))
        self.problems.setVisible(bool(shown))
        warnings = unsupported_flags(options, self.version, use_module=self.use_module) if self.version else []
        if any(w.startswith("--kv-offloading-size") for w in warnings):  # the app adds the backend flag itself
            warnings = [w for w in warnings if not w.startswith("--kv-offloading-backend")]
        if self.version and self.cpu_build:
            warnings += cpu_build_problems(options)
        heading = f"Not supported by the installed vLLM {self.version}:"
        self.warnings.setText("\n".join([heading, *(f"• {w}" for w in warnings)]) if warnings else "")
        self.warnings.setVisible(bool(warnings))
        set_text_color(self.problems, error_color(self.palette()))
        set_text_color(self.warnings, error_color(self.palette()) if warnings else muted_color(self.palette()))
        self._name_more_button()
        self.edited.emit()
        return problems

    def _enable_speculative_fields(self, method: str | None) -> None:
        used = SPECULATIVE_FIELDS.get(method, ())
        for name in SPECULATIVE_FIELDS["ngram"] + SPECULATIVE_FIELDS["draft_model"]:
            self._field(name).setEnabled(name in used)

    def browse(self) -> None:
        """A non-blocking folder dialog for a downloaded Hugging Face model."""
        self._dialog = QFileDialog(self, "Choose a Hugging Face model folder (with config.json)", self.model.text())
        self._dialog.setFileMode(QFileDialog.FileMode.Directory)
        self._dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        self._dialog.fileSelected.connect(self._folder_chosen)
        self._dialog.open()

    def _folder_chosen(self, path: str) -> None:
        if path:
            self.model.setText(path)


def _grid(parent: QWidget | None = None) -> QGridLayout:
    grid = QGridLayout(parent) if parent is not None else QGridLayout()
    grid.setContentsMargins(0, 0, 0, 0)
    grid.setColumnStretch(1, 1)
    grid.setColumnStretch(3, 1)
    return grid


def _pairs(grid: QGridLayout, first_row: int, pairs: list[tuple[str, QWidget]]) -> int:
    """Label and field, two pairs per row from ``first_row``; returns the next free row."""
    for index, (label, widget) in enumerate(pairs):
        row, column = first_row + index // 2, 2 * (index % 2)
        grid.addWidget(QLabel(label), row, column)
        grid.addWidget(widget, row, column + 1)
    return first_row + (len(pairs) + 1) // 2


def _parse_number(text: str, label: str, kind: Callable[[str], Any], problems: list[str]) -> Any:
    text = text.strip().replace(",", "").replace("_", "")
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        problems.append(f"{label} must be {what} (it is “{text}”); clear it to use vLLM's default.")
        return None


def _line(placeholder: str) -> QLineEdit:
    edit = QLineEdit()
    edit.setPlaceholderText(placeholder)
    return edit


def _combo(choices: tuple[str, ...], editable: bool) -> QComboBox:
    combo = QComboBox()
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(8)
    combo.setEditable(editable)
    for choice in choices:
        combo.addItem(choice or "vLLM default", choice)
    if editable:
        combo.setCurrentText("")
        line = combo.lineEdit()
        if line is not None:
            line.setPlaceholderText("vLLM default")
    return combo


def _combo_value(combo: QComboBox) -> str | None:
    """The chosen item's value ("" for "vLLM default" → None), or the text typed into an editable combo."""
    text = combo.currentText().strip()
    index = combo.findText(text)
    value = combo.itemData(index) if index >= 0 else text
    return str(value) if value else None


def _set_combo(combo: QComboBox, value: Any) -> None:
    index = combo.findData(str(value or ""))
    if index >= 0:
        combo.setCurrentIndex(index)
    else:
        combo.setCurrentText(str(value))
