"""Search, forks, pins, folders, export and import on the chat page, with real widgets over a real history."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMenu

from app.core.chat.conversation import Conversation, Message, Role
from app.services.chat.history import ConversationStore
from app.services.paths import app_paths
from app.ui.pages.chat.chat_list import HEADER_ROLE, ID_ROLE
from tests.support.chatgpt_export import export
from tests.support.waiting import until


def _chat(title: str, count: int, word: str = "", at: int = -1, updated_at: float = 0.0) -> Conversation:
    roles = (Role.USER, Role.ASSISTANT)
    messages = [
        Message(roles[i % 2], f"{title} message {i + 1}" + (f" {word}" if i == at else "")) for i in range(count)
    ]
    return Conversation(title, messages=messages, updated_at=updated_at)


@pytest.fixture
def seeded() -> list[int]:
    """A history of three chats: the oldest holds "pelican" in its message 30 (of 40)."""
    with ConversationStore(app_paths().ensure().conversations_db) as store:
        return store.import_conversations(
            [
                _chat("Birds", 40, "pelican", at=29, updated_at=1_000.0),
                _chat("Fish", 4, updated_at=2_000.0),
                _chat("Code", 6, updated_at=3_000.0),
            ]
        )


def _menu_action(menus: list[QMenu], *path: str):
    menu = menus[-1]
    for name in path[:-1]:
        menu = next(a.menu() for a in menu.actions() if a.text() == name)
    return next(a for a in menu.actions() if a.text() == path[-1])


def _context_menu(panel, monkeypatch, chat_id: int) -> list[QMenu]:
    menus: list[QMenu] = []
    monkeypatch.setattr(QMenu, "popup", lambda self, _pos, _action=None: menus.append(self))
    view = panel.chats.view
    index = panel.chats.model.index(panel.chats.model.row_of(chat_id))
    view.customContextMenuRequested.emit(view.visualRect(index).center())
    return menus


def _rows(panel) -> list[tuple[bool, str]]:
    model = panel.chats.model
    return [(bool(model.index(r).data(HEADER_ROLE)), model.index(r).data()) for r in range(model.rowCount())]


def test_a_search_shows_snippets_and_opens_the_chat_at_the_message(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await until(lambda: panel.session is not None and panel.session.conversation is not None)
        assert panel.session.conversation.id == seeded[2]  # the newest chat opens first
        qtbot.keyClicks(panel.chats.search_box, "pelican")
        await until(lambda: panel.chats.results.isVisible() and panel.chats.results.hits())
        assert not panel.chats.view.isVisible()
        [hit] = panel.chats.results.hits()
        assert (hit.conversation_id, hit.message_index, hit.title) == (seeded[0], 29, "Birds")
        assert hit.marked("[", "]").endswith("[pelican]")
        results = panel.chats.results
        rect = results.visualRect(results.model().index(0, 0))
        qtbot.mouseClick(results.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        await until(lambda: panel.session.conversation.id == seeded[0] and panel.view.message_widget(29) is not None)
        widget = panel.view.message_widget(29)
        assert widget.y() < panel.view.viewport().height() // 2  # brought to the top
        assert "pelican" in panel.view.message_text(29)
        qtbot.keyClicks(panel.chats.search_box, " zzz")  # nothing matches both words
        await until(lambda: not panel.chats.results.hits() and panel.chats.empty.isVisible())
        assert panel.chats.empty.text() == "No chat holds these words."
        panel.chats.search_box.clear()
        assert panel.chats.view.isVisible() and not panel.chats.results.isVisible()

    qloop.run_until_complete(scenario())


def test_export_from_the_context_menu_writes_the_file(qtbot, qloop, make_window, seeded, monkeypatch, tmp_path) -> None:
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await until(lambda: panel.chats.model.row_of(seeded[1]) is not None)
        menus = _context_menu(panel, monkeypatch, seeded[1])
        _menu_action(menus, "Export", "HTML page (.html)…").trigger()
        await until(lambda: isinstance(panel.conversations.dialog, QFileDialog))
        dialog = panel.conversations.dialog
        assert dialog.selectedFiles()[0].endswith("Fish.html")
        target = tmp_path / "fish export.html"
        dialog.fileSelected.emit(str(target))
        dialog.reject()
        await until(lambda: target.exists() and "Exported the chat" in panel.notice_text())
        page = target.read_text("utf-8")
        assert "<title>Fish</title>" in page and "Fish message 4" in page

    qloop.run_until_complete(scenario())


def test_fork_from_the_menu_and_from_a_message_opens_the_fork_with_its_origin(
    qtbot, qloop, make_window, seeded, monkeypatch
) -> None:
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await until(lambda: panel.chats.model.row_of(seeded[2]) is not None)
        menus = _context_menu(panel, monkeypatch, seeded[2])
        _menu_action(menus, "Fork into a new chat", "Last turn only").trigger()
        await until(lambda: panel.session.conversation.id not in (None, *seeded))
        fork = panel.session.conversation
        assert [m.content for m in fork.messages] == ["Code message 5", "Code message 6"]
        assert (fork.forked_from, fork.forked_at, fork.title) == (seeded[2], 6, "Code (fork)")
        await until(lambda: "Forked from" in panel.view.toPlainText())
        assert 'href="chat:' in panel.view._note.text() and "at message 6" in panel.view._note.text()
        await until(lambda: panel.chats.model.row_of(fork.id) is not None)  # listed

        with qtbot.waitSignal(panel.view.note_link_activated):  # the origin link opens the origin
            panel.view._note.linkActivated.emit(f"chat:{seeded[2]}")
        await until(lambda: panel.session.conversation.id == seeded[2])

        panel.view.action("fork", 1)  # "Start a new chat from here" on message 2
        await until(lambda: panel.session.conversation.id not in (seeded[2], fork.id))
        second = panel.session.conversation
        assert [m.content for m in second.messages] == ["Code message 1", "Code message 2"]
        assert (second.forked_from, second.forked_at) == (seeded[2], 2)

    qloop.run_until_complete(scenario())


def test_pins_come_first_and_folders_filter_the_list(qtbot, qloop, make_window, seeded, monkeypatch) -> None:
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        chats = panel.chats
        await until(lambda: chats.model.row_of(seeded[0]) is not None)
        _menu_action(_context_menu(panel, monkeypatch, seeded[0]), "Pin to the top").trigger()
        await until(lambda: _rows(panel)[:2] == [(True, "Pinned"), (False, "Birds")])
        assert _menu_action(_context_menu(panel, monkeypatch, seeded[0]), "Unpin")  # the menu knows
        assert not chats.folder_filter.isVisible()

        _menu_action(_context_menu(panel, monkeypatch, seeded[1]), "Move to folder…").trigger()
        await until(lambda: isinstance(panel.conversations.dialog, QInputDialog))
        dialog = panel.conversations.dialog
        dialog.setTextValue("Sea life")
        dialog.accept()
        await until(lambda: chats.folder_filter.isVisible())
        assert [chats.folder_filter.itemText(i) for i in range(chats.folder_filter.count())] == [
            "All chats",
            "Sea life",
        ]
        chats.folder_filter.setCurrentIndex(1)
        await until(lambda: [t for h, t in _rows(panel) if not h] == ["Fish"])
        chats.folder_filter.setCurrentIndex(0)
        await until(lambda: len([t for h, t in _rows(panel) if not h]) == 3)
        ids = [chats.model.index(r).data(ID_ROLE) for r in range(chats.model.rowCount())]
        assert ids.index(seeded[0]) < ids.index(seeded[2])  # pinned above the newest

    qloop.run_until_complete(scenario())


def test_import_from_the_menu_shows_a_summary_and_lists_the_chats(
    qtbot, qloop, make_window, seeded, monkeypatch, tmp_path
) -> None:
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps(export(3)), encoding="utf-8")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a chat"}', encoding="utf-8")

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await until(lambda: panel.chats.model.row_of(seeded[0]) is not None)
        _menu_action(_context_menu(panel, monkeypatch, seeded[0]), "Import chats…").trigger()
        dialog = panel.conversations.dialog
        assert isinstance(dialog, QFileDialog) and dialog.fileMode() is QFileDialog.FileMode.ExistingFile
        dialog.fileSelected.emit(str(bad))
        dialog.reject()
        await until(lambda: panel.conversations.importing is not None and panel.conversations.importing.done())
        assert "Nothing was imported" in panel.notice_text() and "neither an LLM Workstation" in panel.notice_text()
        await panel.conversations.import_chats(source)
        assert "Imported 3 chats" in panel.notice_text() and "2 abandoned branches" in panel.notice_text()
        await until(lambda: panel.chats.model.chat_count() == 6)
        assert {"Arithmetic", "Chat 1", "Chat 2"} <= set(panel.chats.titles())

    qloop.run_until_complete(scenario())


def test_the_search_box_and_results_fit_a_narrow_list(qtbot, qloop, make_window, seeded) -> None:
    async def scenario():
        window = await make_window()
        window.resize(1024, 700)
        panel = window.chat_panel
        await until(lambda: panel.chats.model.chat_count() == 3)
        qtbot.keyClicks(panel.chats.search_box, "message")
        await until(lambda: len(panel.chats.results.hits()) >= 3)
        results = panel.chats.results
        assert results.horizontalScrollBar().maximum() == 0
        assert results.visualRect(results.model().index(0, 0)).height() >= 3 * results.fontMetrics().height()
        qtbot.keyClick(panel.chats.search_box, Qt.Key.Key_Escape)
        assert panel.chats.search_box.text() == "" and panel.chats.view.isVisible()

    qloop.run_until_complete(scenario())
