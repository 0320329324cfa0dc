"""Renaming a chat in place, from the list's menu, a double-click or F2, over a real history: Enter saves (it
lasts: a reopened store has it), Esc cancels, an empty name is refused."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu

from app.core.chat.conversation import Conversation, Message, Role
from app.core.errors import InvalidInputError
from app.services.chat.history import ConversationStore
from app.services.paths import app_paths
from tests.support.waiting import until


def _chat(title: str, updated_at: float) -> Conversation:
    messages = [Message(Role.USER, f"about {title}"), Message(Role.ASSISTANT, f"{title} indeed")]
    return Conversation(title, messages=messages, updated_at=updated_at)


@pytest.fixture
def seeded() -> list[int]:
    """Three chats; "Code" is the newest (it opens first)."""
    with ConversationStore(app_paths().ensure().conversations_db) as store:
        return store.import_conversations([_chat("Birds", 1_000.0), _chat("Fish", 2_000.0), _chat("Code", 3_000.0)])


def _stored_title(chat_id: int) -> str:
    """The title as a freshly opened store reads it from the file."""
    with ConversationStore(app_paths().conversations_db) as store:
        info = store.summary(chat_id)
        assert info is not None
        return info.title


def _row_center(panel, chat_id: int):
    chats = panel.chats
    return chats.view.visualRect(chats.model.index(chats.model.row_of(chat_id))).center()


async def _window_with_chats(make_window):
    window = await make_window()
    panel = window.chat_panel
    await until(lambda: len(panel.chats.titles()) == 3)
    return window, panel


def _double_click(qtbot, panel, chat_id: int) -> None:
    """What a person's double-click sends: a click (press, release), then the double-click."""
    viewport, pos = panel.chats.view.viewport(), _row_center(panel, chat_id)
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=pos)
    qtbot.mouseDClick(viewport, Qt.MouseButton.LeftButton, pos=pos)


def _type_name(qtbot, editor, name: str) -> None:
    editor.selectAll()
    qtbot.keyClicks(editor, name)
    qtbot.keyClick(editor, Qt.Key.Key_Return)


def test_rename_from_the_menu_saves_on_enter_and_lasts(qtbot, qloop, make_window, seeded, monkeypatch) -> None:
    async def scenario():
        _window, panel = await _window_with_chats(make_window)
        menus: list[QMenu] = []
        monkeypatch.setattr(QMenu, "popup", lambda self, _pos, _action=None: menus.append(self))
        panel.chats.view.customContextMenuRequested.emit(_row_center(panel, seeded[2]))
        rename = next(a for a in menus[-1].actions() if a.text() == "Rename…")
        assert rename.shortcut().toString() == "F2"  # the menu shows the key
        rename.trigger()
        editor = panel.chats.title_editor()
        assert editor is not None and editor.hasFocus() and editor.selectedText() == "Code"
        row_rect = panel.chats.view.visualRect(panel.chats.model.index(panel.chats.model.row_of(seeded[2])))
        assert row_rect.contains(editor.geometry().center())  # laid over the chat's own row
        _type_name(qtbot, editor, "  Parser   notes ")
        assert panel.chats.title_editor() is None
        assert panel.chats.titles()[0] == "Parser notes"  # shown at once, spaces collapsed
        assert panel.session.conversation.id == seeded[2]
        await until(lambda: panel.session.conversation.title == "Parser notes")  # the open chat's own copy too
        assert _stored_title(seeded[2]) == "Parser notes"
        await panel.refresh_chats()
        assert panel.chats.titles() == ["Parser notes", "Fish", "Birds"]

    qloop.run_until_complete(scenario())


def test_double_click_renames_and_esc_cancels(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        _window, panel = await _window_with_chats(make_window)
        _double_click(qtbot, panel, seeded[0])
        editor = panel.chats.title_editor()
        assert editor is not None and editor.text() == "Birds"
        await until(lambda: panel.session.conversation.id == seeded[0])  # its first click opened the chat
        await panel.refresh_chats()  # the list reloads meanwhile (opening the chat reloads it too) …
        assert panel.chats.title_editor() is editor and editor.hasFocus()  # … and the edit goes on
        qtbot.keyClicks(editor, "Seabirds")
        qtbot.keyClick(editor, Qt.Key.Key_Escape)
        assert panel.chats.title_editor() is None
        assert panel.chats.titles()[2] == "Birds" and _stored_title(seeded[0]) == "Birds"
        assert panel.session.conversation.title == "Birds"

        _double_click(qtbot, panel, seeded[0])
        _type_name(qtbot, panel.chats.title_editor(), "Seabirds")
        await until(lambda: _stored_title(seeded[0]) == "Seabirds")

    qloop.run_until_complete(scenario())


def test_f2_renames_the_selected_chat_and_an_empty_name_is_refused(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        _window, panel = await _window_with_chats(make_window)
        view = panel.chats.view
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=_row_center(panel, seeded[1]))
        await until(lambda: panel.session.conversation.id == seeded[1])
        view.setFocus()
        qtbot.keyClick(view, Qt.Key.Key_F2)
        editor = panel.chats.title_editor()
        assert editor is not None and editor.text() == "Fish"
        editor.clear()
        qtbot.keyClicks(editor, "   ")
        qtbot.keyClick(editor, Qt.Key.Key_Return)
        assert panel.chats.title_editor() is editor and editor.hasFocus()  # refused: the field stays
        assert "name" in editor.placeholderText()
        _type_name(qtbot, editor, "Fish tanks")
        assert view.hasFocus()  # back on the list
        await until(lambda: _stored_title(seeded[1]) == "Fish tanks")
        assert panel.chats.titles() == ["Code", "Fish tanks", "Birds"]

    qloop.run_until_complete(scenario())


def test_the_store_refuses_an_empty_name() -> None:
    with ConversationStore(app_paths().ensure().conversations_db) as store:
        chat = store.create("Kept")
        assert chat.id is not None
        with pytest.raises(InvalidInputError):
            store.rename(chat.id, " \n\t ")
        store.rename(chat.id, "Two\nlines")
        info = store.summary(chat.id)
        assert info is not None and info.title == "Two lines"
