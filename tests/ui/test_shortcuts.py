"""The window's keyboard shortcuts, pressed as real key events on the window: Ctrl+1…9 and Ctrl+0 show the pages in the
navigation's order, Ctrl+F puts the typing in the chat search (showing Chat first), Ctrl+N shows the Chat page with
a new chat in it from any page (sending nothing), and every action in a menu shows its shortcut."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMenu

from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)

NUMBER_KEYS = [getattr(Qt.Key, f"Key_{n % 10}") for n in range(1, 11)]  # Ctrl+1 … Ctrl+9, Ctrl+0


async def _active(make_window):
    window = await make_window()
    window.activateWindow()
    await until(lambda: QApplication.activeWindow() is window, 5)
    return window


def _press(window, keys: str) -> None:
    QTest.keySequence(window, QKeySequence(keys))


def test_ctrl_number_shows_the_pages_in_navigation_order(qloop, make_window):
    async def scenario():
        window = await _active(make_window)
        names = [window.nav.item(row).text() for row in range(window.nav.count())]
        assert len(names) == 10  # one key for each page
        for row in reversed(range(10)):
            QTest.keyClick(window, NUMBER_KEYS[row], Qt.KeyboardModifier.ControlModifier)
            assert window.nav.currentRow() == row, names[row]
            assert window.pages.currentIndex() == row and window.pages.currentWidget().isVisible()

    qloop.run_until_complete(scenario())


def test_ctrl_f_shows_chat_and_focuses_the_search(qloop, make_window):
    async def scenario():
        window = await _active(make_window)
        window.chat_panel.set_chats_open(False)  # the chats column closed: Ctrl+F opens it
        window.show_page("Bench")
        box = window.chat_panel.chats.search_box
        box.setText("pirates")
        assert not box.hasFocus()
        _press(window, "Ctrl+F")
        assert window.pages.currentWidget() is window.chat_panel
        await until(box.hasFocus, 5)
        assert box.selectedText() == "pirates"  # typing replaces the last search
        QTest.keyClicks(QApplication.focusWidget(), "ships")
        assert box.text() == "ships"

    qloop.run_until_complete(scenario())


def test_ctrl_n_from_another_page_shows_chat_with_a_new_chat_and_sends_nothing(qloop, make_window):
    async def scenario():
        window = await _active(make_window)
        panel = window.chat_panel
        panel.input.setPlainText("a draft for later")
        before = panel.session.conversation
        window.show_page("Models")
        assert window.pages.currentWidget() is not panel
        _press(window, "Ctrl+N")
        assert window.pages.currentWidget() is panel and panel.isVisible()
        await until(lambda: panel.session.conversation is not before, 5)
        assert panel.session.is_draft and not panel.session.conversation.messages  # nothing was sent
        await until(panel.input.hasFocus, 5)

    qloop.run_until_complete(scenario())


def _menu_actions(menu: QMenu):
    for action in menu.actions():
        if action.menu() is not None:
            yield from _menu_actions(action.menu())
        elif not action.isSeparator():
            yield action


def test_every_menu_action_shows_its_shortcut(qloop, make_window):
    async def scenario():
        window = await make_window()
        menus = [action.menu() for action in window.menuBar().actions() if action.menu() is not None]
        actions = [action for menu in menus for action in _menu_actions(menu)]
        assert len(actions) >= 15
        missing = [action.text() for action in actions if action.shortcut().isEmpty()]
        assert not missing, missing
        shortcuts = [action.shortcut().toString() for action in actions]
        assert len(set(shortcuts)) == len(shortcuts), shortcuts  # no two actions share a key
        view = {action.text(): action.shortcut().toString() for action in actions}
        assert (
            view["vLLM"] == "Ctrl+4"
            and view["API server"] == "Ctrl+9"
            and view["Settings"] == "Ctrl+0"
            and view["&New chat"] == "Ctrl+N"
        )

    qloop.run_until_complete(scenario())
