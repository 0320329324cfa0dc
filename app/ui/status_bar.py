"""The status bar: backend state, loaded model, context used and the last reply's speed."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QStatusBar, QToolButton, QWidget

from app.backends.protocol import BackendState, KvUsage, ModelInfo
from app.core.chat.conversation import ReplyStats
from app.core.units import MISSING, format_tokens_per_s

ENGINE_NAMES = {"llamacpp": "llama.cpp", "ollama": "Ollama", "vllm": "vLLM"}


class AppStatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend_label = QToolButton()  # click: switch this chat's engine/model
        self.backend_label.setText("llama.cpp: stopped")
        self.backend_label.setAutoRaise(True)
        self.model_label = QLabel("No model loaded")
        self.context_label = QLabel(f"Context: {MISSING}")
        self.speed_label = QLabel(f"Last reply: {MISSING}")
        for label in (self.backend_label, self.model_label, self.context_label, self.speed_label):
            label.setContentsMargins(6, 0, 6, 0)
            self.addPermanentWidget(label)
        self.context_label.setToolTip("Tokens in the context (KV cells used) / context size (n_ctx)")
        self.alert_label = QLabel()  # monitor alerts (KV full, preemptions, VRAM, memory left after unload)
        self.alert_label.setObjectName("status_alerts")
        self.alert_label.setContentsMargins(6, 0, 6, 0)
        self.alert_label.hide()
        self.addPermanentWidget(self.alert_label)

    def show_alerts(self, messages: list[str]) -> None:
        """The monitor's alerts: a count here, the messages in the tooltip; hidden when there are none."""
        self.alert_label.setVisible(bool(messages))
        self.alert_label.setText(f"⚠ {len(messages)} alert{'s' if len(messages) != 1 else ''}" if messages else "")
        self.alert_label.setToolTip("\n".join(messages) + ("\nDetails on the Monitor page." if messages else ""))

    def show_state(self, state: BackendState, kind: str = "llamacpp") -> None:
        self.backend_label.setText(f"{ENGINE_NAMES.get(kind, kind)}: {state.kind}")
        self.backend_label.setToolTip(f"{state.detail}\nClick to move this chat to another engine or model.".strip())

    def show_model(self, model: ModelInfo | None) -> None:
        self.model_label.setText(model.name if model else "No model loaded")
        self.model_label.setToolTip(model.path if model else "")
        if model is None:
            self.context_label.setText(f"Context: {MISSING}")

    def show_kv(self, kv: KvUsage | None) -> None:
        if kv is None:
            self.context_label.setText(f"Context: {MISSING}")
            return
        self.context_label.setText(f"Context: {kv.used_cells:,} / {kv.total_cells:,} ({kv.fraction:.0%})")

    def show_stats(self, stats: ReplyStats | None) -> None:
        if stats is None or not stats.decode_tokens_per_s:
            return
        self.speed_label.setText(f"Last reply: {format_tokens_per_s(stats.decode_tokens_per_s)}")
        self.speed_label.setToolTip(stats.summary())
