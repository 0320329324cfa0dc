"""Delete with undo over a real history: a deleted chat leaves the list at once, its notice offers Undo (the chat
comes back with its messages, pin and folder), and only when the notice goes, or the app quits, is it deleted for
good. A chat still marked when the app stopped without quitting is purged at the next start, with a notice."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu, QPushButton

from app.core.chat.conversation import Conversation, Message, Role
from app.services.chat.history import ConversationStore, NotFoundError
from app.services.paths import app_paths
from app.ui.pages.chat.chat_list import trash_rect
from tests.support.waiting import until


def _chat(title: str, updated_at: float, **extra) -> Conversation:
    messages = [Message(Role.USER if i % 2 == 0 else Role.ASSISTANT, f"{title} message {i + 1}") for i in range(6)]
    return Conversation(title, messages=messages, updated_at=updated_at, **extra)


@pytest.fixture
def seeded() -> list[int]:
    """Three chats: "Birds" pinned and in the folder "Zoo", "Fish", and "Code" (the newest, shown first)."""
    with ConversationStore(app_paths().ensure().conversations_db) as store:
        return store.import_conversations(
            [
                _chat("Birds", 1_000.0, pinned=True, folder="Zoo"),
                _chat("Fish", 2_000.0),
                _chat("Code", 3_000.0),
            ]
        )


def _on_disk(chat_id: int) -> Conversation | None:
    """The chat as a freshly opened store holds it, marked deleted or not (None: purged)."""
    with ConversationStore(app_paths().conversations_db) as store:
        try:
            return store.load(chat_id)
        except NotFoundError:
            return None


def _listed(chat_id: int) -> bool:
    with ConversationStore(app_paths().conversations_db) as store:
        return store.summary(chat_id) is not None


def _undo_button(panel) -> QPushButton | None:
    buttons = [b for b in panel.notice.findChildren(QPushButton) if b.text() == "Undo" and b.isVisibleTo(panel)]
    return buttons[0] if buttons else None


def _click_trash(qtbot, panel, chat_id: int) -> None:
    chats = panel.chats
    target = trash_rect(chats.view.visualRect(chats.model.index(chats.model.row_of(chat_id)))).center()
    qtbot.mouseMove(chats.view.viewport(), target)
    qtbot.mouseClick(chats.view.viewport(), Qt.MouseButton.LeftButton, pos=target)


async def _window_with_chats(make_window):
    window = await make_window()
    panel = window.chat_panel
    await until(lambda: len(panel.chats.titles()) == 3)
    return window, panel


def test_delete_then_undo_brings_the_chat_back_whole(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        _window, panel = await _window_with_chats(make_window)
        _click_trash(qtbot, panel, seeded[0])
        assert "Birds" not in panel.chats.titles()  # gone from the list at once
        await until(lambda: _undo_button(panel) is not None)
        assert "Deleted “Birds”." in panel.notice_text()
        assert not _listed(seeded[0]) and _on_disk(seeded[0]) is not None  # hidden, not purged
        await panel.refresh_chats()
        assert panel.chats.titles() == ["Code", "Fish"]  # a reload does not bring it back
        qtbot.mouseClick(_undo_button(panel), Qt.MouseButton.LeftButton)
        await until(lambda: "Birds" in panel.chats.titles())
        assert panel.chats.titles() == ["Birds", "Code", "Fish"] and panel.chats.model.is_pinned(seeded[0])
        back = _on_disk(seeded[0])
        assert back is not None and back.pinned and back.folder == "Zoo"
        assert [m.content for m in back.messages] == [f"Birds message {i + 1}" for i in range(6)]
        assert _listed(seeded[0]) and "Deleted" not in panel.notice_text()

    qloop.run_until_complete(scenario())


def test_undo_shows_the_deleted_chat_again_when_it_was_the_one_shown(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        _window, panel = await _window_with_chats(make_window)
        assert panel.session.conversation.id == seeded[2]
        panel.chats.view.setFocus()
        qtbot.keyClick(panel.chats.view, Qt.Key.Key_Delete)  # Del deletes the selected chat
        await until(lambda: panel.session.conversation.id == seeded[1])  # the next chat is shown meanwhile
        await until(lambda: _undo_button(panel) is not None)
        qtbot.mouseClick(_undo_button(panel), Qt.MouseButton.LeftButton)
        await until(lambda: panel.session.conversation.id == seeded[2])
        assert len(panel.session.conversation.messages) == 6

    qloop.run_until_complete(scenario())


def test_when_the_notice_expires_the_chat_is_purged(qtbot, qloop, make_window, seeded, monkeypatch) -> None:
    async def scenario():
        _window, panel = await _window_with_chats(make_window)
        panel.conversations.undo_ms = 300  # the notice's time, short for the test
        menus: list[QMenu] = []
        monkeypatch.setattr(QMenu, "popup", lambda self, _pos, _action=None: menus.append(self))
        chats = panel.chats
        chats.view.customContextMenuRequested.emit(
            chats.view.visualRect(chats.model.index(chats.model.row_of(seeded[1]))).center()
        )
        delete = next(a for a in menus[-1].actions() if a.text() == "Delete chat")
        assert delete.shortcut().toString() == "Del"
        expired: list[str] = []
        panel.notice.expired.connect(expired.append)
        delete.trigger()
        await until(lambda: expired)  # the notice's own timer fired (a signal, not a sleep)
        assert expired == [f"deleted:{seeded[1]}"] and _undo_button(panel) is None
        await until(lambda: _on_disk(seeded[1]) is None)
        assert panel.chats.titles() == ["Birds", "Code"] and _on_disk(seeded[0]) is not None

    qloop.run_until_complete(scenario())


def test_quitting_during_the_undo_time_makes_the_delete_final(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        window, panel = await _window_with_chats(make_window)
        panel.delete_chat(seeded[1])
        await until(lambda: _undo_button(panel) is not None)
        assert _on_disk(seeded[1]) is not None
        await window.shutdown_panels()
        assert _on_disk(seeded[1]) is None and _on_disk(seeded[0]) is not None

    qloop.run_until_complete(scenario())


def test_a_chat_marked_when_the_app_stopped_is_purged_at_the_next_start(qtbot, qloop, make_window, seeded) -> None:
    """The app dies during the undo time (the store holds the mark, nothing else ran): the next start finishes the
    delete, says so, and the chat never shows again; the other chats are untouched."""

    async def scenario():
        _first, panel = await _window_with_chats(make_window)
        panel.delete_chat(seeded[1])
        await until(lambda: _undo_button(panel) is not None)
        assert not _listed(seeded[1]) and _on_disk(seeded[1]) is not None  # what a crash now leaves on disk
        second = await make_window()  # the next start, on the same history
        again = second.chat_panel
        await until(lambda: "Finished deleting “Fish”" in again.notice_text())
        assert again.notice.time_left_ms("deleted:earlier") is None  # it stays until read
        assert _on_disk(seeded[1]) is None
        await until(lambda: len(again.chats.titles()) == 2)
        assert again.chats.titles() == ["Birds", "Code"]  # Birds is pinned
        assert len(_on_disk(seeded[0]).messages) == 6 and len(_on_disk(seeded[2]).messages) == 6

    qloop.run_until_complete(scenario())
