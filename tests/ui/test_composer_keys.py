"""The composer's keys, as real key events: Enter sends, Shift+Enter starts a new line, the setting "Send with
Ctrl+Enter" swaps them, Tab moves the focus out (no tab character), and Enter while an input method composes is the
input method's."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QInputMethodEvent
from PySide6.QtWidgets import QApplication, QLineEdit, QVBoxLayout, QWidget

from app.core.chat.conversation import MessageStatus
from app.core.params import SamplingParams
from app.core.settings import load_settings
from app.ui.pages.chat.composer import Composer
from tests.support.waiting import until

SHIFT, CTRL = Qt.KeyboardModifier.ShiftModifier, Qt.KeyboardModifier.ControlModifier


class _Window(QWidget):
    """A composer between two other fields."""

    def __init__(self) -> None:
        super().__init__()
        self.before, self.composer, self.after = QLineEdit(), Composer(), QLineEdit()
        layout = QVBoxLayout(self)
        for child in (self.before, self.composer, self.after):
            layout.addWidget(child)


@pytest.fixture
def window(qtbot) -> _Window:
    widget = _Window()
    qtbot.addWidget(widget)
    widget.show()
    widget.activateWindow()
    widget.composer.input.setFocus()
    qtbot.waitUntil(widget.composer.input.hasFocus)
    return widget


@pytest.fixture
def composer(window) -> Composer:
    """The window's composer, with the focus in its input."""
    return window.composer


def _sends(qtbot, composer) -> list[int]:
    sent: list[int] = []
    composer.send_requested.connect(lambda: sent.append(1))
    return sent


def test_enter_sends_and_shift_enter_starts_a_new_line(qtbot, composer) -> None:
    sent = _sends(qtbot, composer)
    qtbot.keyClicks(composer.input, "line one")
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, SHIFT)
    qtbot.keyClicks(composer.input, "line two")
    assert composer.input.toPlainText() == "line one\nline two" and sent == []
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert sent == [1] and composer.input.toPlainText() == "line one\nline two"  # the page clears it once sent
    qtbot.keyClick(composer.input, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)  # the keypad's Enter
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, CTRL)  # sends in both modes
    assert sent == [1, 1, 1]
    assert composer.send_button.toolTip() == "Send (Enter)" and "Shift+Enter" in composer.hint.text()


def test_with_the_setting_ctrl_enter_sends_and_enter_is_a_new_line(qtbot, composer) -> None:
    sent = _sends(qtbot, composer)
    composer.set_send_with_ctrl_enter(True)
    assert composer.send_button.toolTip() == "Send (Ctrl+Enter)"
    qtbot.keyClicks(composer.input, "one")
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    qtbot.keyClicks(composer.input, "two")
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, SHIFT)
    qtbot.keyClicks(composer.input, "three")
    assert composer.input.toPlainText() == "one\ntwo\nthree" and sent == []
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, CTRL)
    assert sent == [1]
    composer.set_generating(True)
    assert composer.send_button.toolTip() == "Stop the reply (Esc)"
    composer.set_generating(False)
    assert composer.send_button.toolTip() == "Send (Ctrl+Enter)"


def test_tab_moves_the_focus_out_and_shift_tab_back(qtbot, window, composer) -> None:
    qtbot.keyClicks(composer.input, "draft")
    qtbot.keyClick(composer.input, Qt.Key.Key_Tab)
    assert not composer.input.hasFocus() and "\t" not in composer.input.toPlainText()
    assert composer.input.toPlainText() == "draft"
    focused = QApplication.focusWidget()
    assert focused is not None and focused is not window.before
    qtbot.keyClick(focused, Qt.Key.Key_Backtab, SHIFT)
    assert composer.input.hasFocus()
    qtbot.keyClick(composer.input, Qt.Key.Key_Backtab, SHIFT)
    assert not composer.input.hasFocus() and composer.input.toPlainText() == "draft"


def test_enter_while_an_input_method_composes_does_not_send(qtbot, composer) -> None:
    sent = _sends(qtbot, composer)
    QApplication.sendEvent(composer.input, QInputMethodEvent("にほん", []))  # a word being composed
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)  # picks the word
    assert sent == []
    commit = QInputMethodEvent()
    commit.setCommitString("日本")
    QApplication.sendEvent(composer.input, commit)
    assert "日本" in composer.input.toPlainText() and sent == []
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert sent == [1]


def test_enter_sends_a_real_message_and_the_setting_page_gives_ctrl_enter_back(
    qtbot, qloop, make_window, tiny_gguf
) -> None:
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.load_model(str(tiny_gguf))
        await until(lambda: panel.workspace.model is not None)
        panel.sampling.set_params(SamplingParams(max_tokens=4, temperature=0.0))
        panel.input.setFocus()
        qtbot.keyClicks(panel.input, "first line")
        qtbot.keyClick(panel.input, Qt.Key.Key_Return, SHIFT)
        qtbot.keyClicks(panel.input, "second line")
        qtbot.keyClick(panel.input, Qt.Key.Key_Return)
        await until(lambda: len(panel.session.conversation.messages) == 2 and not panel.session.generating)
        user, reply = panel.session.conversation.messages
        assert user.content == "first line\nsecond line" and reply.status is MessageStatus.COMPLETE
        assert panel.input.toPlainText() == ""

        page = window.settings_page
        page.general.send_with_ctrl_enter.setChecked(True)
        assert page.save() is not None
        await until(lambda: panel.composer.send_with_ctrl_enter)
        assert window.workstation.settings.send_with_ctrl_enter
        file = window.workstation.paths.settings_file
        await until(lambda: file.exists() and load_settings(file).send_with_ctrl_enter)  # written, and read back
        assert panel.composer.send_button.toolTip() == "Send (Ctrl+Enter)"
        panel.input.setFocus()
        qtbot.keyClicks(panel.input, "again")
        qtbot.keyClick(panel.input, Qt.Key.Key_Return)
        assert panel.input.toPlainText() == "again\n" and len(panel.session.conversation.messages) == 2
        qtbot.keyClick(panel.input, Qt.Key.Key_Return, CTRL)
        await until(lambda: len(panel.session.conversation.messages) == 4 and not panel.session.generating)
        assert panel.session.conversation.messages[2].content == "again"

    qloop.run_until_complete(scenario())
