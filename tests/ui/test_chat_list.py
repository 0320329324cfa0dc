"""The chat list over a real history store: pages loaded as it scrolls, date groups, choose, new, delete."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu

from app.core.chat.conversation import Conversation, Message, Role
from app.core.chat.date_groups import GROUPS, date_group
from app.services.chat.history import AsyncConversationStore, ConversationStore
from app.ui.pages.chat.chat_list import HEADER_ROLE, ID_ROLE, ChatList, trash_rect
from tests.support.layout import assert_fits
from tests.support.waiting import until

NOW = datetime(2026, 3, 15, 12, 0).timestamp()  # a fixed "now", midday, local time
DAY = 86_400


def _chats(stamps: list[float]) -> list[Conversation]:
    return [
        Conversation(f"chat {i}", messages=[Message(Role.USER, f"hello {i}")], updated_at=stamp)
        for i, stamp in enumerate(stamps)
    ]


@pytest.fixture
def history(tmp_path: Path):
    """``history(stamps)``: a store at tmp_path holding one chat per timestamp; returns the ids in order."""
    db = tmp_path / "conversations.sqlite3"

    def make(stamps: list[float]) -> list[int]:
        with ConversationStore(db) as store:
            return store.import_conversations(_chats(stamps))

    make.db = db  # type: ignore[attr-defined]
    return make


@pytest.fixture
def chat_list(qtbot, qloop, history):
    """A shown ChatList reading the store (opened on the loop); closed after the test."""
    stores: list[AsyncConversationStore] = []

    async def make(size=(260, 500)) -> ChatList:
        store = await AsyncConversationStore.open(history.db)
        stores.append(store)
        widget = ChatList(store, now=lambda: NOW)
        widget.model.page_size = 20
        qtbot.addWidget(widget)
        widget.resize(*size)
        widget.show()
        return widget

    yield make

    async def close() -> None:
        for store in stores:
            await store.aclose()

    qloop.run_until_complete(close())


def _rows(widget: ChatList) -> list[tuple[bool, str]]:
    model = widget.model
    return [(bool(model.index(r).data(HEADER_ROLE)), model.index(r).data()) for r in range(model.rowCount())]


def test_date_groups_use_calendar_days() -> None:
    midnight = datetime(2026, 3, 15, 0, 1).timestamp()
    assert date_group(datetime(2026, 3, 14, 23, 59).timestamp(), midnight) == "Yesterday"
    assert date_group(NOW - 3 * DAY, NOW) == "Previous 7 days"
    assert date_group(NOW - 7 * DAY, NOW) == "Previous 7 days"
    assert date_group(NOW - 8 * DAY, NOW) == "Previous 30 days"
    assert date_group(NOW - 31 * DAY, NOW) == "Older"
    assert date_group(NOW + 3600, NOW) == "Today"  # a clock set back: still today


def test_chats_are_grouped_by_date_under_headers(chat_list, history, qloop) -> None:
    history([NOW - 400 * DAY, NOW - 20 * DAY, NOW - 3 * DAY, NOW - DAY, NOW - 60, NOW - 120])

    async def scenario() -> None:
        widget = await chat_list()
        await widget.refresh()
        assert _rows(widget) == [
            (True, "Today"), (False, "chat 4"), (False, "chat 5"),
            (True, "Yesterday"), (False, "chat 3"),
            (True, "Previous 7 days"), (False, "chat 2"),
            (True, "Previous 30 days"), (False, "chat 1"),
            (True, "Older"), (False, "chat 0"),
        ]  # fmt: skip
        assert [text for header, text in _rows(widget) if header] == list(GROUPS)
        header = widget.model.index(0)
        assert not header.flags() & Qt.ItemFlag.ItemIsSelectable

    qloop.run_until_complete(scenario())


def test_chats_load_a_page_at_a_time_as_the_list_scrolls(chat_list, history, qloop) -> None:
    ids = history([NOW - 2 * DAY - i for i in range(95)])  # one group: Previous 7 days

    async def scenario() -> None:
        widget = await chat_list(size=(260, 300))
        await widget.refresh()
        assert widget.model.chat_count() == 20 and widget.model.total == 95  # the first page only
        while widget.model.has_more():
            loaded = widget.model.chat_count()
            widget.view.scrollToBottom()
            await until(lambda n=loaded: widget.model.chat_count() > n, timeout=60)
        assert widget.model.chat_count() == 95
        titles = [text for header, text in _rows(widget) if not header]
        assert titles == [f"chat {i}" for i in range(95)]  # newest first, none twice
        assert [text for header, text in _rows(widget) if header] == ["Previous 7 days"]  # one header across pages
        await widget.refresh()  # reloads the first page
        assert widget.model.chat_count() == 20 and ids

    qloop.run_until_complete(scenario())


def test_a_refresh_started_later_wins(chat_list, history, qloop) -> None:
    history([NOW - i for i in range(5)])

    async def scenario() -> None:
        widget = await chat_list()
        await asyncio.gather(widget.refresh(), widget.refresh())
        assert widget.model.chat_count() == 5

    qloop.run_until_complete(scenario())


def test_clicking_a_chat_chooses_it_and_a_header_does_nothing(chat_list, history, qloop, qtbot) -> None:
    ids = history([NOW - 60, NOW - DAY])

    async def scenario() -> None:
        widget = await chat_list()
        await widget.refresh()
        chosen: list[int] = []
        widget.chat_chosen.connect(chosen.append)
        for row in range(widget.model.rowCount()):
            rect = widget.view.visualRect(widget.model.index(row))
            qtbot.mouseClick(widget.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert chosen == [ids[0], ids[1]]  # rows: Today, chat 0, Yesterday, chat 1
        assert widget.current_id() == ids[1]
        widget.select(ids[0])
        assert widget.view.currentIndex().data(ID_ROLE) == ids[0] and chosen == [ids[0], ids[1]]
        with qtbot.waitSignal(widget.new_chat_requested):
            widget.new_chat_button.click()

    qloop.run_until_complete(scenario())


def test_delete_by_the_trash_icon_or_the_context_menu(chat_list, history, qloop, qtbot, monkeypatch) -> None:
    ids = history([NOW - 120, NOW - 60])

    async def scenario() -> None:
        widget = await chat_list()
        await widget.refresh()
        chosen: list[int] = []
        widget.chat_chosen.connect(chosen.append)
        row = widget.model.row_of(ids[1])
        rect = widget.view.visualRect(widget.model.index(row))
        target = trash_rect(rect).center()
        qtbot.mouseMove(widget.view.viewport(), target)
        with qtbot.waitSignal(widget.delete_requested) as deleted:
            qtbot.mouseClick(widget.view.viewport(), Qt.MouseButton.LeftButton, pos=target)
        assert deleted.args == [ids[1]] and chosen == []  # deleting does not open it

        menus: list[QMenu] = []
        monkeypatch.setattr(QMenu, "popup", lambda self, _pos, _action=None: menus.append(self))
        other = widget.view.visualRect(widget.model.index(widget.model.row_of(ids[0]))).center()
        widget.view.customContextMenuRequested.emit(other)
        with qtbot.waitSignal(widget.delete_requested) as deleted:
            next(a for a in menus[0].actions() if a.text() == "Delete chat").trigger()
        assert deleted.args == [ids[0]]
        widget.remove(ids[0])
        assert widget.model.row_of(ids[0]) is None and widget.model.chat_count() == 1
        assert [text for header, text in _rows(widget) if header] == ["Today"]

    qloop.run_until_complete(scenario())


def test_an_empty_history_says_so_and_the_list_fits(chat_list, history, qloop) -> None:
    history([])

    async def scenario() -> None:
        widget = await chat_list(size=(180, 200))
        await widget.refresh()
        assert widget.model.rowCount() == 0 and widget.empty.isVisible()
        assert widget.minimumSizeHint().width() <= 200
        assert_fits(widget)

    qloop.run_until_complete(scenario())


def test_long_titles_are_elided_not_widening_the_list(chat_list, history, qloop, tmp_path) -> None:
    with ConversationStore(history.db) as store:
        store.import_conversations([Conversation("word " * 200, updated_at=NOW)])

    async def scenario() -> None:
        widget = await chat_list(size=(200, 300))
        await widget.refresh()
        assert widget.minimumSizeHint().width() < 200
        assert widget.view.horizontalScrollBar().maximum() == 0

    qloop.run_until_complete(scenario())
