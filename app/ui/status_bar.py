"""The status bar: the API server while it runs, backend state, loaded model, the chat's context use and the last
reply's speed. Every label shrinks (long model names are elided), so the status bar never widens the window."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QStatusBar, QToolButton, QWidget

from app.backends.protocol import BackendState, KvUsage, ModelInfo
from app.core.chat.conversation import ReplyStats
from app.core.chat.overflow import WARN_AT
from app.core.units import MISSING, format_tokens_per_s
from app.services.library.names import model_display_name
from app.services.monitor.events import AlertsChanged, MonitorEvent
from app.ui.style.theme import tokens
from app.ui.widgets.elided_label import ElidedLabel

if TYPE_CHECKING:
    from app.services.monitor.service import MonitorService

ENGINE_NAMES = {"llamacpp": "llama.cpp", "ollama": "Ollama", "vllm": "vLLM"}
MODEL_LABEL_WIDTH = 260  # at most; the name is elided in the middle below that


class _StatusLabel(ElidedLabel):
    """An elided label whose preferred width has room for its margins (so it is whole when there is room); it
    shrinks to a few characters when there is not."""

    def __init__(self, text: str = "", mode: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle) -> None:
        super().__init__(text, mode=mode)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        hint = super().sizeHint()
        return QSize(hint.width() + margins.left() + margins.right(), hint.height())


class AppStatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend_label = QToolButton()  # click: switch this chat's engine/model
        self.backend_label.setText("llama.cpp: stopped")
        self.backend_label.setAutoRaise(True)
        self.model_label = _StatusLabel("No model loaded")
        self.model_label.setMaximumWidth(MODEL_LABEL_WIDTH)
        self.context_label = _StatusLabel(f"Context: {MISSING}", mode=Qt.TextElideMode.ElideRight)
        self.speed_label = _StatusLabel(f"Last reply: {MISSING}", mode=Qt.TextElideMode.ElideRight)
        for label in (self.backend_label, self.model_label, self.context_label, self.speed_label):
            label.setContentsMargins(6, 0, 6, 0)
            self.addPermanentWidget(label)
        self.context_label.setToolTip("Tokens this chat fills in the model's context / the context size")
        self.alert_label = QLabel()  # monitor alerts (KV full, preemptions, VRAM, memory left after unload)
        self.alert_label.setObjectName("status_alerts")
        self.alert_label.setContentsMargins(6, 0, 6, 0)
        self.alert_label.hide()
        self.addPermanentWidget(self.alert_label)
        self.server_label = QToolButton()  # while the API server runs: its address and requests; click: its page
        self.server_label.setObjectName("status_api_server")
        self.server_label.setAutoRaise(True)
        self.server_label.setContentsMargins(6, 0, 6, 0)
        self.server_label.hide()
        self.insertPermanentWidget(0, self.server_label)

    def show_server(self, url: str | None, requests: int) -> None:
        """The API server's address and how many requests it has had; hidden while it is stopped."""
        self.server_label.setVisible(url is not None)
        if url is None:
            self.server_label.setText("")
            return
        host = url.split("://", 1)[-1]
        self.server_label.setText(f"API {host} · {requests:,} request{'s' if requests != 1 else ''}")
        self.server_label.setToolTip(f"The API server listens on {url}.\nClick to open the API server page.")

    def follow_monitor(self, monitor: MonitorService) -> Callable[[], None]:
        """Show the monitor's alerts from now on (its page opened or not); returns the function that stops it."""
        self.show_alerts([alert.message for alert in monitor.snapshot().alerts])
        return monitor.subscribe(self._monitor_event)

    def _monitor_event(self, event: MonitorEvent) -> None:
        if isinstance(event, AlertsChanged):
            self.show_alerts(event.messages)

    def show_alerts(self, messages: list[str]) -> None:
        """The monitor's alerts: a count here, the messages in the tooltip; hidden when there are none."""
        self.alert_label.setVisible(bool(messages))
        self.alert_label.setText(f"⚠ {len(messages)} alert{'s' if len(messages) != 1 else ''}" if messages else "")
        self.alert_label.setToolTip("\n".join(messages) + ("\nDetails on the Monitor page." if messages else ""))

    def show_state(self, state: BackendState, kind: str = "llamacpp") -> None:
        self.backend_label.setText(f"{ENGINE_NAMES.get(kind, kind)}: {state.kind}")
        self.backend_label.setToolTip(f"{state.detail}\nClick to move this chat to another engine or model.".strip())

    def show_parallel(self, kind: str, slots: int) -> None:
        """The chats' model runs on the parallel engine: up to ``slots`` replies at once."""
        self.backend_label.setText(f"{ENGINE_NAMES.get(kind, kind)}: {slots} at once")
        self.backend_label.setToolTip(
            f"The model generates up to {slots} replies at once (Parallel sequences); the Monitor shows its slots.\n"
            "Click to move this chat to another engine or model."
        )

    def show_model(self, model: ModelInfo | None) -> None:
        name = model_display_name(model.name, model.path) if model else "No model loaded"
        self.model_label.set_full_text(name)
        self.model_label.setToolTip(f"{name}\n{model.path}" if model else "")
        if model is None:
            self.context_label.set_full_text(f"Context: {MISSING}")

    def show_context(self, used: int | None, total: int | None, estimated: bool = False, when_full: str = "") -> None:
        """The chat's context use: ``used`` of ``total`` tokens (``estimated``: a rough count, marked ~); from
        ``WARN_AT`` on it is marked nearly full, in the warning colour, and ``when_full`` (what the chat will do)
        is in the tooltip."""
        full = used is not None and bool(total) and used / total >= WARN_AT  # type: ignore[operator]
        if total is None:
            self.context_label.set_full_text(f"Context: {MISSING}")
        elif used is None:
            self.context_label.set_full_text(f"Context: {MISSING} / {total:,}")
        else:
            mark, note = "~" if estimated else "", " · nearly full" if full else ""
            self.context_label.set_full_text(f"Context: {mark}{used:,} / {total:,} ({used / total:.0%}){note}")
        tip = "Tokens this chat fills in the model's context / the context size"
        self.context_label.setToolTip(f"{tip}\n{when_full}" if full and when_full else tip)
        t = tokens(self.palette())
        self.context_label.setStyleSheet(f"color: {t.warning.name()};" if full else "")

    def show_kv(self, kv: KvUsage | None) -> None:
        """The engine's KV cache use as the context figure."""
        self.show_context(kv.used_cells if kv else None, kv.total_cells if kv else None)

    def show_stats(self, stats: ReplyStats | None) -> None:
        if stats is None or not stats.decode_tokens_per_s:
            return
        self.speed_label.set_full_text(f"Last reply: {format_tokens_per_s(stats.decode_tokens_per_s)}")
        self.speed_label.setToolTip(stats.summary())
