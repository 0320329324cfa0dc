"""The chat page's model side: loading and unloading, the starter model, restoring the last model at start-up,
the library's GGUFs in the picker (following ``LibraryChanged``), each model's own settings in the drawer, and
presets. A helper of ChatPanel (it drives the panel's widgets)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QTimer

from app.backends.protocol import ModelInfo
from app.core.chat.formats import TEXT_CONTINUATION_FORMAT
from app.core.errors import AppError
from app.core.modelfile.parser import Modelfile, ModelfileError, parse_modelfile
from app.core.params import SamplingParams
from app.core.user_files import read_user_text
from app.services import starter_model
from app.services.chat.session import ChatSession
from app.services.chat.workspace import ChatWorkspace, PresetOutcome
from app.services.engines.entries import OLLAMA_PREFIX, display_name, engine_prefix
from app.services.engines.host import EngineHost
from app.services.library.events import LibraryChanged, LibraryEvent
from app.services.library.index import KIND_GGUF, SOURCE_OLLAMA, LibraryEntry, LibraryScan
from app.services.library.names import model_display_name
from app.services.presets import shipped_presets_dir
from app.services.workstation import Workstation
from app.ui.pages.chat.drawer import SettingsDrawer
from app.ui.pages.chat.empty_state import EmptyState
from app.ui.pages.chat.model_bar import ModelBar
from app.ui.pages.chat.system_prompt import SystemPromptBox
from app.ui.status_bar import AppStatusBar
from app.ui.tasks import loop_running, spawn


class ChatPage(Protocol):
    """What ChatModels drives on the chat page (``ChatPanel`` is one)."""

    workstation: Workstation
    host: EngineHost
    workspace: ChatWorkspace
    status: AppStatusBar
    drawer: SettingsDrawer
    model_bar: ModelBar
    empty_state: EmptyState
    ollama_models: set[str]

    def show_notice(self, text: str, level: str = "info", key: str | None = None, **options: object) -> None: ...

    def hide_notice(self, key: str | None = None) -> None: ...

    @property
    def session(self) -> ChatSession | None: ...

    @property
    def system_prompt(self) -> SystemPromptBox: ...

    def show_context(self) -> None: ...

    def refresh_empty_state(self) -> None: ...

    def busy(self, what: str, any_chat: bool = False) -> bool: ...

    async def save_system_prompt(self) -> None: ...

    def follow(self, unsubscribe: Callable[[], None]) -> None: ...


SAVE_DELAY_MS = 400  # drawer edits are saved for the model this long after the last change
MAX_MODELFILE_BYTES = 1024 * 1024
MODELFILE_SUFFIX = ".modelfile"  # compared lower-case


class ChatModels:
    def __init__(self, panel: ChatPage) -> None:
        self.panel = panel
        self.workspace = panel.workspace
        self.loading: asyncio.Task[bool] | None = None
        self.restoring: asyncio.Task[None] | None = None  # the last model being loaded at start-up
        self._save_timer = QTimer()  # held here; stopped with the page
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(SAVE_DELAY_MS)
        self._save_timer.timeout.connect(self._save_drawer)
        self._pending_entry: str | None = None
        self._saving: asyncio.Task[Any] | None = None  # the drawer's last save, which a load waits for
        self.chat_ggufs: list[str] = []  # the library's GGUFs: the models offered, and the drafts checked
        self._follow_the_library()

    # --- which model ------------------------------------------------------------------------------------------
    def target_entry(self) -> str | None:
        """The model the drawer's settings belong to: the one loaded, else the one chosen in the bar."""
        return self.workspace.entry or self.panel.model_bar.current_path()

    def is_starter(self) -> bool:
        return starter_model.is_starter(self.target_entry())

    # --- the library's models in the picker ---------------------------------------------------------------------
    def _follow_the_library(self) -> None:
        library = self.panel.workstation.library
        self.panel.follow(library.subscribe(self._library_event))
        self.panel.model_bar.shown.connect(self._picker_shown)
        if (scan := library.snapshot()) is not None:
            self._offer_library(scan)

    def _picker_shown(self) -> None:
        """The picker is on screen: list the library once, if nobody has yet (later scans come as events)."""
        library = self.panel.workstation.library
        if library.snapshot() is None and not library.scanning and loop_running():
            spawn(library.scan(), "chat: list the library")

    def _library_event(self, event: LibraryEvent) -> None:
        if isinstance(event, LibraryChanged):
            self._offer_library(event.scan)

    def _offer_library(self, scan: LibraryScan) -> None:
        self.chat_ggufs = [entry.path for entry in scan.entries if _chat_can_load(entry)]
        self.panel.model_bar.set_library(self.chat_ggufs)
        target = self.target_entry()
        self.panel.drawer.load.speculation.set_model(target if _is_gguf(target) else None, self.chat_ggufs)

    # --- load / unload ------------------------------------------------------------------------------------------
    def load_model(self, entry: str) -> None:
        spawn(self.load(entry), "load model")

    async def load(self, entry: str) -> bool:
        """Load ``entry`` (with its own settings) as the Load button does; True when it is loaded."""
        if self.loading is not None and not self.loading.done():
            await asyncio.wait([self.loading])
        self.loading = asyncio.ensure_future(self._load(entry))
        return await self.loading

    async def _load(self, entry: str) -> bool:
        panel = self.panel
        if panel.busy("loading another model", any_chat=True):
            return False
        self.flush_settings()
        if self._saving is not None and not self._saving.done():
            await asyncio.wait([self._saving])  # a load reads the settings just saved (Reload after an edit)
        for key in ("model", "format", "switch"):
            panel.hide_notice(key)
        panel.model_bar.select(entry)
        panel.model_bar.set_loading(display_name(entry))
        try:
            outcome = await self.workspace.load(entry)
        except AppError as exc:
            self.show_loaded()  # a refused load keeps the model loaded before
            panel.show_notice(str(exc), "error", key="model")
            return False
        info = outcome.info
        panel.model_bar.set_loaded(entry, f"Loaded in {info.load_seconds:.1f} s · context {info.n_ctx:,}")
        panel.status.show_model(info)
        self.show_settings(entry)
        panel.show_context()
        self._format_note(info.chat_format, info.chat_format_reason)
        if outcome.notes:
            panel.show_notice(" ".join(outcome.notes), key="switch")
        panel.model_bar.set_recent(panel.workstation.settings.recent_models)
        panel.refresh_empty_state()
        return True

    def show_loaded(self) -> None:
        loaded = self.panel.host.loaded(self.workspace.engine)
        self.panel.model_bar.set_loaded(loaded.entry if loaded else None)
        self.panel.status.show_model(loaded.info if loaded else None)

    def unload(self) -> None:
        spawn(self._unload(), "unload model")

    async def _unload(self) -> None:
        try:
            await self.workspace.unload()
        except AppError as exc:
            self.panel.show_notice(str(exc), "error", key="model")
            return
        self.panel.model_bar.set_loaded(None)
        self.panel.status.show_model(None)
        self.panel.hide_notice("format")
        self.panel.show_context()
        self.panel.refresh_empty_state()

    def _format_note(self, chat_format: str | None, reason: str) -> None:
        """Say which chat format a model without a template runs with (not for text continuation: the empty
        state says what that is)."""
        if chat_format is not None and chat_format != TEXT_CONTINUATION_FORMAT:
            self.panel.show_notice(reason, key="format")

    async def ensure_model(self) -> bool:
        """A model to send to: the one loading, else the one chosen, else (on a fresh install) the starter model.
        False, with a notice saying what to do, when there is none."""
        if self.loading is not None and not self.loading.done():
            await asyncio.wait([self.loading])
        if self.workspace.model is not None:
            return True
        entry = self.panel.model_bar.current_path()
        if entry:
            return await self.load(entry)
        if starter_model.package_installed() and not self.panel.workstation.settings.recent_models:
            return await self.use_starter()
        self.panel.show_notice(
            "No model yet: open a .gguf file to chat.", "warning", key="model",
            action=("Open…", self.panel.model_bar.choose_file),
        )  # fmt: skip
        return False

    # --- the starter model ------------------------------------------------------------------------------------
    def use_starter_model(self) -> None:
        spawn(self.use_starter(), "starter model")

    async def use_starter(self) -> bool:
        """Write the starter model into the models folder (first time only) and load it, with its preset."""
        loop = asyncio.get_running_loop()
        empty_state = self.panel.empty_state

        def progress(done: int, total: int) -> None:
            loop.call_soon_threadsafe(empty_state.show_progress, done, total)

        models_dir = self.panel.workstation.paths.models_dir
        try:
            path = await loop.run_in_executor(None, starter_model.ensure_starter_model, models_dir, progress)
        except starter_model.StarterModelError as exc:
            empty_state.show_error(str(exc))
            self.panel.show_notice("The starter model could not be set up.", "error", key="model")
            return False
        return await self.load(str(path))

    # --- restoring the last model ---------------------------------------------------------------------------------
    async def restore_last(self) -> None:
        """At start-up: load the model used last (a local file that is still there), unless turned off."""
        settings = self.panel.workstation.settings
        if not settings.restore_last_model or not settings.recent_models:
            return
        entry = settings.recent_models[0]
        if engine_prefix(entry):
            return  # another engine's model: its server may not run yet
        if not await asyncio.get_running_loop().run_in_executor(None, os.path.isfile, entry):
            return
        if self.workspace.model is None and self.loading is None:
            await self.load(entry)

    # --- the drawer: each model's own settings -----------------------------------------------------------------
    def show_settings(self, entry: str | None = None) -> None:
        """Show the settings of ``entry`` (default: the target model) in the drawer."""
        panel = self.panel
        entry = entry or self.target_entry()
        panel.drawer.show_model(model_name(entry, self.workspace.model) if entry else None)
        if entry is None:
            defaults = panel.workstation.settings
            panel.drawer.show_settings(defaults.sampling, defaults.load, None)
        else:
            own = self.workspace.settings_of(entry)
            store = self.workspace.model_settings
            panel.drawer.show_settings(store.effective_sampling(entry), store.effective_load(entry), own.preset)
        panel.drawer.show_reload_needed(False)
        panel.drawer.load.speculation.set_model(entry if _is_gguf(entry) else None, self.chat_ggufs)

    def model_chosen(self, entry: str) -> None:
        """Another model picked in the bar: with none loaded, the drawer and the empty state follow it."""
        if self.workspace.model is None:
            self.flush_settings()
            self.show_settings(entry or None)
        self.panel.refresh_empty_state()

    def drawer_changed(self) -> None:
        """A sampling or load option changed in the drawer: saved for the model shortly."""
        self._pending_entry = self.target_entry()
        self._save_timer.start()
        loaded = self.workspace.entry
        if loaded is not None and self._pending_entry == loaded:
            changed = self.panel.drawer.load.params() != self.workspace.loaded_params()
            self.panel.drawer.show_reload_needed(changed)

    def flush_settings(self) -> None:
        """Save drawer changes still waiting for their timer, now."""
        if self._save_timer.isActive():
            self._save_timer.stop()
            self._save_drawer()

    def _save_drawer(self) -> None:
        entry, self._pending_entry = self._pending_entry, None
        if entry is None:
            return
        changes = {"sampling": self.panel.drawer.sampling.params(), "load": self.panel.drawer.load.params()}
        if loop_running():
            self._saving = spawn(self.workspace.remember(entry, **changes), "save model settings")
        else:  # the loop has stopped (the app is closing): a small file, written now
            self.workspace.model_settings.update(entry, **changes)

    def reload(self) -> None:
        entry = self.workspace.entry
        if entry is not None:
            self.flush_settings()
            self.load_model(entry)

    def save_defaults(self) -> None:
        drawer = self.panel.drawer
        self.panel.workstation.update_settings(sampling=drawer.sampling.params(), load=drawer.load.params())
        self.panel.show_notice(
            "Saved as the defaults for models without their own settings.", "success", key="defaults"
        )

    def reset(self) -> None:
        entry = self.target_entry()
        if entry is not None:
            self._save_timer.stop()
            spawn(self._reset(entry), "reset model settings")

    async def _reset(self, entry: str) -> None:
        await self.workspace.forget(entry)
        self.show_settings(entry)
        self.drawer_changed_reload_check()

    def drawer_changed_reload_check(self) -> None:
        loaded = self.workspace.entry
        if loaded is not None:
            self.panel.drawer.show_reload_needed(self.panel.drawer.load.params() != self.workspace.loaded_params())

    def set_restore_last(self, checked: bool) -> None:
        self.panel.workstation.update_settings(restore_last_model=checked)

    # --- presets -------------------------------------------------------------------------------------------------
    async def list_presets(self) -> list[tuple[str, str]]:
        """(name, path) of the person's Modelfiles, then the shipped ones (listed off the Qt thread)."""
        user_dir = self.panel.workstation.paths.modelfiles_dir
        return await asyncio.get_running_loop().run_in_executor(None, _preset_files, user_dir, shipped_presets_dir())

    def preset_chosen(self, path: str, name: str) -> None:
        spawn(self._preset_file(path, name), "apply preset")

    async def _preset_file(self, path: str, name: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            text = await loop.run_in_executor(None, lambda: read_user_text(path, max_bytes=MAX_MODELFILE_BYTES))
            modelfile = parse_modelfile(text)
        except (OSError, ValueError, ModelfileError) as exc:
            self.panel.show_notice(f"The preset {name} cannot be used: {exc}", "error", key="preset")
            self.show_settings()
            return
        await self.apply_preset(modelfile, name, from_page=False)

    async def apply_preset(self, modelfile: Modelfile, name: str, from_page: bool) -> None:
        """Apply a Modelfile: its sampling and load options become the model's own settings. From the Modelfile
        page ("Use in chat") it starts a new chat with its system prompt and messages and loads its FROM model;
        from the drawer it sets the system prompt of this chat (its messages seed it only while it is empty)."""
        panel = self.panel
        if panel.session is None or panel.busy("applying a preset", any_chat=True):
            return
        from_entry = await self._preset_model_entry(modelfile.froms()[0] if modelfile.froms() else None)
        entry = (from_entry if from_page else None) or self.target_entry()
        base = self._sampling_for(entry)
        preset = self.workspace.preset(modelfile, name, base, entry)
        if entry is not None:
            await self.workspace.remember_preset(entry, preset, name)
        if entry is None or entry == self.target_entry():
            panel.drawer.show_settings(preset.sampling, preset.load or panel.drawer.load.params(), name)
        await panel.save_system_prompt()
        if from_page:
            await self.workspace.start_preset_chat(preset, name)
            panel.show_notice(" ".join(preset.notes), key="preset")
            if from_entry is not None:
                await self.load(from_entry)
            return
        await self._apply_to_this_chat(preset, name)

    async def _apply_to_this_chat(self, preset: PresetOutcome, name: str) -> None:
        panel = self.panel
        session = panel.session
        assert session is not None
        empty = session.conversation is None or not session.conversation.messages
        if preset.messages and empty:
            await self.workspace.start_preset_chat(preset, name)
        elif preset.system:
            panel.system_prompt.setPlainText(preset.system)
            await session.set_system_prompt(preset.system)
        notes = [f"Preset {name} applied.", *preset.notes[1:]]
        action = ("Reload", self.reload) if preset.reload_needed else None
        panel.show_notice(" ".join(notes), key="preset", action=action)

    def _sampling_for(self, entry: str | None) -> SamplingParams:
        if entry is None or entry == self.target_entry():
            return self.panel.drawer.sampling.params()
        return self.workspace.model_settings.effective_sampling(entry)

    async def _preset_model_entry(self, model: str | None) -> str | None:
        """FROM as a model entry: a local GGUF, or an Ollama model that Ollama has."""
        if not model:
            return None
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(None, os.path.isfile, os.path.expanduser(model)):
            return model
        name = model if ":" in model else f"{model}:latest"
        return OLLAMA_PREFIX + name if name in self.panel.ollama_models else None


def _is_gguf(entry: str | None) -> bool:
    """A llama.cpp model file (speculative decoding and its drafts are llama.cpp's)."""
    return bool(entry) and engine_prefix(entry or "") is None and (entry or "").lower().endswith(".gguf")


def _chat_can_load(entry: LibraryEntry) -> bool:
    """A usable GGUF of the library's own (Ollama's store is offered as Ollama's models)."""
    return bool(entry.kind == KIND_GGUF and not entry.error and entry.source != SOURCE_OLLAMA)


def model_name(entry: str, model: ModelInfo | None) -> str:
    """The name a model shows under: its own (``general.name``) once loaded, else its file's."""
    if model is not None and model.path == entry:
        return model_display_name(model.name, model.path)
    return starter_model.DISPLAY_NAME.split(" (")[0] if starter_model.is_starter(entry) else display_name(entry)


def _preset_files(user_dir: Path, shipped_dir: Path) -> list[tuple[str, str]]:
    """The person's Modelfiles first; a shipped one with the same name is left out (theirs wins)."""
    found: dict[str, str] = {}
    for folder in (user_dir, shipped_dir):
        try:
            files = sorted(p for p in folder.iterdir() if p.name.lower().endswith(MODELFILE_SUFFIX) and p.is_file())
        except OSError:
            continue
        for path in files:
            found.setdefault(path.name[: -len(MODELFILE_SUFFIX)], str(path))
    return list(found.items())
