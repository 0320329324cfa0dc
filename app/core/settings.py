"""The typed, versioned settings schema and its JSON file format."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.errors import InvalidInputError
from app.core.params import LoadParams, SamplingParams

SETTINGS_VERSION = 1
MAX_SETTINGS_BYTES = 1024 * 1024  # a real settings file is a few KiB
MAX_RECENT_MODELS = 10


class SettingsError(InvalidInputError):
    """The settings file cannot be used; the message says what to do."""


@dataclass
class Settings:
    model_folders: list[str] = field(default_factory=list)
    load: LoadParams = field(default_factory=LoadParams)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    system_prompt: str = ""
    recent_models: list[str] = field(default_factory=list)
    log_level: str = "INFO"
    ollama_host: str = ""  # empty: OLLAMA_HOST, else http://127.0.0.1:11434
    vllm_python: str = ""  # the interpreter of a vLLM installation (its own environment)
    vllm_remote_url: str = ""
    vllm_options: dict[str, Any] = field(default_factory=dict)  # VllmServerOptions fields, API key excluded
    download_dir: str = ""  # empty: the Hugging Face cache (HF_HUB_CACHE)
    hf_token: str = field(default="", repr=False)  # empty: huggingface_hub's stored token; never logged
    monitor_interval_s: float = 0.5  # the Monitor page's sampling interval (2 Hz)
    prometheus_enabled: bool = False  # opt-in: serve the app's metrics on 127.0.0.1
    prometheus_port: int = 9464
    theme: str = "system"  # "system" | "light" | "dark"
    restore_last_model: bool = True  # load the last model used when the app starts
    chat_drawer_open: bool | None = None  # the chat's settings drawer; None: open on a wide window only
    chat_list_open: bool = True  # the chat page's list of chats
    send_with_ctrl_enter: bool = False  # the composer: Ctrl+Enter sends (Enter: new line); else Enter sends
    api_host: str = "127.0.0.1"  # the local API server (the Server page): this machine only unless changed
    api_port: int = 8417
    api_key: str = field(default="", repr=False)  # empty: no key (allowed on 127.0.0.1 only); never logged
    api_idle_ttl_s: float = 3600.0  # a model the server loaded unloads after this long without requests
    api_autostart: bool = False  # start the server with the window
    documents_embedding_model: str = ""  # a GGUF embedding model for document search; empty: keyword search only

    def remember_model(self, path: str) -> None:
        self.recent_models = [path] + [p for p in self.recent_models if p != path]
        del self.recent_models[MAX_RECENT_MODELS:]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SETTINGS_VERSION,
            "model_folders": list(self.model_folders),
            "load": self.load.to_dict(),
            "sampling": self.sampling.to_dict(),
            "system_prompt": self.system_prompt,
            "recent_models": list(self.recent_models),
            "log_level": self.log_level,
            "ollama_host": self.ollama_host,
            "vllm_python": self.vllm_python,
            "vllm_remote_url": self.vllm_remote_url,
            "vllm_options": {k: v for k, v in self.vllm_options.items() if k != "api_key"},
            "download_dir": self.download_dir,
            "hf_token": self.hf_token,
            "monitor_interval_s": self.monitor_interval_s,
            "prometheus_enabled": self.prometheus_enabled,
            "prometheus_port": self.prometheus_port,
            "theme": self.theme,
            "restore_last_model": self.restore_last_model,
            "chat_drawer_open": self.chat_drawer_open,
            "chat_list_open": self.chat_list_open,
            "send_with_ctrl_enter": self.send_with_ctrl_enter,
            "api_host": self.api_host,
            "api_port": self.api_port,
            "api_key": self.api_key,
            "api_idle_ttl_s": self.api_idle_ttl_s,
            "api_autostart": self.api_autostart,
            "documents_embedding_model": self.documents_embedding_model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        version = data.get("version", SETTINGS_VERSION)
        if not isinstance(version, int) or version > SETTINGS_VERSION:
            raise SettingsError(
                f"The settings file is from a newer version of LLM Workstation (schema {version}); "
                "update the app or remove the file to start with defaults."
            )
        try:
            return cls(
                model_folders=[str(p) for p in data.get("model_folders", [])],
                load=LoadParams.from_dict(data.get("load", {})),
                sampling=SamplingParams.from_dict(data.get("sampling", {})),
                system_prompt=str(data.get("system_prompt", "")),
                recent_models=[str(p) for p in data.get("recent_models", [])],
                log_level=str(data.get("log_level", "INFO")),
                ollama_host=str(data.get("ollama_host", "")),
                vllm_python=str(data.get("vllm_python", "")),
                vllm_remote_url=str(data.get("vllm_remote_url", "")),
                vllm_options=dict(data.get("vllm_options", {})),
                download_dir=str(data.get("download_dir", "")),
                hf_token=str(data.get("hf_token", "")),
                monitor_interval_s=float(data.get("monitor_interval_s", 0.5)),
                prometheus_enabled=bool(data.get("prometheus_enabled", False)),
                prometheus_port=int(data.get("prometheus_port", 9464)),
                theme=_theme(data.get("theme", "system")),
                restore_last_model=bool(data.get("restore_last_model", True)),
                chat_drawer_open=_optional_bool(data.get("chat_drawer_open")),
                chat_list_open=bool(data.get("chat_list_open", True)),
                send_with_ctrl_enter=data.get("send_with_ctrl_enter") is True,
                api_host=str(data.get("api_host", "127.0.0.1")),
                api_port=int(data.get("api_port", 8417)),
                api_key=str(data.get("api_key", "")),
                api_idle_ttl_s=float(data.get("api_idle_ttl_s", 3600.0)),
                api_autostart=bool(data.get("api_autostart", False)),
                documents_embedding_model=str(data.get("documents_embedding_model", "")),
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise SettingsError(f"The settings file has a value of the wrong type ({exc}).") from exc


THEMES = ("system", "light", "dark")


def _optional_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _theme(value: object) -> str:
    return value if isinstance(value, str) and value in THEMES else "system"


def load_settings(path: Path) -> Settings:
    """Read settings; a missing file gives defaults, a broken one raises SettingsError."""
    if not path.exists():
        return Settings()
    try:
        data = safe_json.load_file(path, what="it", max_bytes=MAX_SETTINGS_BYTES)
    except (OSError, ValueError) as exc:  # ValueError: JsonError and UserFileError (too large, not a file)
        raise SettingsError(f"Cannot read the settings file {path}: {exc}. Fix or remove it.") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"The settings file {path} does not hold a JSON object. Fix or remove it.")
    return Settings.from_dict(data)


def save_settings(settings: Settings, path: Path) -> None:
    """Write atomically so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    # Owner-only: the file may hold a Hugging Face token.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(settings.to_dict(), indent=2))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
