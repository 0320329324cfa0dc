"""The chat panel driven as a person would, offscreen, against the real worker and a real history."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.chat import MessageStatus, Role
from app.core.params import SamplingParams
from tests.ui.conftest import until


async def _load(panel, model):
    panel.hide_notice()
    panel.load_model(str(model))
    await until(lambda: panel.backend.model is not None or panel.notice.isVisible())
    assert panel.backend.model is not None, panel.notice.text()


def _send(qtbot, panel, text):
    panel.input.setPlainText(text)
    qtbot.keyClick(panel.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)


def _reply_done(panel, count):
    def done():
        session = panel.session
        return session is not None and not session.generating and len(session.conversation.messages) >= count

    return done


async def _streamed_text(panel, chars=20):
    """Wait until the reply being streamed shows at least ``chars`` characters."""
    await until(lambda: panel.session.generating and panel.view.is_streaming)
    base = len(panel.view.toPlainText())
    await until(lambda: len(panel.view.toPlainText()) >= base + chars)


def _messages(panel):
    return panel.session.conversation.messages


def test_send_streams_and_updates_status_bar(qtbot, qloop, make_window, tiny_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.sampling.set_params(SamplingParams(max_tokens=16, temperature=0.0))
        await _load(panel, tiny_gguf)
        assert window.status.model_label.text() == "tiny-test-model"
        _send(qtbot, panel, "Hello, who are you?")
        await until(_reply_done(panel, 2))
        user, reply = _messages(panel)
        assert user.content == "Hello, who are you?" and reply.status is MessageStatus.COMPLETE
        text = panel.view.toPlainText()
        assert "Hello, who are you?" in text and reply.content.strip()[:10] in text
        assert "tok/s" in window.status.speed_label.text()
        assert "/ 4,096" in window.status.context_label.text()
        await until(lambda: panel.chats.count() == 1 and panel.chats.item(0).text() == "Hello, who are you?")
        assert panel.input.toPlainText() == ""

    qloop.run_until_complete(scenario())


def test_stop_regenerate_edit_and_history_survive_reopen(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.sampling.set_params(SamplingParams(max_tokens=2000, temperature=0.0))
        await _load(panel, long_context_gguf)

        _send(qtbot, panel, "first question")
        await _streamed_text(panel)
        qtbot.keyClick(panel.input, Qt.Key.Key_Escape)
        await until(_reply_done(panel, 2))
        stopped = _messages(panel)[1]
        assert stopped.status is MessageStatus.STOPPED and stopped.content
        assert "Stopped" in panel.view.toPlainText()

        panel.sampling.set_params(SamplingParams(max_tokens=8, temperature=0.0))
        panel.view.regenerate_requested.emit()
        await until(lambda: _reply_done(panel, 2)() and _messages(panel)[1].status is MessageStatus.COMPLETE)
        assert len(_messages(panel)) == 2 and _messages(panel)[1].stats.completion_tokens == 8

        panel.view.edit_requested.emit(0)
        assert panel.input.toPlainText() == "first question" and panel.edit_banner.isVisible()
        _send(qtbot, panel, "edited question")
        await until(lambda: _reply_done(panel, 2)() and _messages(panel)[0].content == "edited question")
        assert [m.role for m in _messages(panel)] == [Role.USER, Role.ASSISTANT]
        final_reply = _messages(panel)[1].content

        await panel.shutdown()
        reopened = (await make_window()).chat_panel
        saved = _messages(reopened)
        assert [m.content for m in saved] == ["edited question", final_reply]
        assert "edited question" in reopened.view.toPlainText()
        assert reopened.model_bar.current_path() == str(long_context_gguf)

    qloop.run_until_complete(scenario())


def test_worker_killed_mid_reply_window_lives_and_model_reloads(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.sampling.set_params(SamplingParams(max_tokens=2000, temperature=0.0))
        await _load(panel, long_context_gguf)
        _send(qtbot, panel, "tell me everything")
        await _streamed_text(panel)
        panel.backend.kill_worker()
        await until(_reply_done(panel, 2))
        reply = _messages(panel)[1]
        assert reply.status is MessageStatus.FAILED and reply.content
        assert "stopped unexpectedly" in panel.notice.text()
        assert "llama.cpp: failed" in window.status.backend_label.text()
        assert window.isVisible()
        await _load(panel, long_context_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=4, temperature=0.0))
        _send(qtbot, panel, "again")
        await until(_reply_done(panel, 4))
        assert _messages(panel)[3].status is MessageStatus.COMPLETE

    qloop.run_until_complete(scenario())


def test_loading_while_generating_says_stop_first(qtbot, qloop, make_window, long_context_gguf, tiny_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.sampling.set_params(SamplingParams(max_tokens=300, temperature=0.0))
        await _load(panel, long_context_gguf)
        _send(qtbot, panel, "go on")
        await until(lambda: panel.session.generating)
        panel.load_model(str(tiny_gguf))
        await until(lambda: panel.notice.isVisible())
        assert "Stop it (Esc)" in panel.notice.text()
        await until(_reply_done(panel, 2))
        assert _messages(panel)[1].status is MessageStatus.COMPLETE
        assert panel.backend.model.name == "tiny-8k"

    qloop.run_until_complete(scenario())


def test_bad_model_file_shows_message_and_keeps_chat(qtbot, qloop, make_window, not_a_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.load_model(str(not_a_gguf))
        await until(lambda: panel.notice.isVisible())
        assert "is not a GGUF model file" in panel.notice.text()
        _send(qtbot, panel, "anyone there?")
        assert "No model is loaded" in panel.notice.text()
        assert panel.input.toPlainText() == "anyone there?"  # nothing typed is lost

    qloop.run_until_complete(scenario())


def test_no_model_offers_starter_model(qtbot, qloop, make_window):
    async def scenario():
        window = await make_window()
        banner = window.chat_panel.starter
        assert banner.isVisible()
        assert ("starter model" in banner.text.text() and "base model" in banner.text.text().lower()) or (
            "pip install" in banner.text.text()
        )

    qloop.run_until_complete(scenario())
