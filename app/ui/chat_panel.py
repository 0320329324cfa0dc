"""The chat panel: chats list, model bar, transcript, input, sampling controls."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QListWidgetItem,
    QWidget,
)

from app.backends.base import Backend, BackendError, BackendState, StateKind
from app.core.chat import Conversation, Message, Role
from app.core.modelfile import Modelfile
from app.core.params import LoadParams
from app.core.preset_mapping import LlamaCppPreset, to_llamacpp
from app.services import starter_model
from app.services.chat_session import ChatObserver, ChatSession
from app.services.conversations import AsyncConversationStore, ConversationStoreError
from app.ui.chat_layout import ChatPanelLayout
from app.ui.context import OLLAMA_PREFIX, AppContext
from app.ui.status_bar import AppStatusBar
from app.ui.tasks import spawn

log = logging.getLogger("app.ui.chat")


def _engine_model(entry: str) -> str:
    return entry.removeprefix(OLLAMA_PREFIX)


def _display_name(entry: str) -> str:
    return entry.removeprefix(OLLAMA_PREFIX) if entry.startswith(OLLAMA_PREFIX) else Path(entry).name


async def _wait_idle(backend: Backend) -> None:
    wait = getattr(backend, "wait_idle", None)
    if wait is not None:
        await wait()


async def _is_local_file(path: str) -> bool:
    return await asyncio.get_running_loop().run_in_executor(None, os.path.isfile, os.path.expanduser(path))


class _Observer(ChatObserver):
    def __init__(self, panel: ChatPanel) -> None:
        self.panel = panel

    def conversation_changed(self, conversation: Conversation) -> None:
        self.panel.show_conversation(conversation)

    def reply_started(self, message: Message) -> None:
        self.panel.reply_started()

    def reply_delta(self, text: str) -> None:
        self.panel.view.append_reply(text)

    def reply_finished(self, message: Message) -> None:
        self.panel.reply_finished(message)

    def failed(self, text: str) -> None:
        self.panel.show_notice(text)


class ChatPanel(ChatPanelLayout):
    def __init__(self, context: AppContext, status: AppStatusBar, parent: QWidget | None = None) -> None:
        super().__init__(context.settings.sampling, parent)
        self.context = context
        self.status = status
        self.backend: Backend = context.backend
        self.session: ChatSession | None = None
        self.ready: asyncio.Future[None] | None = None
        self._editing: int | None = None
        self.closed = False
        self.preset_load: LoadParams | None = None  # load options from a Modelfile, used instead of the defaults
        self._loaded_with: LoadParams | None = None
        self._listened: list[Backend] = []
        self.ollama_models: set[str] = set()
        self._connect()
        self.backend.add_state_listener(self._backend_state_listener(self.backend))
        self.settings_changed()

    def _connect(self) -> None:
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        self.new_chat_button.clicked.connect(self.new_chat)
        self.delete_chat_button.clicked.connect(self.delete_chat)
        self.chats.itemActivated.connect(self._chat_chosen)
        self.chats.itemClicked.connect(self._chat_chosen)
        self.view.edit_requested.connect(self.begin_edit)
        self.view.regenerate_requested.connect(self.regenerate)
        self.model_bar.load_requested.connect(self.load_model)
        self.model_bar.unload_requested.connect(self.unload_model)
        self.starter.use_requested.connect(self.use_starter_model)
        self.save_defaults_button.clicked.connect(self._save_sampling_defaults)
        self.input.installEventFilter(self)
        stop = QShortcut(QKeySequence("Escape"), self)
        stop.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        stop.activated.connect(self.stop)
        self._set_generating(False)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Ctrl+Enter sends and Esc stops while typing (plain Enter makes a new line)."""
        if watched is self.input and event.type() == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            ctrl = bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)
            if ctrl and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                self.send()
                return True
            if event.key() == Qt.Key.Key_Escape and self.session is not None and self.session.generating:
                self.stop()
                return True
        return super().eventFilter(watched, event)

    # --- start-up and shutdown -------------------------------------------------------------------
    def start(self) -> asyncio.Future[None]:
        """Open the history off the Qt thread and show the newest chat."""
        self.ready = spawn(self._open_history(), "open history")
        return self.ready

    async def _open_history(self) -> None:
        try:
            store = await AsyncConversationStore.open(self.context.paths.conversations_db)
        except ConversationStoreError as exc:
            self.show_notice(f"{exc} Chats in this session will not be saved.")
            log.error("%s", exc)
            return
        self.context.store = store
        recovered = await store.recover_interrupted()
        if recovered:
            self.show_notice(f"{recovered} reply(s) were cut off when the app last closed; they are kept and marked.")
        self.session = ChatSession(store, self.backend, self.sampling.params, _Observer(self))
        chats = await store.list_conversations()
        if chats:
            await self.session.open(chats[0][0])
        else:
            await self.session.new(self.context.settings.system_prompt)
        self.starter.refresh(self.context.settings.recent_models, self.context.paths.models_dir)
        spawn(self.refresh_ollama_models(), "list Ollama models")

    async def shutdown(self) -> None:
        """Stop a reply in flight (it is saved as stopped), close the worker and the history. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.session is not None and self.session.generating:
            self.session.stop()
            try:
                await asyncio.wait_for(_wait_idle(self.backend), 5)
            except TimeoutError:
                log.warning("the worker did not stop in time; closing it")
        if self.session is not None and self.session.conversation is not None:
            await self._save_system_prompt()
        for backend in self.context.backends():
            await backend.close()
        if self.context.store is not None:
            await self.context.store.aclose()

    # --- settings --------------------------------------------------------------------------------
    def settings_changed(self) -> None:
        settings = self.context.settings
        recent = [p for p in settings.recent_models]
        self.model_bar.set_recent(recent)
        self.sampling.set_params(settings.sampling)

    def _save_sampling_defaults(self) -> None:
        self.context.settings.sampling = self.sampling.params()
        self._persist_settings()
        self.show_notice("Sampling defaults saved.")

    def _persist_settings(self) -> None:
        window = self.window()
        save = getattr(window, "save_settings", None)
        if save is not None:
            spawn(save(), "save settings")

    # --- chats -------------------------------------------------------------------------------------
    async def refresh_chats(self) -> None:
        if self.context.store is None:
            return
        chats = await self.context.store.list_conversations()
        current = self.session.conversation.id if self.session and self.session.conversation else None
        self.chats.clear()
        for chat_id, title, _updated in chats:
            item = QListWidgetItem(title)
            item.setData(Qt.ItemDataRole.UserRole, chat_id)
            self.chats.addItem(item)
            if chat_id == current:
                self.chats.setCurrentItem(item)

    def show_conversation(self, conversation: Conversation) -> None:
        self.view.show_messages(conversation.messages)
        self.system_prompt.setPlainText(conversation.system_prompt)
        spawn(self.refresh_chats(), "refresh chats")  # the title may have changed

    def _chat_chosen(self, item: QListWidgetItem) -> None:
        chat_id = item.data(Qt.ItemDataRole.UserRole)
        if self.session is None or (self.session.conversation and self.session.conversation.id == chat_id):
            return
        if self._busy("switching chats"):
            return
        spawn(self._switch_chat(chat_id), "open chat")

    async def _switch_chat(self, chat_id: int) -> None:
        assert self.session is not None
        await self._save_system_prompt()
        self.cancel_edit()
        await self.session.open(chat_id)

    def new_chat(self) -> None:
        if self.session is None or self._busy("starting a new chat"):
            return
        spawn(self._new_chat(), "new chat")

    async def _new_chat(self) -> None:
        assert self.session is not None
        await self._save_system_prompt()
        self.cancel_edit()
        await self.session.new(self.context.settings.system_prompt)
        self.input.setFocus()

    def delete_chat(self) -> None:
        item = self.chats.currentItem()
        if item is None or self.session is None or self._busy("deleting a chat"):
            return
        spawn(self._delete_chat(item.data(Qt.ItemDataRole.UserRole)), "delete chat")

    async def _delete_chat(self, chat_id: int) -> None:
        assert self.session is not None and self.context.store is not None
        await self.context.store.delete(chat_id)
        if self.session.conversation and self.session.conversation.id == chat_id:
            chats = await self.context.store.list_conversations()
            if chats:
                await self.session.open(chats[0][0])
            else:
                await self.session.new(self.context.settings.system_prompt)

    async def _save_system_prompt(self) -> None:
        if self.session is not None and self.session.conversation is not None:
            await self.session.set_system_prompt(self.system_prompt.toPlainText())

    # --- sending --------------------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.session is None:
            return
        if self._busy("sending"):
            return
        if self.backend.model is None:
            self.show_notice("No model is loaded. Choose a model above and press Load, then send again.")
            return
        editing, self._editing = self._editing, None
        self.input.clear()
        self._hide_edit_banner()
        self.hide_notice()
        spawn(self._send(text, editing), "send")

    async def _send(self, text: str, editing: int | None) -> None:
        assert self.session is not None
        await self._save_system_prompt()
        if editing is None:
            await self.session.send(text)
        else:
            await self.session.edit_and_resend(editing, text)

    def stop(self) -> None:
        if self.session is not None and self.session.generating:
            self.session.stop()

    def regenerate(self) -> None:
        if self.session is None or self._busy("regenerating"):
            return
        if self.backend.model is None:
            self.show_notice("No model is loaded. Load a model, then regenerate.")
            return
        spawn(self.session.regenerate(), "regenerate")

    def begin_edit(self, index: int) -> None:
        if self.session is None or self.session.conversation is None or self._busy("editing"):
            return
        message = self.session.conversation.messages[index]
        if message.role is not Role.USER:
            return
        self._editing = index
        self.input.setPlainText(message.content)
        self.input.setFocus()
        self.edit_banner.setText("Editing an earlier message: sending replaces it and every message after it.")
        self.edit_banner.show()
        self.cancel_edit_button.show()

    def cancel_edit(self) -> None:
        if self._editing is not None:
            self._editing = None
            self.input.clear()
        self._hide_edit_banner()

    def _hide_edit_banner(self) -> None:
        self.edit_banner.hide()
        self.cancel_edit_button.hide()

    def reply_started(self) -> None:
        self._set_generating(True)
        self.view.begin_reply()

    def reply_finished(self, message: Message) -> None:
        self.view.end_reply()
        self._set_generating(False)
        if self.session is not None and self.session.conversation is not None:
            self.view.show_messages(self.session.conversation.messages)
        self.status.show_stats(message.stats)
        self.status.show_kv(self.backend.kv_usage())

    def _set_generating(self, generating: bool) -> None:
        self.send_button.setEnabled(not generating)
        self.stop_button.setEnabled(generating)

    def _busy(self, what: str) -> bool:
        if self.session is not None and self.session.generating:
            self.show_notice(f"A reply is being generated. Stop it (Esc) before {what}.")
            return True
        return False

    # --- models -------------------------------------------------------------------------------------
    def choose_model_file(self) -> None:
        self.model_bar.choose_file()

    def load_model(self, path: str) -> None:
        spawn(self._load(path), "load model")

    async def _load(self, path: str) -> None:
        if self._busy("loading another model"):
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
        module = await loop.run_in_executor(None, importlib.import_module, "app.services.ollama_service")
        async with module.OllamaService(self.context.settings.ollama_host or None) as service:
            status = await service.status()
            models = await service.list_models() if status.running else []
        self.model_bar.set_ollama_models([m.name for m in models], status.summary())
        self.ollama_models = {m.name for m in models}

    def load_params(self) -> LoadParams:
        return self.preset_load or self.context.settings.load

    # --- presets ----------------------------------------------------------------------------------
    def apply_modelfile(self, modelfile: Modelfile, name: str = "preset") -> None:
        """Use a Modelfile as a preset: sampling, load options, system prompt and history in a new chat."""
        if self.session is None or self._busy("applying a preset"):
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
