"""The chat page: a view of the chat workspace. It shows one chat and forwards what the user does; which model
and engine chats run on, and the chats still generating in the background, live in the workspace."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from types import ModuleType

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import QListWidgetItem, QWidget

from app.core.chat.conversation import Conversation, Message, Role
from app.core.errors import AppError
from app.core.lazy_import import import_now
from app.core.modelfile.parser import Modelfile
from app.services import starter_model
from app.services.chat.session import ChatObserver, ChatSession
from app.services.chat.workspace import ChatWorkspace, PresetOutcome
from app.services.engines.entries import OLLAMA_PREFIX, VLLM_PREFIX, display_name
from app.services.engines.events import EngineEvent, EngineStateChanged, ModelUnloaded, VllmEndpointChanged
from app.services.workstation import Workstation
from app.ui.pages.chat.layout import ChatPanelLayout
from app.ui.status_bar import AppStatusBar
from app.ui.tasks import spawn

log = logging.getLogger("app.ui.chat")


class _Observer(ChatObserver):
    """Routes one session's events to the page; a session generating in the background only saves."""

    def __init__(self, panel: ChatPanel, session: ChatSession) -> None:
        self.panel = panel
        self.session = session

    @property
    def visible(self) -> bool:
        return self.session is self.panel.session

    def conversation_changed(self, conversation: Conversation) -> None:
        if self.visible:
            self.panel.show_conversation(conversation)

    def reply_started(self, message: Message) -> None:
        if self.visible:
            self.panel.reply_started()

    def reply_queued(self, replies_ahead: int) -> None:
        if self.visible:
            ahead = f"{replies_ahead} reply" if replies_ahead == 1 else f"{replies_ahead} replies"
            self.panel.show_notice(f"Waiting for the engine: {ahead} ahead of this one.")

    def reply_delta(self, text: str) -> None:
        if self.visible:
            self.panel.hide_notice_if_waiting()
            self.panel.view.append_reply(text)
            self.panel.show_context()  # the context fills as the reply grows

    def reply_finished(self, message: Message) -> None:
        if self.visible:
            self.panel.reply_finished(message)
        else:
            self.panel.background_finished(self.session)

    def failed(self, text: str) -> None:
        if self.visible:
            self.panel.show_notice(text)


class ChatPanel(ChatPanelLayout):
    def __init__(self, workstation: Workstation, status: AppStatusBar, parent: QWidget | None = None) -> None:
        super().__init__(workstation.settings.sampling, parent)
        self.workstation = workstation
        self.host = workstation.host
        self.status = status
        self.workspace = ChatWorkspace(workstation, self.sampling.params, self._make_observer)
        self.ready: asyncio.Future[None] | None = None
        self._editing: int | None = None
        self._waiting_notice = False
        self.closed = False
        self.ollama_models: set[str] = set()
        self._connect()
        self._unsubscribe = self.host.subscribe(self._engine_event)
        self.settings_changed()

    @property
    def session(self) -> ChatSession | None:
        return self.workspace.session

    def _make_observer(self, session: ChatSession) -> ChatObserver:
        return _Observer(self, session)

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

    # --- start-up and shutdown -------------------------------------------------------------------------------
    def start(self) -> asyncio.Future[None]:
        """Open the history off the Qt thread and show the newest chat."""
        if self.ready is None:
            self.ready = spawn(self._start(), "open history")
        return self.ready

    async def _start(self) -> None:
        for notice in await self.workspace.start():
            self.show_notice(notice)
        self.starter.refresh(self.workstation.settings.recent_models, self.workstation.paths.models_dir)
        self._offer_vllm_entries()
        spawn(self.refresh_ollama_models(), "list Ollama models")

    async def shutdown(self) -> None:
        """Stop the replies in flight (they are saved as stopped) and keep the system prompt. Idempotent; the
        engines and the history are closed by the window, which owns them."""
        if self.closed:
            return
        self.closed = True
        self._unsubscribe()
        await self.workspace.stop_all()
        await self._save_system_prompt()

    # --- settings --------------------------------------------------------------------------------------------
    def settings_changed(self) -> None:
        settings = self.workstation.settings
        self.model_bar.set_recent(list(settings.recent_models))
        self.sampling.set_params(settings.sampling)

    def _save_sampling_defaults(self) -> None:
        self.workstation.settings.sampling = self.sampling.params()
        spawn(self.workstation.save_settings(), "save settings")
        self.show_notice("Sampling defaults saved.")

    # --- chats -------------------------------------------------------------------------------------------------
    async def refresh_chats(self) -> None:
        chats = await self.workspace.list_chats()
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
        if self._park_generating():
            spawn(self._switch_chat(chat_id), "open chat")

    def _park_generating(self) -> bool:
        generating = self.session is not None and self.session.generating
        if not self.workspace.park_generating():
            self.show_notice("A reply is being generated. Stop it (Esc) before switching chats.")
            return False
        if generating:
            self.view.end_reply()
            self._set_generating(False)
        return True

    async def _switch_chat(self, chat_id: int) -> None:
        await self._save_system_prompt()
        self.cancel_edit()
        resumed = self.workspace.resume_background(chat_id)
        if resumed is None:
            assert self.session is not None
            await self.session.open(chat_id)
            return
        assert resumed.conversation is not None
        self.view.show_messages(resumed.conversation.messages[:-1])
        self.system_prompt.setPlainText(resumed.conversation.system_prompt)
        self.reply_started()
        self.view.append_reply(resumed.reply_text)
        spawn(self.refresh_chats(), "refresh chats")

    def background_finished(self, session: ChatSession) -> None:
        """A chat that was generating in the background is done: it is saved; refresh the list."""
        self.workspace.background_finished(session)
        spawn(self.refresh_chats(), "refresh chats")

    def new_chat(self) -> None:
        if self.session is not None and self._park_generating():
            spawn(self._new_chat(), "new chat")

    async def _new_chat(self) -> None:
        assert self.session is not None
        await self._save_system_prompt()
        self.cancel_edit()
        await self.session.new(self.workstation.settings.system_prompt)
        self.input.setFocus()

    def delete_chat(self) -> None:
        item = self.chats.currentItem()
        if item is None or self.session is None or self._busy("deleting a chat"):
            return
        spawn(self.workspace.delete_chat(item.data(Qt.ItemDataRole.UserRole)), "delete chat")

    async def _save_system_prompt(self) -> None:
        if self.session is not None and self.session.conversation is not None:
            await self.session.set_system_prompt(self.system_prompt.toPlainText())

    # --- sending ---------------------------------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.session is None or self._busy("sending"):
            return
        if self.workspace.model is None:
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

    async def load_and_wait(self, entry: str) -> bool:
        """Load ``entry`` as the Load button does and wait for the outcome (for ``--screenshot --model``)."""
        self.model_bar.select(entry)
        await self._load(entry)
        return self.workspace.model is not None

    async def send_and_wait(self, text: str) -> None:
        """Send ``text`` as the user would and wait until the reply has ended (for ``--screenshot --prompt``)."""
        if self.session is not None and self.workspace.model is not None:
            await self._send(text, None)

    def notice_text(self) -> str:
        return self.notice.text() if self.notice.isVisible() else ""

    def stop(self) -> None:
        if self.session is not None and self.session.generating:
            self.session.stop()

    def regenerate(self) -> None:
        if self.session is None or self._busy("regenerating"):
            return
        if self.workspace.model is None:
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
        self.hide_notice_if_waiting()
        self.view.end_reply()
        self._set_generating(False)
        if self.session is not None and self.session.conversation is not None:
            self.view.show_messages(self.session.conversation.messages)
        self.status.show_stats(message.stats)
        self.show_context()

    def show_notice(self, text: str) -> None:
        self._waiting_notice = text.startswith("Waiting for the engine")
        super().show_notice(text)

    def hide_notice_if_waiting(self) -> None:
        if self._waiting_notice:
            self._waiting_notice = False
            self.hide_notice()

    def show_context(self) -> None:
        engine = self.host.engine(self.workspace.engine)
        self.status.show_kv(engine.kv_usage() if engine is not None else None)

    def _set_generating(self, generating: bool) -> None:
        self.send_button.setEnabled(not generating)
        self.stop_button.setEnabled(generating)

    def _busy(self, what: str, any_chat: bool = False) -> bool:
        """True (and says so) when this chat — or, with ``any_chat``, any chat — is generating."""
        if self.workspace.busy(any_chat):
            self.show_notice(f"A reply is being generated. Stop it (Esc) before {what}.")
            return True
        return False

    # --- models ------------------------------------------------------------------------------------------------
    def choose_model_file(self) -> None:
        self.model_bar.choose_file()

    def load_model(self, entry: str) -> None:
        spawn(self._load(entry), "load model")

    async def _load(self, entry: str) -> None:
        if self._busy("loading another model", any_chat=True):
            return
        self.hide_notice()
        self.model_bar.set_loading(display_name(entry))
        try:
            outcome = await self.workspace.load(entry)
        except AppError as exc:
            self._show_loaded()  # a refused load keeps the model loaded before
            self.show_notice(str(exc))
            return
        info = outcome.info
        self.model_bar.set_loaded(entry, f"Loaded in {info.load_seconds:.1f} s · context {info.n_ctx:,}")
        self.status.show_model(info)
        self.show_context()
        self._show_format_note(entry, info.chat_format_reason, info.chat_format is None)
        if outcome.notes:
            self.show_notice(" ".join(outcome.notes))
        self.model_bar.set_recent(self.workstation.settings.recent_models)
        self.starter.hide()
        spawn(self.workstation.save_settings(), "save settings")

    def _show_loaded(self) -> None:
        loaded = self.host.loaded(self.workspace.engine)
        self.model_bar.set_loaded(loaded.entry if loaded else None)
        self.status.show_model(loaded.info if loaded else None)

    def unload_model(self) -> None:
        spawn(self._unload(), "unload model")

    async def _unload(self) -> None:
        try:
            await self.workspace.unload()
        except AppError as exc:
            self.show_notice(str(exc))
            return
        self.model_bar.set_loaded(None)
        self.status.show_model(None)
        self.format_note.hide()

    def _show_format_note(self, entry: str, reason: str, from_template: bool) -> None:
        notes = [] if from_template else [reason]
        if Path(entry).name == starter_model.FILE_NAME:
            notes.append(starter_model.NOTE)
        self.format_note.setText(" ".join(notes))
        self.format_note.setVisible(bool(notes))

    def use_starter_model(self) -> None:
        spawn(self._use_starter(), "starter model")

    async def _use_starter(self) -> None:
        loop = asyncio.get_running_loop()

        def progress(done: int, total: int) -> None:
            loop.call_soon_threadsafe(self.starter.show_progress, done, total)

        models_dir = self.workstation.paths.models_dir
        try:
            path = await loop.run_in_executor(None, starter_model.ensure_starter_model, models_dir, progress)
        except starter_model.StarterModelError as exc:
            self.starter.show_error(str(exc))
            return
        self.model_bar.select(str(path))
        await self._load(str(path))

    async def refresh_ollama_models(self) -> None:
        """List Ollama's models in the model picker when Ollama runs; a stopped Ollama is not an error."""
        loop = asyncio.get_running_loop()
        module = await loop.run_in_executor(None, _import_ollama_service)
        async with module.OllamaService(self.workstation.settings.ollama_host or None) as service:
            status = await service.status()
            models = await service.list_models() if status.running else []
        self.model_bar.set_ollama_models([m.name for m in models], status.summary())
        self.ollama_models = {m.name for m in models}

    def _engine_event(self, event: EngineEvent) -> None:
        """The engine host's news: the chat's engine state, a model gone, a vLLM server offered or withdrawn."""
        if isinstance(event, VllmEndpointChanged):
            self._offer_vllm_entries()
        elif isinstance(event, EngineStateChanged) and event.engine is self.workspace.engine:
            self.status.show_state(event.state, str(event.engine))
        elif isinstance(event, ModelUnloaded) and event.engine is self.workspace.engine:
            self.model_bar.set_loaded(None)
            self.status.show_model(None)

    def _offer_vllm_entries(self) -> None:
        endpoint = self.host.vllm_endpoint
        self.model_bar.set_engine_models(VLLM_PREFIX, [endpoint.served_model] if endpoint else [])

    # --- presets -----------------------------------------------------------------------------------------------
    def apply_modelfile(self, modelfile: Modelfile, name: str = "preset") -> None:
        """Use a Modelfile as a preset: sampling, load options, system prompt and history in a new chat."""
        if self.session is None or self._busy("applying a preset", any_chat=True):
            return
        preset = self.workspace.preset(modelfile, name, self.sampling.params())
        self.sampling.set_params(preset.sampling)
        spawn(self._start_preset_chat(preset, name), "apply preset")

    async def _start_preset_chat(self, preset: PresetOutcome, name: str) -> None:
        await self._save_system_prompt()
        await self.workspace.start_preset_chat(preset, name)
        self.show_notice(" ".join(preset.notes))
        entry = await self._preset_model_entry(preset.model)
        if entry is not None:
            self.model_bar.select(entry)
            await self._load(entry)

    async def _preset_model_entry(self, model: str | None) -> str | None:
        """FROM as a model entry: a local GGUF, or an Ollama model that Ollama has."""
        if not model:
            return None
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(None, os.path.isfile, os.path.expanduser(model)):
            return model
        name = model if ":" in model else f"{model}:latest"
        return OLLAMA_PREFIX + name if name in self.ollama_models else None


def _import_ollama_service() -> ModuleType:
    """The Ollama service module with the client library itself loaded (~150 ms): for an executor thread."""
    import importlib

    import_now("ollama")
    return importlib.import_module("app.services.ollama.client")
