"""The chat panel's model side: loading on the right engine, switching engines, presets, the starter model."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.backends.base import Backend, BackendError, BackendState, StateKind
from app.core.lazy_import import import_now
from app.core.modelfile import Modelfile
from app.core.params import LoadParams
from app.core.preset_mapping import LlamaCppPreset, engine_switch_notes, to_llamacpp
from app.services import starter_model
from app.ui.context import OLLAMA_PREFIX, VLLM_PREFIX
from app.ui.model_bar import engine_prefix
from app.ui.tasks import spawn

if TYPE_CHECKING:
    from PySide6.QtWidgets import QLabel

    from app.services.chat_session import ChatSession
    from app.ui.context import AppContext
    from app.ui.model_bar import ModelBar
    from app.ui.sampling_form import SamplingForm
    from app.ui.starter_banner import StarterBanner
    from app.ui.status_bar import AppStatusBar


def _engine_model(entry: str) -> str:
    prefix = engine_prefix(entry)
    return entry.removeprefix(prefix) if prefix else entry


def _display_name(entry: str) -> str:
    return _engine_model(entry) if engine_prefix(entry) else Path(entry).name


async def _is_local_file(path: str) -> bool:
    return await asyncio.get_running_loop().run_in_executor(None, os.path.isfile, os.path.expanduser(path))


class ChatModelsMixin:
    """Mixed into ChatPanel: everything about which model and engine a chat runs on."""

    # provided by ChatPanel and its layout
    context: AppContext
    status: AppStatusBar
    backend: Backend
    session: ChatSession | None
    model_bar: ModelBar
    sampling: SamplingForm
    starter: StarterBanner
    format_note: QLabel
    preset_load: LoadParams | None
    ollama_models: set[str]
    _loaded_with: LoadParams | None
    _listened: list[Backend]
    show_notice: Callable[[str], None]
    hide_notice: Callable[[], None]
    _busy: Callable[..., bool]
    _persist_settings: Callable[[], None]
    _save_system_prompt: Callable[[], Awaitable[None]]

    # --- models -------------------------------------------------------------------------------------
    def choose_model_file(self) -> None:
        self.model_bar.choose_file()

    def load_model(self, path: str) -> None:
        spawn(self._load(path), "load model")

    async def _load(self, path: str) -> None:
        if self._busy("loading another model", any_chat=True):
            return
        self.hide_notice()
        self.model_bar.set_loading(_display_name(path))
        try:
            await self._switch_backend(path)
            info = await self.backend.load(_engine_model(path), self.load_params())
        except BackendError as exc:
            self.model_bar.set_loaded(None)
            self.status.show_model(None)
            self.show_notice(str(exc))
            return
        self._loaded_with = self.load_params()
        self.model_bar.set_loaded(path, f"Loaded in {info.load_seconds:.1f} s · context {info.n_ctx:,}")
        self.status.show_model(info)
        self.status.show_kv(self.backend.kv_usage())
        self._show_format_note(path, info.chat_format_reason, info.chat_format is None)
        self.context.settings.remember_model(path)
        self.model_bar.set_recent(self.context.settings.recent_models)
        self.starter.hide()
        self._persist_settings()

    async def _switch_backend(self, entry: str) -> None:
        """Make the engine for ``entry`` the chat's engine, unloading the model of the previous one."""
        target = self.context.backend_for(entry)
        if target is self.backend:
            return
        if target is not self.context.backend and not self._listening_to(target):
            target.add_state_listener(self._backend_state_listener(target))
        previous, self.backend = self.backend, target
        if self.session is not None:
            self.session.backend = target
        if previous.model is not None:
            await previous.unload()
        self.status.show_state(target.state, target.kind)
        if self.session is not None and self.session.conversation and self.session.conversation.messages:
            notes = engine_switch_notes(previous.kind, target.kind, self.sampling.params(), self.load_params())
            self.show_notice(" ".join(notes))

    def _listening_to(self, backend: Backend) -> bool:
        return backend in self._listened

    def _backend_state_listener(self, backend: Backend) -> Callable[[BackendState], None]:
        self._listened.append(backend)

        def listener(state: BackendState) -> None:
            if backend is self.backend:
                self._state_changed(state)

        return listener

    async def refresh_ollama_models(self) -> None:
        """List Ollama's models in the model picker when Ollama runs; a stopped Ollama is not an error."""
        loop = asyncio.get_running_loop()
        module = await loop.run_in_executor(None, _import_ollama_service)
        async with module.OllamaService(self.context.settings.ollama_host or None) as service:
            status = await service.status()
            models = await service.list_models() if status.running else []
        self.model_bar.set_ollama_models([m.name for m in models], status.summary())
        self.ollama_models = {m.name for m in models}

    def offer_vllm_server(self, base_url: str, served_model: str, api_key: str | None) -> None:
        """A vLLM server is ready (managed or remote): chats can move to it from the model picker."""
        if self.context.vllm_target != (base_url, api_key):
            self.context.vllm_target = (base_url, api_key)
            stale, self.context.vllm_backend = self.context.vllm_backend, None
            if stale is not None and stale is not self.backend:
                spawn(stale.close(), "close old vLLM client")
        self.model_bar.set_engine_models(VLLM_PREFIX, [served_model])

    def withdraw_vllm_server(self) -> None:
        self.model_bar.set_engine_models(VLLM_PREFIX, [])
        self.context.vllm_target = None

    def load_params(self) -> LoadParams:
        return self.preset_load or self.context.settings.load

    # --- presets ----------------------------------------------------------------------------------
    def apply_modelfile(self, modelfile: Modelfile, name: str = "preset") -> None:
        """Use a Modelfile as a preset: sampling, load options, system prompt and history in a new chat."""
        if self.session is None or self._busy("applying a preset", any_chat=True):
            return
        preset = to_llamacpp(modelfile, self.load_params(), self.sampling.params())
        self.sampling.set_params(preset.sampling)
        reload_needed = self.backend.model is not None and bool(preset.load_changed(self.backend_load_params()))
        self.preset_load = preset.load
        spawn(self._start_preset_chat(preset, name, reload_needed), "apply preset")

    def backend_load_params(self) -> LoadParams:
        return self._loaded_with or self.context.settings.load

    async def _start_preset_chat(self, preset: LlamaCppPreset, name: str, reload_needed: bool) -> None:
        assert self.session is not None
        system_lines = [text for role, text in preset.messages if role == "system"]
        system = preset.system if preset.system is not None else "\n".join(system_lines)
        await self._save_system_prompt()
        await self.session.new(system, preset.messages, title=f"{name} (preset)")
        self.show_notice(" ".join(preset.notes(name, reload_needed)))
        entry = await self._preset_model_entry(preset.model)
        if entry is not None:
            self.model_bar.select(entry)
            await self._load(entry)

    async def _preset_model_entry(self, model: str | None) -> str | None:
        """FROM as a model entry: a local GGUF, or an Ollama model that Ollama has."""
        if not model:
            return None
        if await _is_local_file(model):
            return model
        name = model if ":" in model else f"{model}:latest"
        return OLLAMA_PREFIX + name if name in self.ollama_models else None

    def _show_format_note(self, path: str, reason: str, from_template: bool) -> None:
        notes = [] if from_template else [reason]
        if Path(path).name == starter_model.FILE_NAME:
            notes.append(starter_model.NOTE)
        self.format_note.setText(" ".join(notes))
        self.format_note.setVisible(bool(notes))

    def unload_model(self) -> None:
        spawn(self._unload(), "unload model")

    async def _unload(self) -> None:
        try:
            await self.backend.unload()
        except BackendError as exc:
            self.show_notice(str(exc))
            return
        self.model_bar.set_loaded(None)
        self.status.show_model(None)
        self.format_note.hide()

    def use_starter_model(self) -> None:
        spawn(self._use_starter(), "starter model")

    async def _use_starter(self) -> None:
        loop = asyncio.get_running_loop()

        def progress(done: int, total: int) -> None:
            loop.call_soon_threadsafe(self.starter.show_progress, done, total)

        try:
            path = await loop.run_in_executor(
                None, starter_model.ensure_starter_model, self.context.paths.models_dir, progress
            )
        except starter_model.StarterModelError as exc:
            self.starter.show_error(str(exc))
            return
        self.model_bar.select(str(path))
        await self._load(str(path))

    def _state_changed(self, state: BackendState) -> None:
        self.status.show_state(state, self.backend.kind)
        if state.kind is StateKind.FAILED and self.backend.model is None:
            self.model_bar.set_loaded(None)
            self.status.show_model(None)


def _import_ollama_service() -> Any:
    """The Ollama service module with the client library itself loaded (~150 ms): for an executor thread."""
    import_now("ollama")
    return importlib.import_module("app.services.ollama_service")
