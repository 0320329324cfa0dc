"""The settings dialog: model folders, loading and sampling defaults, system prompt, log level."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.params import KV_CACHE_TYPES, LoadParams, SamplingParams
from app.core.settings import Settings

FROM_MODEL = "(from the model)"
# llama-cpp-python chat_format names offered in the override combo (free text is accepted too).
CHAT_FORMATS = (
    "gemma",
    "chatml",
    "llama-2",
    "llama-3",
    "mistral-instruct",
    "qwen",
    "zephyr",
    "phind",
    "vicuna",
    "alpaca",
    "openchat",
    "chatglm3",
    "baichuan-2",
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
INT_MAX = 2**31 - 1

MMAP_TIP = (
    "Map the model file into memory instead of reading it all at load: faster start, and pages are only read when used."
)
MLOCK_TIP = (
    "Lock the model weights and KV cache in RAM so the system never moves them out to swap. "
    "Needs enough free memory, and on Linux possibly a higher memlock limit (ulimit -l)."
)


def _spin(minimum: int, maximum: int, special: str = "", tip: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(minimum, maximum)
    box.setSpecialValueText(special)  # Shown instead of the minimum, which then means "None".
    box.setToolTip(tip)
    return box


def _dspin(minimum: float, maximum: float, step: float, decimals: int, tip: str = "") -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(minimum, maximum)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    box.setToolTip(tip)
    return box


def _combo(items: tuple[str, ...], current: str, editable: bool = False) -> QComboBox:
    box = QComboBox(editable=editable)
    box.addItems(list(items))
    if box.findText(current) < 0:
        box.addItem(current)  # Keep an unknown stored value instead of silently changing it.
    box.setCurrentText(current)
    return box


def _check(text: str, checked: bool, tip: str) -> QCheckBox:
    box = QCheckBox(text)
    box.setChecked(checked)
    box.setToolTip(tip)
    return box


def _optional(box: QSpinBox) -> int | None:
    return None if box.value() == box.minimum() and box.specialValueText() else box.value()


class SettingsDialog(QDialog):
    """Edits a copy of :class:`Settings`; emits ``settings_saved(Settings)`` on Save.

    Open it with :meth:`open` (window-modal, non-blocking).
    """

    settings_saved = Signal(object)

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._original = settings
        # Float fields keep their exact stored value unless the user changes the spin box.
        self._float_baseline: dict[QDoubleSpinBox, tuple[float, float]] = {}
        tabs = QTabWidget()
        tabs.addTab(self._models_page(settings), "Models")
        tabs.addTab(self._loading_page(settings.load), "Loading defaults")
        tabs.addTab(self._sampling_page(settings.sampling), "Sampling defaults")
        tabs.addTab(self._prompt_page(settings.system_prompt), "System prompt")
        tabs.addTab(self._logging_page(settings.log_level), "Logging")
        tabs.addTab(self._downloads_page(settings), "Downloads")
        self.tabs = tabs

        self.problems_icon = QLabel()
        icon = self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning)
        self.problems_icon.setPixmap(icon.pixmap(16, 16))
        self.problems_label = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        self.button_box = buttons

        problems_row = QHBoxLayout()
        problems_row.addWidget(self.problems_icon, 0, Qt.AlignmentFlag.AlignTop)
        problems_row.addWidget(self.problems_label, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs, 1)
        layout.addLayout(problems_row)
        layout.addWidget(buttons)
        self._update_problems()

    # --- pages ---------------------------------------------------------------------------------

    def _models_page(self, settings: Settings) -> QWidget:
        page = QWidget()
        self.folder_list = QListWidget()
        self.folder_list.setSelectionMode(QListWidget.SelectionMode.ExtendedSelection)
        self.folder_list.addItems(settings.model_folders)
        add = QPushButton("Add…")
        add.clicked.connect(self._choose_model_folder)
        self.remove_folder_button = QPushButton("Remove")
        self.remove_folder_button.clicked.connect(self.remove_selected_folders)
        buttons = QVBoxLayout()
        buttons.addWidget(add)
        buttons.addWidget(self.remove_folder_button)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.folder_list, 1)
        row.addLayout(buttons)
        self.ollama_host = QLineEdit(settings.ollama_host)
        self.ollama_host.setPlaceholderText("from OLLAMA_HOST, else http://127.0.0.1:11434")
        self.ollama_host.setToolTip("The Ollama server used for its models, Modelfile create and Ollama chat.")
        host_row = QHBoxLayout()
        host_row.addWidget(QLabel("Ollama host:"))
        host_row.addWidget(self.ollama_host, 1)
        layout = QVBoxLayout(page)
        layout.addWidget(QLabel("Folders searched for GGUF models:"))
        layout.addLayout(row)
        layout.addLayout(host_row)
        return page

    def _loading_page(self, load: LoadParams) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.n_ctx = _spin(1, INT_MAX, tip="Context window in tokens; the KV cache grows with it.")
        self.n_ctx.setValue(load.n_ctx)
        form.addRow("Context size:", self.n_ctx)
        form.addRow("GPU layers:", self._gpu_layers_row(load.n_gpu_layers))
        self.n_threads = _spin(0, 1024, "Automatic", "CPU threads for generation.")
        self.n_threads.setValue(load.n_threads or 0)
        form.addRow("Threads:", self.n_threads)
        self.n_batch = _spin(1, INT_MAX, tip="Tokens processed per step while reading the prompt.")
        self.n_batch.setValue(load.n_batch)
        form.addRow("Batch size:", self.n_batch)
        self.flash_attn = _check(
            "Flash attention", load.flash_attn, "Faster attention with less memory; required for a quantized V cache."
        )
        form.addRow(self.flash_attn)
        self.type_k = _combo(KV_CACHE_TYPES, load.type_k)
        self.type_k.setToolTip("Precision of the KV cache keys; q8_0 and q4_0 save memory.")
        form.addRow("K cache type:", self.type_k)
        self.type_v = _combo(KV_CACHE_TYPES, load.type_v)
        self.type_v.setToolTip("Precision of the KV cache values; quantized types need flash attention.")
        form.addRow("V cache type:", self.type_v)
        self.use_mmap = _check("Memory-map the model file (use_mmap)", load.use_mmap, MMAP_TIP)
        form.addRow(self.use_mmap)
        self.use_mlock = _check("Keep the model in RAM (use_mlock)", load.use_mlock, MLOCK_TIP)
        form.addRow(self.use_mlock)
        self.chat_format = _combo((FROM_MODEL, *CHAT_FORMATS), load.chat_format or FROM_MODEL, editable=True)
        self.chat_format.setToolTip("Override the chat format; by default the template stored in the model is used.")
        form.addRow("Chat format:", self.chat_format)
        for box in (self.n_ctx, self.n_gpu_layers, self.n_threads, self.n_batch):
            box.valueChanged.connect(self._update_problems)
        for check in (self.all_gpu_layers, self.flash_attn, self.use_mmap, self.use_mlock):
            check.toggled.connect(self._update_problems)
        for combo in (self.type_k, self.type_v, self.chat_format):
            combo.currentTextChanged.connect(self._update_problems)
        return page

    def _gpu_layers_row(self, n_gpu_layers: int | None) -> QWidget:
        self.n_gpu_layers = _spin(0, 100_000, tip="Layers to offload to the GPU; 0 runs on the CPU only.")
        self.n_gpu_layers.setValue(n_gpu_layers or 0)
        self.all_gpu_layers = QCheckBox("All layers when the build supports GPU offload")
        self.all_gpu_layers.toggled.connect(lambda on: self.n_gpu_layers.setEnabled(not on))
        self.all_gpu_layers.setChecked(n_gpu_layers is None)
        self.n_gpu_layers.setEnabled(n_gpu_layers is not None)
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.n_gpu_layers)
        layout.addWidget(self.all_gpu_layers, 1)
        return row

    def _sampling_page(self, sampling: SamplingParams) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.temperature = self._float_field(_dspin(0.0, 5.0, 0.05, 2, "Higher is more random."), sampling.temperature)
        form.addRow("Temperature:", self.temperature)
        self.top_p = self._float_field(_dspin(0.0, 1.0, 0.01, 3, "Nucleus sampling; 1 turns it off."), sampling.top_p)
        form.addRow("Top P:", self.top_p)
        self.top_k = _spin(0, 100_000, tip="Sample among the K likeliest tokens; 0 turns it off.")
        self.top_k.setValue(sampling.top_k)
        form.addRow("Top K:", self.top_k)
        min_p_tip = "Drop tokens less likely than this share of the likeliest one."
        self.min_p = self._float_field(_dspin(0.0, 1.0, 0.01, 3, min_p_tip), sampling.min_p)
        form.addRow("Min P:", self.min_p)
        self.repeat_penalty = self._float_field(_dspin(0.0, 5.0, 0.05, 2, "1 turns it off."), sampling.repeat_penalty)
        form.addRow("Repeat penalty:", self.repeat_penalty)
        self.max_tokens = _spin(0, INT_MAX, "until context is full", "Longest reply in tokens.")
        self.max_tokens.setValue(sampling.max_tokens or 0)
        form.addRow("Max tokens:", self.max_tokens)
        self.seed = _spin(-1, INT_MAX, "random", "A fixed seed repeats the same reply for the same input.")
        self.seed.setValue(-1 if sampling.seed is None else sampling.seed)
        form.addRow("Seed:", self.seed)
        return page

    def _float_field(self, box: QDoubleSpinBox, value: float) -> QDoubleSpinBox:
        box.setValue(value)
        self._float_baseline[box] = (box.value(), value)
        return box

    def _prompt_page(self, system_prompt: str) -> QWidget:
        page = QWidget()
        self.system_prompt = QPlainTextEdit(plainText=system_prompt)
        self.system_prompt.setPlaceholderText("Sent at the start of every new chat. Leave empty for none.")
        layout = QVBoxLayout(page)
        layout.addWidget(QLabel("Default system prompt:"))
        layout.addWidget(self.system_prompt, 1)
        return page

    def _downloads_page(self, settings: Settings) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.download_dir = QLineEdit(settings.download_dir)
        self.download_dir.setPlaceholderText("empty: the Hugging Face cache (HF_HUB_CACHE)")
        self.download_dir.setToolTip("Models downloaded from the Hub land here, as <folder>/<owner>/<repo>/<file>.")
        form.addRow("Download folder:", self.download_dir)
        self.hf_token = QLineEdit(settings.hf_token)
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hf_token.setPlaceholderText("empty: huggingface_hub's own token (HF_TOKEN or `hf auth login`)")
        self.hf_token.setToolTip("Needed for gated models (accept the license on the Hub page first). Never logged.")
        form.addRow("Hugging Face token:", self.hf_token)
        return page

    def _logging_page(self, log_level: str) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        self.log_level = _combo(LOG_LEVELS, log_level)
        self.log_level.setToolTip("Lowest level written to the log viewer and the log file.")
        form.addRow("Log level:", self.log_level)
        return page

    # --- model folders -------------------------------------------------------------------------

    def _choose_model_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if folder:
            self.add_model_folder(folder)

    def add_model_folder(self, folder: str) -> bool:
        """Append ``folder`` to the list unless it is already there; True when added."""
        if folder in self.model_folders():
            return False
        self.folder_list.addItem(folder)
        return True

    def remove_selected_folders(self) -> None:
        """Remove the selected folders from the list."""
        for item in self.folder_list.selectedItems():
            self.folder_list.takeItem(self.folder_list.row(item))

    def model_folders(self) -> list[str]:
        """The folders in the list, in order."""
        return [self.folder_list.item(i).text() for i in range(self.folder_list.count())]

    # --- values --------------------------------------------------------------------------------

    def load_params(self) -> LoadParams:
        """The loading defaults as currently entered."""
        chat_format = self.chat_format.currentText().strip()
        return replace(  # fields without a widget here (main_gpu, repeat_last_n) are carried over
            self._original.load,
            n_ctx=self.n_ctx.value(),
            n_gpu_layers=None if self.all_gpu_layers.isChecked() else self.n_gpu_layers.value(),
            n_threads=_optional(self.n_threads),
            n_batch=self.n_batch.value(),
            flash_attn=self.flash_attn.isChecked(),
            type_k=self.type_k.currentText(),
            type_v=self.type_v.currentText(),
            use_mmap=self.use_mmap.isChecked(),
            use_mlock=self.use_mlock.isChecked(),
            chat_format=None if chat_format in ("", FROM_MODEL) else chat_format,
        )

    def sampling_params(self) -> SamplingParams:
        """The sampling defaults as currently entered."""
        return replace(  # stop sequences and penalties without a widget here are carried over
            self._original.sampling,
            temperature=self._float_value(self.temperature),
            top_p=self._float_value(self.top_p),
            top_k=self.top_k.value(),
            min_p=self._float_value(self.min_p),
            repeat_penalty=self._float_value(self.repeat_penalty),
            max_tokens=_optional(self.max_tokens),
            seed=_optional(self.seed),
        )

    def _float_value(self, box: QDoubleSpinBox) -> float:
        shown, stored = self._float_baseline[box]
        return stored if box.value() == shown else box.value()

    def settings(self) -> Settings:
        """A new :class:`Settings` from the dialog (recent models are carried over unchanged)."""
        return replace(
            self._original,
            model_folders=self.model_folders(),
            load=self.load_params(),
            sampling=self.sampling_params(),
            system_prompt=self.system_prompt.toPlainText(),
            recent_models=list(self._original.recent_models),
            log_level=self.log_level.currentText(),
            ollama_host=self.ollama_host.text().strip(),
            download_dir=self.download_dir.text().strip(),
            hf_token=self.hf_token.text().strip(),
        )

    def problems(self) -> list[str]:
        """Why the entered loading defaults cannot load; empty when Save is allowed."""
        return self.load_params().problems()

    def save_button(self) -> QPushButton:
        """The Save button (disabled while there are problems)."""
        return self.button_box.button(QDialogButtonBox.StandardButton.Save)

    def _update_problems(self) -> None:
        problems = self.problems()
        self.problems_label.setText("\n".join(problems))
        self.problems_label.setVisible(bool(problems))
        self.problems_icon.setVisible(bool(problems))
        self.save_button().setEnabled(not problems)

    def _save(self) -> None:
        if self.problems():
            return
        self.settings_saved.emit(self.settings())
        self.accept()
