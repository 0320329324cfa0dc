"""The chat page's conversation side: search results that open a chat at the message, forks (of a whole chat, its
last turns, or from a message) with the origin shown above the fork, rename, delete with undo, pins, folders,
export and import. A helper of ChatPanel: it answers the chat list's and the transcript's requests; files and the
store are worked off the Qt thread (``app.services.chat.exchange``).

A deleted chat leaves the list at once but the store only marks it: its notice offers Undo for ``UNDO_MS``, and
the chat is purged when the notice goes (it expired, was dismissed or pushed out) or the app quits. A chat still
marked at the next start (the app died meanwhile) is purged then, and a notice says so."""

from __future__ import annotations

import asyncio
import functools
import html
import logging
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtWidgets import QFileDialog, QInputDialog

from app.core.chat import code_highlight
from app.core.chat.conversation import Conversation
from app.core.chat.export_text import origin_line
from app.core.errors import AppError
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatSession
from app.services.chat.workspace import ChatWorkspace
from app.services.workstation import Workstation
from app.ui.pages.chat.chat_list import ChatList
from app.ui.pages.chat.transcript import ChatView
from app.ui.tasks import loop_running, spawn
from app.ui.widgets.notices import NoticeArea

if TYPE_CHECKING:
    from app.services.chat.exchange import ExportFormat


class ConversationsPage(Protocol):
    """What ChatConversations drives on the chat page (``ChatPanel`` is one)."""

    workstation: Workstation
    workspace: ChatWorkspace
    chats: ChatList
    view: ChatView
    notice: NoticeArea

    @property
    def session(self) -> ChatSession | None: ...

    def show_notice(self, text: str, level: str = "info", key: str | None = None, **options: object) -> None: ...

    def busy(self, what: str, any_chat: bool = False) -> bool: ...

    def park_generating(self) -> bool: ...

    def open_chat(self, chat_id: int) -> None: ...

    async def switch_chat(self, chat_id: int) -> None: ...

    async def refresh_chats(self) -> None: ...


log = logging.getLogger("app.ui.chat")
_UNSAFE_NAME = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')
_FILTERS = {
    "md": "Markdown (*.md)",  # keyed by ExportFormat's values (app.services.chat.exchange, imported on first use)
    "json": "JSON (*.json)",
    "html": "HTML page (*.html)",
}
UNDO_MS = 8_000  # how long a deleted chat's notice offers Undo
_DELETED = "deleted:"  # the key of a deleted chat's notice: this and the chat's id


class ChatConversations:
    def __init__(self, panel: ConversationsPage) -> None:
        self.panel = panel
        self.dialog: QFileDialog | QInputDialog | None = None  # the file or folder dialog open now
        self.importing: asyncio.Task[object] | None = None
        self._titles: dict[int, str | None] = {}  # origin chat id -> its title (None: deleted)
        self.undo_ms = UNDO_MS
        self.deleting: dict[int, bool] = {}  # chats whose delete can be undone -> whether each was the one shown
        panel.notice.gone.connect(self._notice_gone)
        chats = panel.chats
        chats.rename_requested.connect(lambda chat_id, title: self._run(self.rename(chat_id, title), "rename chat"))
        chats.search_hit_chosen.connect(self.open_at)
        chats.pin_requested.connect(lambda chat_id, pinned: self._run(self.set_pinned(chat_id, pinned), "pin chat"))
        chats.folder_requested.connect(self.choose_folder)
        chats.fork_requested.connect(
            lambda chat_id, turns: self._run(self.fork(chat_id, last_turns=turns or None), "fork chat")
        )
        chats.export_requested.connect(self.choose_export)
        chats.import_requested.connect(self.choose_import)
        panel.view.set_fork_enabled(True)
        panel.view.fork_requested.connect(self.fork_from_message)
        panel.view.note_link_activated.connect(self._note_link)

    @property
    def store(self) -> AsyncConversationStore | None:
        return self.panel.workstation.store

    def start(self) -> None:
        """Load the code highlighter's common lexers off the Qt thread (replies' code is coloured from then on);
        purge the chats whose delete was not final when the app last stopped."""
        spawn(self._prepare_highlighter(), "load the code highlighter")
        spawn(self._purge_earlier_deletes(), "finish earlier deletes")

    @staticmethod
    async def _prepare_highlighter() -> None:
        await asyncio.get_running_loop().run_in_executor(None, code_highlight.prepare)

    @staticmethod
    def _run(coroutine: Coroutine[Any, Any, object], name: str) -> None:
        if loop_running():
            spawn(coroutine, name)
        else:
            coroutine.close()

    # --- search: open a chat at a message ---------------------------------------------------------------------
    def open_at(self, chat_id: int, index: int) -> None:
        """Show chat ``chat_id`` scrolled to message ``index`` (0-based), outlined for a moment."""
        self._run(self._open_at(chat_id, index), "open search result")

    async def _open_at(self, chat_id: int, index: int) -> None:
        panel = self.panel
        session = panel.session
        if session is None:
            return
        if session.conversation is None or session.conversation.id != chat_id:
            if not panel.park_generating():
                return
            await panel.switch_chat(chat_id)
        panel.chats.select(chat_id)
        panel.view.scroll_to_message(index)

    # --- the fork's origin, above its messages ---------------------------------------------------------------
    def origin_note(self, conversation: Conversation) -> str:
        """ "Forked from <title> at message N" (the title a link to the origin) for a fork, "" otherwise; the
        origin's title is looked up once, off the Qt thread (the note follows when it is known)."""
        origin = conversation.forked_from
        if conversation.forked_at is None:
            return ""
        if origin is not None and origin not in self._titles:
            self._run(self._look_up(origin, conversation), "look up a fork's origin")
            return ""
        title = self._titles.get(origin) if origin is not None else None
        if title is None:
            return html.escape(origin_line(conversation, None))
        link = f'<a href="chat:{origin}">{html.escape(title)}</a>'
        return f"Forked from {link} at message {conversation.forked_at}"

    async def _look_up(self, origin: int, conversation: Conversation) -> None:
        if self.store is None:
            return
        info = await self.store.summary(origin)
        self._titles[origin] = info.title if info else None
        session = self.panel.session
        if session is not None and session.conversation is conversation and not self.panel.view.is_streaming:
            self.panel.view.show_messages(conversation.messages, self.origin_note(conversation))

    def _note_link(self, target: str) -> None:
        kind, _, arg = target.partition(":")
        if kind == "chat" and arg.isdigit():
            self.panel.open_chat(int(arg))

    # --- forks ------------------------------------------------------------------------------------------------
    def fork_from_message(self, index: int) -> None:
        """A message's "Start a new chat from here": that message and those before it."""
        session = self.panel.session
        conversation = session.conversation if session else None
        if conversation is None or conversation.id is None or self.panel.busy("forking"):
            return
        self._run(self.fork(conversation.id, index + 1), "fork chat")

    async def fork(self, chat_id: int, at: int | None = None, last_turns: int | None = None) -> int | None:
        """Fork ``chat_id`` at message ``at`` (1-based; default its last) and open the fork; returns its id."""
        if self.store is None:
            return None
        try:
            if at is None:
                at = await self.store.count_messages(chat_id)
            fork = await self.store.fork(chat_id, at, last_turns)
        except AppError as exc:
            self.panel.show_notice(f"Could not fork the chat: {exc}", "warning", key="chats")
            return None
        assert fork.id is not None
        self._titles.pop(chat_id, None)  # its title may have changed since
        if self.panel.park_generating():
            await self.panel.switch_chat(fork.id)
        return fork.id

    # --- rename -----------------------------------------------------------------------------------------------
    async def rename(self, chat_id: int, title: str) -> None:
        """Save a chat's new name (the list shows it already); the sessions holding the chat take it too, so the
        automatic title never replaces it."""
        if self.store is None:
            return
        try:
            await self.store.rename(chat_id, title)
        except AppError as exc:
            self.panel.show_notice(f"Could not rename the chat: {exc}", "warning", key="chats")
        else:
            for session in self.panel.workspace.sessions():
                if session.conversation is not None and session.conversation.id == chat_id:
                    session.conversation.title = " ".join(title.split())
        finally:
            self.panel.chats.title_saved(chat_id)
        await self.panel.refresh_chats()

    # --- delete with undo ---------------------------------------------------------------------------------------
    def delete(self, chat_id: int) -> None:
        """Delete a chat, with a notice offering Undo for ``undo_ms``; it leaves the list at once."""
        self.panel.chats.remove(chat_id)
        self._run(self._delete(chat_id), "delete chat")

    async def _delete(self, chat_id: int) -> None:
        info = await self.store.summary(chat_id) if self.store is not None else None
        if info is None:
            return  # deleted already
        session = self.panel.session
        self.deleting[chat_id] = (
            session is not None and session.conversation is not None and (session.conversation.id == chat_id)
        )
        await self.panel.workspace.delete_chat(chat_id)  # only marked; the chat shown moves on when it was this one
        title = info.title if len(info.title) <= 60 else info.title[:59] + "…"
        self.panel.show_notice(
            f"Deleted “{title}”.", "info", key=f"{_DELETED}{chat_id}",
            action=("Undo", functools.partial(self.undo, chat_id)), timeout_ms=self.undo_ms,
        )  # fmt: skip
        await self.panel.refresh_chats()

    def undo(self, chat_id: int) -> None:
        """The notice's Undo: the chat is back, with everything it held; shown again if it was the one shown."""
        self._run(self._undo(chat_id), "undo delete")

    async def _undo(self, chat_id: int) -> None:
        was_shown = self.deleting.pop(chat_id, None)
        if was_shown is None or self.store is None:
            return
        await self.store.restore(chat_id)
        await self.panel.refresh_chats()
        if was_shown:
            self.panel.open_chat(chat_id)

    def _notice_gone(self, key: str) -> None:
        chat_id = int(key[len(_DELETED) :]) if key.startswith(_DELETED) and key[len(_DELETED) :].isdigit() else None
        if chat_id is not None and self.deleting.pop(chat_id, None) is not None:
            self._run(self._purge(chat_id), "purge deleted chat")

    async def _purge(self, chat_id: int) -> None:
        if self.store is not None:
            await self.store.purge(chat_id)

    async def finish_deletes(self) -> None:
        """At quit: every delete that could still be undone becomes final."""
        pending, self.deleting = list(self.deleting), {}
        for chat_id in pending:
            try:
                await self._purge(chat_id)
            except AppError as exc:  # it stays marked: the next start purges it
                log.warning("Could not finish deleting chat %s: %s", chat_id, exc)

    async def _purge_earlier_deletes(self) -> None:
        """Chats still marked deleted (the app stopped during their undo time) are deleted for good, and said so."""
        titles = await self.store.purge_deleted() if self.store is not None else []
        if titles:
            names = ", ".join(f"“{t}”" for t in titles[:3]) + (
                f" and {len(titles) - 3} more" if len(titles) > 3 else ""
            )
            self.panel.show_notice(
                f"Finished deleting {names}: the app stopped before the time to undo was over.",
                key="deleted:earlier", timeout_ms=0,  # stays until read: it happened while nobody watched
            )  # fmt: skip

    # --- pins and folders -------------------------------------------------------------------------------------
    async def set_pinned(self, chat_id: int, pinned: bool) -> None:
        if self.store is not None:
            await self.store.set_pinned(chat_id, pinned)
            await self.panel.refresh_chats()

    def choose_folder(self, chat_id: int) -> None:
        self._run(self._choose_folder(chat_id), "choose a folder")

    async def _choose_folder(self, chat_id: int) -> None:
        if self.store is None:
            return
        folders, info = await self.store.folders(), await self.store.summary(chat_id)
        dialog = QInputDialog(self.panel.chats.window())
        dialog.setWindowTitle("Move to folder")
        dialog.setLabelText("Folder (leave empty to take the chat out of its folder):")
        dialog.setComboBoxEditable(True)
        dialog.setComboBoxItems(["", *folders])
        dialog.setTextValue(info.folder if info else "")
        dialog.textValueSelected.connect(lambda name: self._run(self.move_to_folder(chat_id, name), "move chat"))
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()

    async def move_to_folder(self, chat_id: int, folder: str) -> None:
        if self.store is not None:
            await self.store.set_folder(chat_id, folder)
            await self.panel.refresh_chats()

    # --- export -----------------------------------------------------------------------------------------------
    def choose_export(self, chat_id: int, fmt: str) -> None:
        from app.services.chat.exchange import ExportFormat

        self._run(self._choose_export(chat_id, ExportFormat(fmt)), "choose where to export")

    async def _choose_export(self, chat_id: int, fmt: ExportFormat) -> None:
        info = await self.store.summary(chat_id) if self.store is not None else None
        if info is None:
            return
        name = (_UNSAFE_NAME.sub(" ", info.title).strip() or "chat")[:80] + fmt.suffix
        dialog = QFileDialog(self.panel.chats.window(), "Export the chat", str(Path.home() / name), _FILTERS[fmt])
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setDefaultSuffix(fmt.value)
        dialog.fileSelected.connect(lambda path: self._run(self.export(chat_id, fmt, Path(path)), "export chat"))
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()

    async def export(self, chat_id: int, fmt: ExportFormat, target: Path) -> Path | None:
        if self.store is None:
            return None
        from app.services.chat.exchange import write_export_async

        attachments = self.panel.workstation.paths.attachments_dir
        try:
            written = await write_export_async(self.store, chat_id, fmt, target, attachments)
        except (AppError, OSError) as exc:
            text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.panel.show_notice(f"Could not export the chat to {target}: {text}", "error", key="chats")
            return None
        self.panel.show_notice(f"Exported the chat to {written}.", "success", key="chats")
        return written

    # --- import -----------------------------------------------------------------------------------------------
    def choose_import(self) -> None:
        dialog = QFileDialog(
            self.panel.chats.window(), "Import chats", str(Path.home()), "Chat exports (*.json);;All files (*)"
        )  # fmt: skip
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(self._import_chosen)
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()

    def _import_chosen(self, path: str) -> None:
        if path and loop_running():
            self.importing = spawn(self.import_chats(Path(path)), "import chats")

    async def import_chats(self, source: Path) -> None:
        """Import our JSON or a ChatGPT export off the Qt thread, with its progress and then a summary shown."""
        if self.store is None:
            return
        panel = self.panel
        panel.show_notice(f"Importing chats from {source.name}…", key="import", timeout_ms=0)  # until it ends

        def progress(done: int, total: int) -> None:
            panel.show_notice(f"Importing chats from {source.name}: {done:,} of {total:,}…", key="import", timeout_ms=0)

        from app.services.chat.exchange import import_file_async

        try:
            summary = await import_file_async(self.store, source, progress=progress)
        except (AppError, OSError) as exc:
            panel.show_notice(f"Nothing was imported. {exc}", "error", key="import")
            return
        panel.show_notice(summary.text(), "success", key="import")
        await panel.refresh_chats()
