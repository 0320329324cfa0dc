"""The chat panel: chats list, model bar, transcript, input, sampling controls."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QListWidgetItem,
    QWidget,
)

from app.backends.base import Backend
from app.core.chat import Conversation, Message, Role
from app.core.params import LoadParams
from app.services.chat_session import ChatObserver, ChatSession
from app.services.conversations import AsyncConversationStore, ConversationStoreError
from app.ui.chat_layout import ChatPanelLayout
from app.ui.chat_models import ChatModelsMixin
from app.ui.context import AppContext
from app.ui.status_bar import AppStatusBar
from app.ui.tasks import spawn

log = logging.getLogger("app.ui.chat")


async def _until_idle(sessions: list[ChatSession]) -> None:
    while any(s.generating for s in sessions):
        await asyncio.sleep(0.02)


class _Observer(ChatObserver):
    """Routes one session's events to the panel; a session generating in the background only saves."""

    def __init__(self, panel: ChatPanel) -> None:
        self.panel = panel
        self.session: ChatSession | None = None

    @property
    def visible(self) -> bool:
        return self.session is self.panel.session

    def conversation_changed(self, conversation: Conversation) -> None:
        if self.visible:
            self.panel.show_conversation(conversation)

    def reply_started(self, message: Message) -> None:
        if self.visible:
            self.panel.reply_started()

    def reply_delta(self, text: str) -> None:
        if self.visible:
            self.panel.view.append_reply(text)
            self.panel.status.show_kv(self.panel.backend.kv_usage())  # the context fills as the reply grows

    def reply_finished(self, message: Message) -> None:
        if self.visible:
            self.panel.reply_finished(message)
        else:
            self.panel.background_finished(self.session)

    def failed(self, text: str) -> None:
        if self.visible:
            self.panel.show_notice(text)


class ChatPanel(ChatModelsMixin, ChatPanelLayout):
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
        self._background: dict[int, ChatSession] = {}  # chats still generating while another is shown
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
        self.session = self._new_session()
        chats = await store.list_conversations()
        if chats:
            await self.session.open(chats[0][0])
        else:
            await self.session.new(self.context.settings.system_prompt)
        self.starter.refresh(self.context.settings.recent_models, self.context.paths.models_dir)
        spawn(self.refresh_ollama_models(), "list Ollama models")

    def _new_session(self) -> ChatSession:
        assert self.context.store is not None
        observer = _Observer(self)
        session = ChatSession(self.context.store, self.backend, self.sampling.params, observer)
        observer.session = session
        return session

    def _all_sessions(self) -> list[ChatSession]:
        return ([self.session] if self.session else []) + list(self._background.values())

    def _park_generating_session(self) -> bool:
        """On engines that run several replies, a generating chat keeps going in the background.

        Returns False (and says why) when the current chat is generating on an engine that cannot.
        """
        session = self.session
        if session is None or not session.generating:
            return True
        if not getattr(self.backend, "concurrent_chats", False) or session.conversation is None:
            self.show_notice("A reply is being generated. Stop it (Esc) before switching chats.")
            return False
        assert session.conversation.id is not None
        self.view.end_reply()
        self._background[session.conversation.id] = session
        self.session = self._new_session()
        self._set_generating(False)
        return True

    def background_finished(self, session: ChatSession | None) -> None:
        """A chat that was generating in the background is done: it is saved; drop it, refresh the list."""
        if session is not None and session.conversation is not None:
            self._background.pop(session.conversation.id or -1, None)
        spawn(self.refresh_chats(), "refresh chats")

    def _resume_background(self, chat_id: int) -> bool:
        """Show a chat that is still generating in the background, with its reply so far."""
        session = self._background.pop(chat_id, None)
        if session is None or session.conversation is None:
            return False
        self.session = session
        self.view.show_messages(session.conversation.messages[:-1])
        self.system_prompt.setPlainText(session.conversation.system_prompt)
        self.reply_started()
        self.view.append_reply(session.reply_text)
        spawn(self.refresh_chats(), "refresh chats")
        return True

    async def shutdown(self) -> None:
        """Stop a reply in flight (it is saved as stopped), close the worker and the history. Idempotent."""
        if self.closed:
            return
        self.closed = True
        generating = [s for s in self._all_sessions() if s.generating]
        for session in generating:
            session.stop()
        if generating:
            try:
                await asyncio.wait_for(_until_idle(generating), 5)
            except TimeoutError:
                log.warning("a reply did not stop in time; closing the engine")
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
        if not self._park_generating_session():
            return
        spawn(self._switch_chat(chat_id), "open chat")

    async def _switch_chat(self, chat_id: int) -> None:
        assert self.session is not None
        await self._save_system_prompt()
        self.cancel_edit()
        if not self._resume_background(chat_id):
            await self.session.open(chat_id)

    def new_chat(self) -> None:
        if self.session is None or not self._park_generating_session():
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

    def _busy(self, what: str, any_chat: bool = False) -> bool:
        """True (and says so) when this chat — or, with ``any_chat``, any chat — is generating."""
        sessions = self._all_sessions() if any_chat else ([self.session] if self.session else [])
        if any(s.generating for s in sessions):
            self.show_notice(f"A reply is being generated. Stop it (Esc) before {what}.")
            return True
        return False
