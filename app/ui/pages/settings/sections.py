"""The Settings sections other than the engine defaults: General, Models & folders, Downloads, Ollama, vLLM,
Monitor and Log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import Settings
from app.ui.pages.settings.fields import (
    FIELD_WIDTH,
    ExactFloat,
    PathField,
    SectionBody,
    check,
    combo,
    connect_edits,
    hint,
    line,
    read_only_path,
    set_combo,
    spin,
)
from app.ui.pages.settings.section import Section

THEME_CHOICES = (("System", "system"), ("Light", "light"), ("Dark", "dark"))
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class GeneralSection(Section):
    name = "General"
    icon = "settings"

    def build(self) -> SectionBody:
        body = SectionBody("General", "How the app looks, what it does at launch, and how new chats begin.")
        looks = body.group("Appearance")
        self.theme = combo(tuple(label for label, _ in THEME_CHOICES), tip="Light, dark, or what the desktop uses.")
        looks.addRow("Theme", self.theme)
        looks.addRow("", hint("“System” follows the desktop. It applies as soon as you choose it."))
        start = body.group("Start-up")
        self.restore_last_model = check("Restore the last model at launch")
        self.restore_last_model.setToolTip("Load the model you used last when the app starts.")
        start.addRow(self.restore_last_model)
        start.addRow(hint("Turn it off to start with no model loaded (it saves memory until you choose one)."))
        chats = body.group("New chats")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("settings_system_prompt")
        self.system_prompt.setPlaceholderText("Sent at the start of every new chat. Leave empty for none.")
        self.system_prompt.setMinimumHeight(90)
        self.system_prompt.setMaximumHeight(160)
        chats.addRow("Default system prompt", self.system_prompt)
        keys = body.group("Chat")
        self.send_with_ctrl_enter = check("Send with Ctrl+Enter", "Enter then starts a new line.")
        keys.addRow(self.send_with_ctrl_enter)
        keys.addRow(hint("Off: Enter sends and Shift+Enter starts a new line."))
        connect_edits(self.edited, self.send_with_ctrl_enter)
        connect_edits(self.edited, self.theme, self.restore_last_model)
        self.system_prompt.textChanged.connect(self.edited)
        return body

    def show(self, settings: Settings) -> None:
        label = next((label for label, value in THEME_CHOICES if value == settings.theme), "System")
        self.theme.setCurrentText(label)
        self.restore_last_model.setChecked(settings.restore_last_model)
        self.send_with_ctrl_enter.setChecked(settings.send_with_ctrl_enter)
        if self.system_prompt.toPlainText() != settings.system_prompt:
            self.system_prompt.setPlainText(settings.system_prompt)

    def values(self, shown: Settings) -> dict[str, Any]:
        theme = dict(THEME_CHOICES).get(self.theme.currentText(), "system")
        return {
            "theme": theme,
            "restore_last_model": self.restore_last_model.isChecked(),
            "system_prompt": self.system_prompt.toPlainText(),
            "send_with_ctrl_enter": self.send_with_ctrl_enter.isChecked(),
        }


class ModelsSection(Section):
    name = "Models & folders"
    icon = "folder"

    def __init__(self, edited: Any, models_dir: Path) -> None:
        self._models_dir = models_dir
        self._dialog: QFileDialog | None = None
        super().__init__(edited)

    def build(self) -> SectionBody:
        body = SectionBody("Models & folders", "Where the Library and the model pickers look for GGUF files.")
        body.group("Folders searched for GGUF models")
        self.folder_list = QListWidget()
        self.folder_list.setObjectName("settings_model_folders")
        self.folder_list.setSelectionMode(QListWidget.SelectionMode.ExtendedSelection)
        self.folder_list.setMinimumHeight(90)
        add = QPushButton("Add folder…")
        add.clicked.connect(self._choose_model_folder)
        self.remove_folder_button = QPushButton("Remove")
        self.remove_folder_button.clicked.connect(self.remove_selected_folders)
        buttons = QVBoxLayout()
        buttons.addWidget(add)
        buttons.addWidget(self.remove_folder_button)
        buttons.addStretch(1)
        holder = QWidget()
        row = QHBoxLayout(holder)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.folder_list, 1)
        row.addLayout(buttons)
        body.add(holder)
        body.add(hint("Always searched too: the app's own models folder and the Hugging Face cache."))
        body.group().addRow("App models folder", read_only_path(self._models_dir))
        return body

    def _choose_model_folder(self) -> None:
        self._dialog = QFileDialog(self.body, "Add a model folder")
        self._dialog.setFileMode(QFileDialog.FileMode.Directory)
        self._dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        self._dialog.fileSelected.connect(lambda folder: self.add_model_folder(folder) if folder else None)
        self._dialog.open()

    def add_model_folder(self, folder: str) -> bool:
        """Append ``folder`` to the list unless it is already there; True when added."""
        if folder in self.model_folders():
            return False
        self.folder_list.addItem(folder)
        self.edited()
        return True

    def remove_selected_folders(self) -> None:
        for item in self.folder_list.selectedItems():
            self.folder_list.takeItem(self.folder_list.row(item))
        self.edited()

    def model_folders(self) -> list[str]:
        return [self.folder_list.item(i).text() for i in range(self.folder_list.count())]

    def show(self, settings: Settings) -> None:
        self.folder_list.clear()
        self.folder_list.addItems(settings.model_folders)

    def values(self, shown: Settings) -> dict[str, Any]:
        return {"model_folders": self.model_folders()}


class DownloadsSection(Section):
    name = "Downloads"
    icon = "download"

    def build(self) -> SectionBody:
        body = SectionBody("Downloads", "Where models from the Hugging Face Hub go, and the token for gated ones.")
        form = body.group()
        self.download_dir = PathField(
            "empty: the Hugging Face cache (HF_HUB_CACHE)",
            "Choose the download folder",
            folder=True,
            tip="Models downloaded from the Hub land here, as <folder>/<owner>/<repo>/<file>.",
        )
        form.addRow("Download folder", self.download_dir)
        form.addRow("", hint("Empty keeps them in the Hugging Face cache, shared with other tools."))
        self.hf_token = line("empty: huggingface_hub's own token (HF_TOKEN or `hf auth login`)")
        self.hf_token.setObjectName("settings_hf_token")
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hf_token.setToolTip("Needed for gated models (accept the license on the Hub page first). Never logged.")
        self.show_token = QToolButton()
        self.show_token.setText("Show")
        self.show_token.setCheckable(True)
        self.show_token.toggled.connect(self._reveal)
        token_row = QWidget()
        row = QHBoxLayout(token_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.hf_token, 1)
        row.addWidget(self.show_token)
        form.addRow("Hugging Face token", token_row)
        form.addRow("", hint("Needed only for gated models: accept the licence on the model's Hub page first."))
        connect_edits(self.edited, self.download_dir.edit, self.hf_token)
        return body

    def _reveal(self, shown: bool) -> None:
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        self.show_token.setText("Hide" if shown else "Show")

    def show(self, settings: Settings) -> None:
        self.download_dir.edit.setText(settings.download_dir)
        self.hf_token.setText(settings.hf_token)
        self.show_token.setChecked(False)

    def values(self, shown: Settings) -> dict[str, Any]:
        return {"download_dir": self.download_dir.edit.text().strip(), "hf_token": self.hf_token.text().strip()}


class OllamaSection(Section):
    name = "Ollama"
    icon = "server"

    def build(self) -> SectionBody:
        body = SectionBody("Ollama", "The Ollama server used for its models, Modelfile create and Ollama chat.")
        form = body.group()
        self.ollama_host = line("from OLLAMA_HOST, else http://127.0.0.1:11434")
        self.ollama_host.setObjectName("settings_ollama_host")
        self.ollama_host.setToolTip("The Ollama server used for its models, Modelfile create and Ollama chat.")
        form.addRow("Ollama host", self.ollama_host)
        form.addRow("", hint("Empty uses OLLAMA_HOST, or this machine's Ollama on port 11434."))
        connect_edits(self.edited, self.ollama_host)
        return body

    def show(self, settings: Settings) -> None:
        self.ollama_host.setText(settings.ollama_host)

    def values(self, shown: Settings) -> dict[str, Any]:
        return {"ollama_host": self.ollama_host.text().strip()}


class VllmSection(Section):
    name = "vLLM"
    icon = "vllm"

    def build(self) -> SectionBody:
        body = SectionBody("vLLM", "The vLLM installation the app starts, or a vLLM server it connects to.")
        form = body.group()
        self.vllm_python = PathField(
            "the Python of vLLM's own environment", "Choose vLLM's Python interpreter", folder=False
        )
        self.vllm_python.setObjectName("settings_vllm_python")
        form.addRow("vLLM Python", self.vllm_python)
        form.addRow("", hint("vLLM lives in its own environment; the vLLM page can create one for you."))
        self.vllm_remote_url = line("http://gpu-box:8000")
        self.vllm_remote_url.setObjectName("settings_vllm_remote_url")
        form.addRow("Remote server", self.vllm_remote_url)
        form.addRow("", hint("A vLLM server elsewhere. Its API key and the server flags are set on the vLLM page."))
        connect_edits(self.edited, self.vllm_python.edit, self.vllm_remote_url)
        return body

    def show(self, settings: Settings) -> None:
        self.vllm_python.edit.setText(settings.vllm_python)
        self.vllm_remote_url.setText(settings.vllm_remote_url)

    def values(self, shown: Settings) -> dict[str, Any]:
        return {
            "vllm_python": self.vllm_python.edit.text().strip(),
            "vllm_remote_url": self.vllm_remote_url.text().strip(),
        }


class MonitorSection(Section):
    name = "Monitor"
    icon = "monitor"

    def build(self) -> SectionBody:
        body = SectionBody("Monitor", "How often the Monitor samples memory and the KV cache, and what it exports.")
        form = body.group()
        interval = QDoubleSpinBox()
        interval.setRange(0.1, 60.0)
        interval.setSingleStep(0.1)
        interval.setDecimals(1)
        interval.setSuffix(" s")
        interval.setMinimumWidth(FIELD_WIDTH)
        self.monitor_interval = ExactFloat(interval)
        form.addRow("Sampling interval", interval)
        form.addRow("", hint("Shorter shows quick changes; longer costs less. 0.5 s is twice a second."))
        self.prometheus_enabled = check("Serve the app's metrics for Prometheus on 127.0.0.1")
        form.addRow(self.prometheus_enabled)
        self.prometheus_port = spin(1024, 65535, tip="The port of http://127.0.0.1:PORT/metrics")
        form.addRow("Port", self.prometheus_port)
        self.prometheus_enabled.toggled.connect(self.prometheus_port.setEnabled)
        connect_edits(self.edited, self.monitor_interval.box, self.prometheus_enabled, self.prometheus_port)
        return body

    def show(self, settings: Settings) -> None:
        self.monitor_interval.set(settings.monitor_interval_s)
        self.prometheus_enabled.setChecked(settings.prometheus_enabled)
        self.prometheus_port.setValue(settings.prometheus_port)
        self.prometheus_port.setEnabled(settings.prometheus_enabled)

    def values(self, shown: Settings) -> dict[str, Any]:
        return {
            "monitor_interval_s": self.monitor_interval.value(),
            "prometheus_enabled": self.prometheus_enabled.isChecked(),
            "prometheus_port": self.prometheus_port.value(),
        }


class LogSection(Section):
    name = "Log"
    icon = "info"

    def __init__(self, edited: Any, log_file: Path | None) -> None:
        self._log_file = log_file
        super().__init__(edited)

    def build(self) -> SectionBody:
        body = SectionBody("Log", "What the app writes to its log (View ▸ Log shows it).")
        form = body.group()
        self.log_level = combo(LOG_LEVELS, tip="Lowest level written to the log viewer and the log file.")
        form.addRow("Log level", self.log_level)
        form.addRow("", hint("DEBUG writes the most, ERROR the least. INFO suits everyday use."))
        if self._log_file is not None:
            form.addRow("Log file", read_only_path(self._log_file))
        connect_edits(self.edited, self.log_level)
        return body

    def show(self, settings: Settings) -> None:
        set_combo(self.log_level, settings.log_level)

    def values(self, shown: Settings) -> dict[str, Any]:
        return {"log_level": self.log_level.currentText()}
