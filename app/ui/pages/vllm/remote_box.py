"""The Remote tab of the vLLM page: address, key, Connect / Disconnect and what the server said. The talking is
``app.services.vllm.remote.probe_remote``; the live figures are read by the page (``app.services.vllm.metrics``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from app.backends.vllm import DEFAULT_URL
from app.services.vllm.remote import RemoteError, probe_remote
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button
from app.ui.widgets.palette import error_color, muted_color, set_text_color


class VllmRemoteBox(QWidget):
    """Address, key, Connect / Disconnect and what the server said. ``connected``: (base URL, model, key)."""

    connected = Signal(str, str, str)
    disconnected = Signal()

    def __init__(self, url: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.base_url = ""
        self.models: list[str] = []
        self.url_edit = QLineEdit(url, placeholderText=DEFAULT_URL)
        self.key_edit = QLineEdit(placeholderText="API key, if the server was started with one")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.connect_button = slot_button("Connect", self.connect_remote)
        self.disconnect_button = slot_button("Disconnect", self.disconnect_remote)
        self.disconnect_button.setEnabled(False)
        self.status = QLabel("Not connected.")
        self.status.setObjectName("vllm_remote_status")
        self.status.setWordWrap(True)
        self.url_edit.returnPressed.connect(self.connect_remote)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widgets in (
            ((QLabel("Address"), 0), (self.url_edit, 2), (QLabel("API key"), 0), (self.key_edit, 1)),
            ((self.connect_button, 0), (self.disconnect_button, 0), (self.status, 1)),
        ):
            row = QHBoxLayout()
            for widget, stretch in widgets:
                row.addWidget(widget, stretch)
            layout.addLayout(row)
        layout.addStretch(1)
        self._say("Not connected.", muted=True)

    def connect_remote(self) -> asyncio.Task[Any]:
        return spawn(self._connect(self.url_edit.text(), self.key_edit.text().strip()), "vllm: connect")

    async def _connect(self, url: str, key: str) -> None:
        self._say(f"Connecting to {url.strip() or DEFAULT_URL}…")
        self.connect_button.setEnabled(False)
        try:
            base, models = await probe_remote(url, key or None)
        except RemoteError as exc:
            self._say(str(exc), error=True)
            if self.base_url:
                self.disconnect_remote(quiet=True)
        else:
            self.base_url, self.models = base, models
            self._say(f"● Connected to {base}: serves {', '.join(models)}")
            self.disconnect_button.setEnabled(True)
            self.connected.emit(base, models[0], key)
        finally:
            self.connect_button.setEnabled(True)

    def disconnect_remote(self, quiet: bool = False) -> None:
        was = self.base_url
        self.base_url, self.models = "", []
        self.disconnect_button.setEnabled(False)
        if not quiet:
            self._say("Not connected.", muted=True)
        if was:
            self.disconnected.emit()

    def _say(self, text: str, error: bool = False, muted: bool = False) -> None:
        self.status.setText(text)
        palette = self.palette()
        color = error_color(palette) if error else muted_color(palette) if muted else None
        set_text_color(self.status, color or palette.color(QPalette.ColorRole.WindowText))
