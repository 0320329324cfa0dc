"""The chat page: a view of the chat workspace. It shows one chat and forwards what the user does; which model
and engine chats run on, and the chats still generating in the background, live in the workspace. The model side
(loading, the starter model, per-model settings, presets) is :class:`app.ui.pages.chat.models.ChatModels`."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import QWidget

from app.backends.protocol import BackendState
from app.core.chat.conversation import Attachment, Conversation, Message, OverflowPolicy, Role
from app.core.chat.overflow import when_full
from app.core.modelfile.parser import Modelfile
from app.services import starter_model
from app.services.chat.attachments import AttachmentStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.chat.workspace import ChatWorkspace, context_tokens
from app.services.engines.entries import ENGINE_LABELS, VLLM_PREFIX
from app.services.engines.events import (
    EngineEvent,
    EngineStateChanged,
    ModelLoaded,
    ModelUnloaded,
    VllmEndpointChanged,
)
from app.services.settings_changes import SettingsChanged
from app.services.workstation import Workstation
from app.ui.pages.chat.chat_documents import ChatDocumentsControl
from app.ui.pages.chat.chat_list import APPROVAL, GENERATING
from app.ui.pages.chat.chat_tools import ChatToolsControl
from app.ui.pages.chat.composer import images_refusal
from app.ui.pages.chat.conversations import ChatConversations
from app.ui.pages.chat.layout import WIDE_WINDOW, ChatPanelLayout
from app.ui.pages.chat.models import ChatModels, model_name
from app.ui.pages.chat.thinking_form import ThinkingControl
from app.ui.status_bar import AppStatusBar
from app.ui.tasks import spawn

log = logging.getLogger("app.ui.chat")
_SHOWN_SETTINGS = (
    "recent_models",
    "restore_last_model",
    "send_with_ctrl_enter",
    "ollama_host",
    "sampling",
    "load",
)  # what the page shows of the settings; other fields do not touch it
CHARS_PER_TOKEN = 4  # a rough guess, marked "~", for chats whose replies were not measured


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
            self.panel.reply_started(message)
        else:
            self.panel.show_background_activity()

    def reply_queued(self, replies_ahead: int) -> None:
        if self.visible:
            ahead = f"{replies_ahead} reply" if replies_ahead == 1 else f"{replies_ahead} replies"
            self.panel.show_notice(f"Waiting for the engine: {ahead} ahead of this one.", key="waiting", timeout_ms=0)

    def reply_delta(self, text: str) -> None:
        if self.visible:
            self.panel.hide_notice("waiting")
            self.panel.view.append_reply(text)
            self.panel.show_context()  # the context fills as the reply grows

    def reply_thinking(self, text: str) -> None:
        if self.visible:
            self.panel.hide_notice("waiting")
            self.panel.view.append_thinking(text)

    def reply_recast(self, thinking: str) -> None:
        if self.visible:
            self.panel.view.recast_thinking(thinking)

    def reply_finished(self, message: Message) -> None:
        if self.visible:
            self.panel.reply_finished(message)
        else:
            self.panel.background_finished(self.session)

    def tools_changed(self, message: Message) -> None:
        if self.visible:
            self.panel.tools.tools_changed(message)
        else:
            self.panel.show_background_activity()

    def failed(self, text: str) -> None:
        if self.visible:
            self.panel.show_notice(text, "error", key="reply")


class ChatPanel(ChatPanelLayout):
    def __init__(self, workstation: Workstation, status: AppStatusBar, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self.host = workstation.host
        self.status = status
        self.workspace = ChatWorkspace(workstation, self.sampling.params, self._make_observer)
        self.models = ChatModels(self)
        self.composer.set_attachment_store(AttachmentStore(workstation.paths.attachments_dir))
        self.conversations = ChatConversations(self)  # search, forks, pins, folders, export, import
        self.thinking = ThinkingControl(self.drawer.thinking, self.workspace)  # shown where the model offers it
        self.tools = ChatToolsControl(self)  # the chat's MCP tools: the drawer's picker, the transcript's cards
        self.chat_documents = ChatDocumentsControl(self, self)  # attached documents, their chips, sources shown
        self.ready: asyncio.Future[None] | None = None
        self._editing: int | None = None
        self._reply_coming = False  # sent, and the reply has not started yet: the typing dots already show
        self._switching: asyncio.Future[None] | None = None  # a message's version being switched (and saved)
        self._drawer_decided = workstation.settings.chat_drawer_open is not None
        self._approvals_announced: set[int] = set()  # background chats whose waiting tool call was announced
        self.closed = False
        self.ollama_models: set[str] = set()
        self._ollama_listed: tuple[str | None] | None = None  # (the Ollama host last listed,); None: not yet
        self._connect()
        self.follow(self.host.subscribe(self._engine_event))
        self.set_chats_open(workstation.settings.chat_list_open)
        self.set_drawer_open(bool(workstation.settings.chat_drawer_open))
        self._show_settings()
        self.show_transcript(False)
        self.refresh_empty_state()

    @property
    def session(self) -> ChatSession | None:
        return self.workspace.session

    def _make_observer(self, session: ChatSession) -> ChatObserver:
        return _Observer(self, session)

    def _connect(self) -> None:
        self.composer.send_requested.connect(self.send)
        self.composer.attach_failed.connect(lambda text: self.show_notice(text, "error", key="images"))
        self.composer.stop_requested.connect(self.stop)
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        self.chats.new_chat_requested.connect(self.new_chat)
        self.chats.delete_requested.connect(self.delete_chat)
        self.chats.chat_chosen.connect(self.open_chat)
        self._connect_transcript()
        self._connect_models()
        self.chats_toggle.toggled.connect(self._chats_toggled)
        self.drawer_toggle.toggled.connect(self._drawer_toggled)
        self.drawer.close_requested.connect(lambda: self.drawer_toggle.setChecked(False))
        stop = QShortcut(QKeySequence("Escape"), self)
        stop.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        stop.activated.connect(self.stop)
        self._set_generating(False)

    def _connect_transcript(self) -> None:
        """The transcript's requests; a reply cut at the token limit carries its own Continue button."""
        self.view.edit_requested.connect(self.begin_edit)
        self.view.regenerate_requested.connect(self.regenerate)
        self.view.continue_requested.connect(self.continue_reply)
        self.view.version_requested.connect(self.show_version)

    def _connect_models(self) -> None:
        models, drawer = self.models, self.drawer
        self.model_bar.load_requested.connect(models.load_model)
        self.model_bar.unload_requested.connect(models.unload)
        self.model_bar.selection_changed.connect(models.model_chosen)
        self.empty_state.use_starter_requested.connect(models.use_starter_model)
        self.empty_state.open_requested.connect(self.model_bar.choose_file)
        self.empty_state.example_chosen.connect(self.send_text)
        drawer.preset_chosen.connect(models.preset_chosen)
        drawer.sampling_changed.connect(models.drawer_changed)
        drawer.load_changed.connect(models.drawer_changed)
        drawer.reload_requested.connect(models.reload)
        drawer.save_defaults_requested.connect(models.save_defaults)
        drawer.reset_requested.connect(models.reset)
        drawer.restore_toggled.connect(models.set_restore_last)
        drawer.overflow.chosen.connect(self.set_overflow)

    def showEvent(self, event: QShowEvent) -> None:
        """The first time: the drawer opens by itself only on a wide window (later the person's choice counts)."""
        super().showEvent(event)
        if not self._drawer_decided:
            self._drawer_decided = True
            self.set_drawer_open(self.window().width() >= WIDE_WINDOW)

    # --- start-up and shutdown -------------------------------------------------------------------------------
    def start(self) -> asyncio.Future[None]:
        """Open the history off the Qt thread and show the newest chat."""
        if self.ready is None:
            self.ready = spawn(self._start(), "open history")
        return self.ready

    async def _start(self) -> None:
        for notice in await self.workspace.start():
            self.show_notice(notice, "warning")
        self.models.show_settings()
        self._offer_vllm_entries()
        self.conversations.start()
        self.tools.start()
        spawn(self._list_presets(), "list presets")
        self.models.restoring = spawn(self.models.restore_last(), "restore the last model")

    async def _list_presets(self) -> None:
        self.drawer.set_presets(await self.models.list_presets())
        self.models.show_settings()

    async def shutdown(self) -> None:
        """Stop the replies in flight (they are saved as stopped) and keep the system prompt. Idempotent; the
        engines and the history are the workstation's, closed after every page."""
        if self.closed:
            return
        self.closed = True
        await super().shutdown()
        self.models.flush_settings()
        await self.conversations.finish_deletes()
        await self.workspace.stop_all()
        await self.save_system_prompt()

    # --- settings --------------------------------------------------------------------------------------------
    def settings_changed(self, event: SettingsChanged) -> None:
        if event.touches(*_SHOWN_SETTINGS):
            self._show_settings()

    def _show_settings(self) -> None:
        settings = self.workstation.settings
        self.model_bar.set_recent(list(settings.recent_models))
        self.drawer.set_restore_last(settings.restore_last_model)
        self.composer.set_send_with_ctrl_enter(settings.send_with_ctrl_enter)
        self.models.show_settings()
        if self._ollama_listed is not None and self._ollama_listed != (settings.ollama_host or None,):
            spawn(self.refresh_ollama_models(), "list Ollama models")  # another Ollama: its models, not the old ones

    def _chats_toggled(self, opened: bool) -> None:
        self.set_chats_open(opened)
        self.workstation.update_settings(chat_list_open=opened)

    def _drawer_toggled(self, opened: bool) -> None:
        self.set_drawer_open(opened)
        self._drawer_decided = True
        self.workstation.update_settings(chat_drawer_open=opened)

    # --- chats (the list is a separate piece: refresh_chats, open_chat, delete_chat) ---------------------------
    async def refresh_chats(self) -> None:
        """Reload the chats list's first page (off the Qt thread) with the chat shown selected."""
        current = self.session.conversation.id if self.session and self.session.conversation else None
        self.chats.set_source(self.workstation.store)
        self.chats.select(current)
        try:
            await self.chats.refresh()
        except Exception:
            if not self.closed:  # closed: the shutdown closed the history under a refresh begun just before it
                raise

    def open_chat(self, chat_id: int) -> None:
        """Show the chat with that id (the list's request)."""
        if self.session is None or (self.session.conversation and self.session.conversation.id == chat_id):
            return
        if self.park_generating():
            spawn(self.switch_chat(chat_id), "open chat")

    def set_overflow(self, policy: str) -> None:
        """The person chose what this chat does when its context is full."""
        if self.session is not None:
            spawn(self.session.set_overflow(OverflowPolicy(policy)), "save the chat's overflow policy")
        self.show_context()

    def show_conversation(self, conversation: Conversation) -> None:
        self.view.show_messages(conversation.messages, self.conversations.origin_note(conversation))
        if self._reply_coming:  # the message is in; its reply shows typing dots from now to its first token
            self._begin_reply_view()
        self.show_transcript(bool(conversation.messages))
        self.system_prompt.setPlainText(conversation.system_prompt)
        self.drawer.overflow.show_policy(conversation.overflow)
        self.tools.chat_shown()
        self.chat_documents.chat_shown(conversation)
        self.refresh_empty_state()
        self.show_context()
        spawn(self.refresh_chats(), "refresh chats")  # the title may have changed

    def park_generating(self) -> bool:
        generating = self.session is not None and self.session.generating
        if not self.workspace.park_generating():
            self.show_notice("A reply is being generated. Stop it (Esc) before switching chats.", key="busy")
            return False
        if generating:
            self.view.end_reply()
            self._set_generating(False)
            self.show_background_activity()
        return True

    async def switch_chat(self, chat_id: int) -> None:
        await self.save_system_prompt()
        self.cancel_edit()
        resumed = self.workspace.resume_background(chat_id)
        if resumed is None:
            assert self.session is not None
            await self.session.open(chat_id)
            return
        assert resumed.conversation is not None
        self.system_prompt.setPlainText(resumed.conversation.system_prompt)
        self.show_background_activity()
        if resumed.settling_tools:  # the reply's calls wait for the person or run: show their cards
            self._set_generating(True)
            self.show_transcript(True)
            self.tools.tools_changed(resumed.conversation.messages[-1])
        else:
            self.view.show_messages(resumed.conversation.messages[:-1])
            self._begin_reply_view()
            self.view.append_thinking(resumed.reply_thinking)
            self.view.append_reply(resumed.reply_text)
        self.tools.refresh()
        spawn(self.refresh_chats(), "refresh chats")

    def background_finished(self, session: ChatSession) -> None:
        """A chat that was generating in the background is done: it is saved; refresh the list."""
        self.workspace.background_finished(session)
        self.show_background_activity()
        spawn(self.refresh_chats(), "refresh chats")

    def show_background_activity(self) -> None:
        """Mark the chats busy in the background in the list; a tool call waiting in one is announced once, with
        a way to open that chat, and the announcement goes when the chat is opened or stops waiting."""
        activity = self.workspace.background_activity()
        self.chats.set_activity({chat: APPROVAL if waiting else GENERATING for chat, waiting in activity.items()})
        waiting = {chat for chat, is_waiting in activity.items() if is_waiting}
        for chat_id in self._approvals_announced - waiting:
            self.hide_notice(f"approval:{chat_id}")
        for chat_id in waiting - self._approvals_announced:
            session = self.workspace.background[chat_id]
            title = session.conversation.title if session.conversation else "A chat"
            self.show_notice(
                f"“{title}” is waiting for your approval of a tool call.", "warning", key=f"approval:{chat_id}",
                action=("Open chat", functools.partial(self.open_chat, chat_id)),
            )  # fmt: skip
        self._approvals_announced = waiting

    def new_chat(self) -> None:
        if self.session is not None and self.park_generating():
            spawn(self._new_chat(), "new chat")

    async def _new_chat(self) -> None:
        assert self.session is not None
        await self.save_system_prompt()
        self.cancel_edit()
        await self.session.new(self.workstation.settings.system_prompt)
        self.input.setFocus()

    def delete_chat(self, chat_id: int | None = None) -> None:
        """Delete a chat, with an undo notice (the list's request; default: the chat shown)."""
        if chat_id is None:
            chat_id = self.chats.current_id()
        if chat_id is None or self.session is None or self.busy("deleting a chat"):
            return
        self.conversations.delete(chat_id)

    async def save_system_prompt(self) -> None:
        if self.session is not None and self.session.conversation is not None:
            await self.session.set_system_prompt(self.system_prompt.toPlainText())

    # --- sending ---------------------------------------------------------------------------------------------
    def send(self) -> None:
        """Send what is in the input (Send, or the send key: Enter, or Ctrl+Enter by the setting)."""
        self.send_text(self.input.toPlainText().strip())

    def send_text(self, text: str) -> None:
        """Send ``text`` (and the draft's images); with no model loaded, the chosen model (or the starter model)
        loads first."""
        if not (text or self.composer.images) or self.session is None or self.busy("sending"):
            return
        if self.composer.adding:
            self.show_notice("The images are still being added; send again in a moment.", key="images")
            return
        if self.workspace.model is None:
            spawn(self._load_then_send(text), "load and send")
            return
        self._dispatch(text)

    async def _load_then_send(self, text: str) -> None:
        self.composer.set_sending_enabled(False)
        try:
            ready = await self.models.ensure_model()
        finally:
            self.composer.set_sending_enabled(True)
        if ready and self.workspace.model is not None and not self.busy("sending"):
            self._dispatch(text)

    def _dispatch(self, text: str) -> None:
        if self.composer.images and (refusal := images_refusal(self.workspace.model)):
            self.show_notice(refusal, "warning", key="images")  # the draft and its images stay
            return
        self.hide_notice("images")
        images = self.composer.take_images()
        editing, self._editing = self._editing, None
        self.input.clear()
        self._hide_edit_banner()
        for key in ("model", "reply", "length", "busy"):
            self.hide_notice(key)
        spawn(self._replying(self._send(text, editing, images)), "send")

    async def _send(self, text: str, editing: int | None, images: list[Attachment] | None = None) -> None:
        assert self.session is not None
        await self.save_system_prompt()
        if editing is None:
            await self.session.send(text, images or [])
        else:
            await self.session.edit_and_resend(editing, text)

    async def _replying(self, work: Awaitable[object]) -> None:
        """Run ``work`` (a send, a regenerate) with the typing dots shown as soon as the chat shows its message,
        before the reply starts; they go with the reply, or here when it never started (an error)."""
        self._reply_coming = True
        try:
            await work
        finally:
            self._reply_coming = False
            session = self.session
            if self.view.is_streaming and session is not None and not session.generating:
                self.view.show_messages(session.conversation.messages if session.conversation else [])
                self._set_generating(False)

    async def load_and_wait(self, entry: str) -> bool:
        """Load ``entry`` as the Load button does and wait for the outcome (for ``--screenshot --model``)."""
        if self.models.loading is not None and not self.models.loading.done():
            await asyncio.wait([self.models.loading])  # the last model, restored at start-up
        if self.workspace.entry == entry and self.workspace.model is not None:
            return True
        return await self.models.load(entry)

    async def send_and_wait(self, text: str) -> None:
        """Send ``text`` as the user would and wait until the reply has ended (for ``--screenshot --prompt``)."""
        if self.session is not None and self.workspace.model is not None:
            await self._send(text, None)

    def notice_text(self) -> str:
        return self.notice.text()

    def stop(self) -> None:
        if self.session is not None and self.session.generating:
            self.session.stop()

    def regenerate(self) -> None:
        if self.session is None or self.busy("regenerating"):
            return
        if self.workspace.model is None:
            self.show_notice("No model is loaded. Load a model, then regenerate.", "warning", key="model")
            return
        self.hide_notice("length")
        spawn(self._replying(self.session.regenerate()), "regenerate")

    def show_version(self, index: int, slot: int) -> None:
        """Show another version of message ``index`` (``‹ 2/3 ›``); the rest of the chat follows it."""
        if self.session is None or self.busy("switching versions"):
            return
        if self._switching is not None and not self._switching.done():
            return  # one switch at a time: the next click counts from what it shows
        self.cancel_edit()
        self._switching = spawn(self.session.show_version(index, slot), "show a version")

    def continue_reply(self) -> None:
        """Let the model go on with a reply that stopped at the token limit or was stopped (appended to it)."""
        if self.session is None or self.busy("continuing"):
            return
        if self.workspace.model is None:
            self.show_notice("No model is loaded. Load a model, then continue.", "warning", key="model")
            return
        engine = self.workspace.engine
        if not self.workspace.host.facts(engine).continues_replies:  # its chat API answers a new reply instead
            self.show_notice(f"{ENGINE_LABELS[engine]} cannot continue a reply: regenerate it (with a larger Max "
                             "tokens if it was cut).", key="length")  # fmt: skip
            return
        last = self.session.conversation.messages[-1] if self.session.conversation else None
        if last is not None and last.reasoning and not last.content:  # cut off while it was still thinking
            self.show_notice("The model ran out of tokens while still thinking, so there is no answer to continue: "
                             "raise Max tokens and regenerate.", "warning", key="length")  # fmt: skip
            return
        self.hide_notice("length")
        spawn(self.session.continue_reply(), "continue reply")

    def begin_edit(self, index: int) -> None:
        if self.session is None or self.session.conversation is None or self.busy("editing"):
            return
        message = self.session.conversation.messages[index]
        if message.role is not Role.USER:
            return
        self._editing = index
        self.input.setPlainText(message.content)
        self.input.setFocus()
        self.edit_banner.show()

    def cancel_edit(self) -> None:
        if self._editing is not None:
            self._editing = None
            self.input.clear()
        self._hide_edit_banner()

    def _hide_edit_banner(self) -> None:
        self.edit_banner.hide()

    def reply_started(self, message: Message) -> None:
        """A reply begins; a continued one shows what it had first and grows from there."""
        self._reply_coming = False
        if message.content and self.session is not None and self.session.conversation is not None:
            self.view.show_messages(self.session.conversation.messages[:-1])
            self._begin_reply_view()
            self.view.append_reply(message.content)
            return
        self._begin_reply_view()

    def _begin_reply_view(self) -> None:
        self._set_generating(True)
        self.show_transcript(True)
        self.view.begin_reply()

    def reply_finished(self, message: Message) -> None:
        self.hide_notice("waiting")
        self.view.end_reply()
        self.view.set_tools_state([], busy=False)
        self._set_generating(False)
        if self.session is not None and self.session.conversation is not None:
            self.view.show_messages(self.session.conversation.messages)
        self.status.show_stats(message.stats)
        self.show_context()

    # --- context ------------------------------------------------------------------------------------------------
    def show_context(self) -> None:
        """This chat's context use, in the status bar and the composer's meter: live from the engine while it
        generates, else as measured by the chat's last reply (0 for a new chat)."""
        engine = self.host.engine(self.workspace.engine)
        model = self.host.model_info(self.workspace.engine)  # on the parallel engine: its context per sequence
        total = model.n_ctx if model is not None else None
        session = self.session
        kv = engine.kv_usage() if engine is not None and session is not None and session.generating else None
        conversation = session.conversation if session else None
        used: int | None
        if kv is not None:
            used, estimated, total = kv.used_cells, False, kv.total_cells
        else:
            used, estimated = context_tokens(conversation), False
            if used is None and conversation is not None:
                used, estimated = sum(len(m.content) for m in conversation.messages) // CHARS_PER_TOKEN, True
        policy = conversation.overflow if conversation else OverflowPolicy.DROP_OLDEST
        full_note = when_full(policy) + " Change it in the chat's settings, under This chat."
        self.status.show_context(used if total is not None else None, total, estimated, full_note)
        self.composer.show_context(used, total, estimated)

    def _set_generating(self, generating: bool) -> None:
        self.composer.set_generating(generating)

    def busy(self, what: str, any_chat: bool = False) -> bool:
        """True (and says so) when this chat — or, with ``any_chat``, any chat — is generating."""
        if self.workspace.busy(any_chat):
            self.show_notice(f"A reply is being generated. Stop it (Esc) before {what}.", "warning", key="busy")
            return True
        return False

    def refresh_empty_state(self) -> None:
        """What an empty chat offers: the starter model, or the examples for it, or an invitation."""
        entry = self.models.target_entry()
        if entry is None:
            self.empty_state.show_no_model()
        else:
            self.empty_state.show_model(model_name(entry, self.workspace.model), starter_model.is_starter(entry))

    # --- models (see ChatModels) ------------------------------------------------------------------------------
    def choose_model_file(self) -> None:
        self.model_bar.choose_file()

    def load_model(self, entry: str) -> None:
        self.models.load_model(entry)

    def use_starter_model(self) -> None:
        self.models.use_starter_model()

    def apply_modelfile(self, modelfile: Modelfile, name: str = "preset") -> None:
        """Use a Modelfile as a preset: sampling, load options, system prompt and history in a new chat."""
        spawn(self.models.apply_preset(modelfile, name, from_page=True), "apply preset")

    async def refresh_ollama_models(self) -> None:
        """List Ollama's models in the model picker when Ollama runs; a stopped Ollama is not an error."""
        host = self.workstation.settings.ollama_host or None
        self._ollama_listed = (host,)
        async with self.workstation.ollama.use() as service:  # the client library loads off the Qt thread
            status = await service.status()
            models = await service.list_models() if status.running else []
        self.model_bar.set_ollama_models([m.name for m in models], status.summary())
        self.ollama_models = {m.name for m in models}

    def _engine_event(self, event: EngineEvent) -> None:
        """The engine host's news: the chat's engine state, a model gone, a vLLM server offered or withdrawn."""
        if isinstance(event, VllmEndpointChanged):
            self._offer_vllm_entries()
        elif isinstance(event, EngineStateChanged) and event.engine is self.workspace.engine:
            self._show_engine_state(event.state)
        elif isinstance(event, ModelLoaded | ModelUnloaded) and event.engine is self.workspace.engine:
            self.thinking.refresh()
            self._show_engine_state(None)
        if isinstance(event, ModelUnloaded) and event.engine is self.workspace.engine:
            self.model_bar.set_loaded(None)
            self.status.show_model(None)
            self.show_context()

    def _show_engine_state(self, state: BackendState | None) -> None:
        """The chat engine's state in the status bar; while the chats' llama.cpp model runs on the parallel engine,
        that (the single worker may be stopped meanwhile: it is not what the chats use)."""
        kind = self.workspace.engine
        loaded = self.host.loaded(kind)
        if loaded is not None and loaded.parallel > 1:
            self.status.show_parallel(str(kind), loaded.parallel)
            return
        engine = self.host.engine(kind)
        state = state or (engine.state if engine is not None else None)
        if state is not None:
            self.status.show_state(state, str(kind))

    def _offer_vllm_entries(self) -> None:
        endpoint = self.host.vllm_endpoint
        self.model_bar.set_engine_models(VLLM_PREFIX, [endpoint.served_model] if endpoint else [])
