"""Talking to a vLLM server someone else started: is it up, which models it serves, its live figures.

:func:`probe_remote` checks ``/health`` and ``/v1/models`` (with the key), :func:`read_metrics` reads
``/metrics`` (vLLM serves it without a key), :func:`metrics_summary` says the figures in one line. Every
failure is a :class:`RemoteError` whose message says what happened and what to do.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from app.backends.http_json import response_json
from app.backends.protocol import BackendError
from app.backends.vllm import DEFAULT_URL, normalize_url
from app.core.lazy_import import lazy_import
from app.core.vllm.metrics import MetricsParseError, VllmMetrics, parse_metrics
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button
from app.ui.widgets.palette import error_color, muted_color, set_text_color

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


TIMEOUT_S = 10.0


class RemoteError(Exception):
    """The server cannot be used; the message says why and what to do."""


def _client(base_url: str, api_key: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=TIMEOUT_S, trust_env=False)


def _transport(base: str, exc: httpx.HTTPError) -> RemoteError:
    if isinstance(exc, httpx.ConnectError):
        return RemoteError(
            f"Nothing answers at {base}. Start vLLM there (vllm serve MODEL --port PORT) or check the address."
        )
    if isinstance(exc, httpx.TimeoutException):
        return RemoteError(f"vLLM at {base} did not answer within {TIMEOUT_S:.0f} s. It may be busy; try again.")
    return RemoteError(f"The connection to {base} failed ({type(exc).__name__}). Check the address and try again.")


async def probe_remote(url: str, api_key: str | None) -> tuple[str, list[str]]:
    """``(base URL, served model names)`` of the vLLM at ``url``; RemoteError when it is down or refuses the key."""
    try:
        base = normalize_url(url)
    except BackendError as exc:
        raise RemoteError(str(exc)) from None
    async with _client(base, api_key) as client:
        try:
            health = await client.get("/health")
            if health.status_code != 200:
                raise RemoteError(
                    f"vLLM at {base} is not ready (/health answered {health.status_code}): it is still loading "
                    "the model, or its engine stopped. Wait a moment and Connect again."
                )
            models = await client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise _transport(base, exc) from None
    if models.status_code in (401, 403):
        if api_key:
            raise RemoteError(f"vLLM at {base} refused the API key (HTTP 401): enter the key it was started with.")
        raise RemoteError(f"vLLM at {base} needs an API key (HTTP 401): enter the key it was started with.")
    try:
        data: Any = response_json(models, what="/v1/models")["data"] if models.status_code == 200 else None
        names = [str(entry["id"]) for entry in data]
    except (ValueError, KeyError, TypeError):  # ValueError: JsonError (not JSON, nested too deeply, too large)
        raise RemoteError(
            f"The server at {base} answered /v1/models with HTTP {models.status_code}, not a model list: "
            "is it a vLLM (OpenAI-compatible) server?"
        ) from None
    if not names:
        raise RemoteError(f"vLLM at {base} serves no model yet. Wait until it has loaded one, then Connect again.")
    return base, names


async def read_metrics(base_url: str, api_key: str | None) -> VllmMetrics:
    """One reading of ``/metrics``."""
    async with _client(base_url, api_key) as client:
        try:
            response = await client.get("/metrics")
        except httpx.HTTPError as exc:
            raise _transport(base_url, exc) from None
    if response.status_code != 200:
        raise RemoteError(f"{base_url} has no readable /metrics (HTTP {response.status_code}).")
    try:
        return parse_metrics(response.text)
    except MetricsParseError as exc:
        raise RemoteError(str(exc)) from None


def metrics_summary(m: VllmMetrics) -> str:
    """``KV cache 12.5 % of 27,000 blocks × 16 tokens · 1 running, 0 waiting · 0 preemptions · prefix hits 45 %``."""
    parts = []
    if m.kv_cache_usage_fraction is not None:
        kv = f"KV cache {100 * m.kv_cache_usage_fraction:.1f} % used"
        if m.num_gpu_blocks is not None and m.block_size_tokens is not None:
            kv += f" of {m.num_gpu_blocks:,} blocks × {m.block_size_tokens} tokens ({m.kv_capacity_tokens:,} tokens)"
        parts.append(kv)
    if m.requests_running is not None or m.requests_waiting is not None:
        parts.append(f"{m.requests_running or 0} running, {m.requests_waiting or 0} waiting")
    if m.preemptions_total is not None:
        parts.append(f"{m.preemptions_total:.0f} preemptions")
    if (rate := m.prefix_cache_hit_rate) is not None:
        parts.append(f"prefix-cache hits {100 * rate:.0f} %")
    return " · ".join(parts) or "the server reports no KV-cache or queue figures"


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
