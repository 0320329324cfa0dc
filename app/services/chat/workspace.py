"""The chats a window shows, Qt-free: the chat on screen, chats still generating in the background, and which
model (on which engine) chats run on. The chat page is a view of it: it forwards what the user does and shows
what the workspace's sessions report.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.backends.protocol import ModelInfo
from app.core.chat.conversation import Conversation, Role
from app.core.chat.thinking import ThinkingChoice
from app.core.errors import BusyError
from app.core.modelfile.parser import Modelfile
from app.core.modelfile.presets import engine_switch_notes, to_llamacpp, to_vllm
from app.core.params import LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.engines.entries import EngineKind, engine_of
from app.services.model_settings import ModelSettings, ModelSettingsStore
from app.services.workstation import Workstation

if TYPE_CHECKING:
    from app.services.documents.service import DocumentsService

log = logging.getLogger("app.services.chat")

ObserverFactory = Callable[[ChatSession], ChatObserver]  # the observer of one session


@dataclass
class LoadOutcome:
    info: ModelInfo
    notes: list[str] = field(default_factory=list)  # what changed for the chat on screen (an engine switch)


@dataclass
class PresetOutcome:
    sampling: SamplingParams
    system: str
    messages: list[tuple[str, str]]
    model: str | None  # FROM, as the preset names it
    notes: list[str]
    reload_needed: bool
    load: LoadParams | None = None  # the load options it sets (llama.cpp)


class ChatWorkspace:
    """Owns the chat sessions of one window. ``observer_factory`` makes the observer of each new session."""

    def __init__(
        self, workstation: Workstation, sampling: Callable[[], SamplingParams], observer_factory: ObserverFactory
    ) -> None:
        self.workstation = workstation
        self.host = workstation.host
        self._sampling = sampling
        self._observer_factory = observer_factory
        self.session: ChatSession | None = None
        self.background: dict[int, ChatSession] = {}  # chats still generating while another is shown
        self.engine = EngineKind.LLAMACPP

    # --- start-up ---------------------------------------------------------------------------------------------
    async def start(self) -> list[str]:
        """Open the history and show the newest chat; returns notices for the person (e.g. replies cut off)."""
        await asyncio.get_running_loop().run_in_executor(None, self.model_settings.load)
        notices = [self.model_settings.problem] if self.model_settings.problem else []
        store = await self.workstation.open_history()
        if store is None:
            return [*notices, f"{self.workstation.store_problem} Chats in this session will not be saved."]
        recovered = await store.recover_interrupted()
        if recovered:
            notices.append(f"{recovered} reply(s) were cut off when the app last closed; they are kept and marked.")
        self.session = self.new_session()
        chats = await store.list_conversations()
        if chats:
            await self.session.open(chats[0][0])
        else:
            await self.session.new(self.workstation.settings.system_prompt)
        return notices

    @property
    def store(self) -> AsyncConversationStore | None:
        return self.workstation.store

    def new_session(self) -> ChatSession:
        assert self.store is not None
        attachments = str(self.workstation.paths.attachments_dir)
        session = ChatSession(
            self.store, self.host, self._sampling, engine=self.engine, attachments_dir=attachments,
            mcp=self.workstation.mcp, documents=self._documents(),
        )  # fmt: skip
        session.observer = self._observer_factory(session)
        session.thinking = self.thinking_choice
        session.spec_speedup = self.workstation.spec_guard.speed_up
        return session

    def _documents(self) -> Callable[[], DocumentsService] | None:
        """The Workstation's documents service, made when a chat first uses it (None: a stand-in without one)."""
        if not hasattr(type(self.workstation), "documents"):
            return None
        return lambda: self.workstation.documents

    # --- which chats are generating ---------------------------------------------------------------------------
    def sessions(self) -> list[ChatSession]:
        return ([self.session] if self.session else []) + list(self.background.values())

    def busy(self, any_chat: bool = False) -> bool:
        """Whether this chat — or, with ``any_chat``, any chat — is generating."""
        sessions = self.sessions() if any_chat else ([self.session] if self.session else [])
        return any(s.generating for s in sessions)

    def park_generating(self) -> bool:
        """Let the chat on screen keep generating in the background (engines that run several replies at once, and
        llama.cpp while the chats' model runs on its parallel engine); False when it is generating on an engine
        that cannot."""
        session = self.session
        if session is None or not session.generating:
            return True
        if not self.host.concurrent(session.engine) or session.conversation is None:
            return False
        assert session.conversation.id is not None
        self.background[session.conversation.id] = session
        self.session = self.new_session()
        return True

    def background_activity(self) -> dict[int, bool]:
        """The chats generating in the background, each with whether a tool call of it waits for the user."""
        return {chat_id: bool(session.tools.waiting) for chat_id, session in self.background.items()}

    def resume_background(self, chat_id: int) -> ChatSession | None:
        """Show a chat still generating in the background; None when it is not one."""
        session = self.background.pop(chat_id, None)
        if session is None or session.conversation is None:
            return None
        self.session = session
        return session

    def background_finished(self, session: ChatSession) -> None:
        if session.conversation is not None:
            self.background.pop(session.conversation.id or -1, None)

    # --- chats ----------------------------------------------------------------------------------------------
    async def list_chats(self) -> list[tuple[int, str, float]]:
        return await self.store.list_conversations() if self.store else []

    async def delete_chat(self, chat_id: int) -> None:
        """Mark a chat deleted (the store keeps it for an undo: ``restore`` or ``purge``); when it is the chat shown,
        show the newest other one (or a new chat)."""
        assert self.session is not None and self.store is not None
        await self.store.mark_deleted(chat_id)
        if self.session.conversation and self.session.conversation.id == chat_id:
            chats = await self.store.list_conversations()
            if chats:
                await self.session.open(chats[0][0])
            else:
                await self.session.new(self.workstation.settings.system_prompt)

    # --- the model chats run on -------------------------------------------------------------------------------
    @property
    def model_settings(self) -> ModelSettingsStore:
        return self.workstation.model_settings

    @property
    def entry(self) -> str | None:
        """The model the chats run on now (loaded on the chat's engine), as an entry."""
        loaded = self.host.loaded(self.engine)
        return loaded.entry if loaded else None

    def load_params(self, entry: str | None = None) -> LoadParams:
        """How ``entry`` (default: the model loaded now) loads: its own settings, else the defaults."""
        entry = entry or self.entry
        return self.model_settings.effective_load(entry) if entry else self.workstation.settings.load

    def thinking_choice(self) -> ThinkingChoice:
        """The thinking choice saved for the model the chats run on now (the model's default when none)."""
        entry = self.entry
        return self.model_settings.get(entry).thinking_choice if entry else ThinkingChoice()

    def settings_of(self, entry: str) -> ModelSettings:
        """The model's settings (its own, or its built-in ones: the starter model's preset)."""
        return self.model_settings.get(entry)

    async def remember(self, entry: str, **changes: Any) -> ModelSettings:
        """Save ``changes`` (ModelSettings fields) for ``entry``, off the event loop's thread."""
        update = functools.partial(self.model_settings.update, entry, **changes)
        return await asyncio.get_running_loop().run_in_executor(None, update)

    async def forget(self, entry: str) -> None:
        """Back to the defaults for ``entry``."""
        await asyncio.get_running_loop().run_in_executor(None, self.model_settings.forget, entry)

    def loaded_params(self) -> LoadParams:
        """The load options of the model the chat's engine holds now (the defaults when none)."""
        loaded = self.host.loaded(self.engine)
        return loaded.params if loaded else self.workstation.settings.load

    @property
    def model(self) -> ModelInfo | None:
        """The model the chats run on (the parallel engine's load when its setting runs them side by side)."""
        return self.host.model_info(self.engine)

    async def load(self, entry: str, params: LoadParams | None = None) -> LoadOutcome:
        """Load ``entry`` for the chats, on its engine; the previous engine's model is unloaded when the chat moves
        to another engine (what that changes for the chat on screen is in the outcome's notes)."""
        if self.busy(any_chat=True):
            raise BusyError("A reply is being generated. Stop it before loading another model.")
        params = params or self.load_params(entry)
        target = engine_of(entry)
        self.host.engine_for(entry)  # the engine must be there before the chat leaves the one it is on
        notes = await self._switch_engine(target, params) if target is not self.engine else []
        info = await self.host.load(entry, params)
        self.workstation.remember_model(entry)
        return LoadOutcome(info, notes)

    async def _switch_engine(self, target: EngineKind, params: LoadParams) -> list[str]:
        previous, self.engine = self.engine, target
        if self.session is not None:
            self.session.engine = target
        if self.host.loaded(previous) is not None:
            await self.host.unload(previous)
        conversation = self.session.conversation if self.session else None
        if conversation is None or not conversation.messages:
            return []
        return engine_switch_notes(str(previous), str(target), self._sampling(), params)

    async def unload(self) -> None:
        await self.host.unload(self.engine)

    # --- presets ----------------------------------------------------------------------------------------------
    def preset(
        self, modelfile: Modelfile, name: str, sampling: SamplingParams, entry: str | None = None
    ) -> PresetOutcome:
        """What a Modelfile sets for the chat's engine, through that engine's own mapping (vLLM has its own), over
        the settings of ``entry`` (default: the model loaded now). ``remember_preset`` keeps it for the model."""
        engine = engine_of(entry) if entry else self.engine
        if not self.host.facts(engine).loads_models:  # the server loaded the model: request fields and its flags
            vllm = to_vllm(modelfile)
            system = vllm.system if vllm.system is not None else _system_lines(vllm.messages)
            return PresetOutcome(vllm.sampling_over(sampling), system, vllm.messages, None, vllm.notes(name), False)
        preset = to_llamacpp(modelfile, self.load_params(entry), sampling)
        loaded_here = entry is None or entry == self.entry
        reload_needed = loaded_here and self.model is not None and bool(preset.load_changed(self.loaded_params()))
        system = preset.system if preset.system is not None else _system_lines(preset.messages)
        notes = preset.notes(name, reload_needed)
        return PresetOutcome(
            preset.sampling, system, preset.messages, preset.model, notes, reload_needed, preset.load
        )  # fmt: skip

    async def remember_preset(self, entry: str, preset: PresetOutcome, name: str) -> None:
        """Keep a preset's sampling and load options as the model's own settings."""
        changes: dict[str, Any] = {"sampling": preset.sampling, "preset": name}
        if preset.load is not None:
            changes["load"] = preset.load
        await self.remember(entry, **changes)

    async def start_preset_chat(self, preset: PresetOutcome, name: str) -> Conversation:
        assert self.session is not None
        return await self.session.new(preset.system, preset.messages, title=f"{name} (preset)")

    # --- shutdown ---------------------------------------------------------------------------------------------
    async def stop_all(self, timeout: float = 5.0) -> None:
        """Stop every reply in flight (each is saved as stopped) and wait for them to end."""
        generating = [s for s in self.sessions() if s.generating]
        for session in generating:
            session.stop()
        if not generating:
            return
        try:
            await asyncio.wait_for(_until_idle(generating), timeout)
        except TimeoutError:
            log.warning("a reply did not stop in time; closing the engine")


def context_tokens(conversation: Conversation | None) -> int | None:
    """Tokens this chat fills in a model's context after its last reply (prompt and reply, as measured); 0 for a
    chat without messages; None when no reply was measured yet."""
    if conversation is None or not conversation.messages:
        return 0
    for message in reversed(conversation.messages):
        if message.role is Role.ASSISTANT and message.stats is not None and message.stats.prompt_tokens:
            return message.stats.prompt_tokens + message.stats.completion_tokens
    return None


def _system_lines(messages: list[tuple[str, str]]) -> str:
    return "\n".join(text for role, text in messages if role == "system")


async def _until_idle(sessions: list[ChatSession]) -> None:
    while any(s.generating for s in sessions):
        await asyncio.sleep(0.02)
