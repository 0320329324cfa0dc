"""Versions (‹ 2/3 ›), edit in place, Continue after Stop and the typing dots, driven as a person would: the real
chat page, the real worker on tiny GGUFs, the real history."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.chat.conversation import Message, MessageStatus, Role
from app.core.chat.versions import version_count
from app.core.params import SamplingParams
from app.services.engines.entries import EngineKind
from app.ui.pages.chat.message_item import TYPING_FRAMES
from app.ui.pages.chat.transcript import ChatView
from tests.support.waiting import until
from tests.ui.test_chat_panel import _load, _messages, _reply_done, _send, _streamed_text


def _tokens(panel, count):
    panel.sampling.set_params(SamplingParams(max_tokens=count, temperature=0.0))


def _settled(panel, count, versions=1):
    """The chat is idle with ``count`` messages, the last complete, and the last place has ``versions`` versions."""

    def done():
        messages = _messages(panel)
        return (_reply_done(panel, count)() and len(messages) == count and version_count(messages[-1]) == versions
                and messages[-1].status is MessageStatus.COMPLETE)  # fmt: skip

    return done


def _record_prompts(panel):
    prompts = []
    real = panel.host.stream_chat

    def stream_chat(kind, messages, sampling, options=None):
        prompts.append(messages)
        return real(kind, messages, sampling, options)

    panel.host.stream_chat = stream_chat
    return prompts


def _versions_shown(item):
    return item.version_label.text() if item.version_label.isVisibleTo(item) else ""


def test_regenerate_twice_then_browse_back_the_shown_one_is_sent_and_kept(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        prompts = _record_prompts(panel)
        _tokens(panel, 3)
        _send(qtbot, panel, "tell me a story")
        await until(_settled(panel, 2))
        texts = [_messages(panel)[1].content]
        for count, tokens in ((2, 6), (3, 9)):
            _tokens(panel, tokens)
            panel.view.message_widget(1).buttons["regenerate"].click()
            await until(_settled(panel, 2, count))
            texts.append(_messages(panel)[1].content)
        assert len(set(texts)) == 3, texts
        item = panel.view.message_widget(1)
        assert _versions_shown(item) == "3/3" and not item.newer.isEnabled()

        for shown in ("2/3", "1/3"):
            item.older.click()
            await until(lambda shown=shown: _versions_shown(panel.view.message_widget(1)) == shown)
        item = panel.view.message_widget(1)
        assert texts[0] in panel.view.message_text(1) and texts[2] not in panel.view.message_text(1)
        assert not item.older.isEnabled() and item.newer.isEnabled()

        _tokens(panel, 3)
        _send(qtbot, panel, "and then?")
        await until(_settled(panel, 4))
        sent = [m["content"] for m in prompts[-1] if m["role"] == "assistant"]
        assert sent == [texts[0]]  # the version shown is the one the model is sent

        await panel.shutdown()
        reopened = (await make_window()).chat_panel
        saved = _messages(reopened)
        assert [m.content for m in saved[:3]] == ["tell me a story", texts[0], "and then?"]
        assert [b[0].content for b in saved[1].versions] == texts[1:]
        assert _versions_shown(reopened.view.message_widget(1)) == "1/3"

    qloop.run_until_complete(scenario())


def test_editing_a_message_keeps_the_old_branch_browsable(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        _tokens(panel, 3)
        _send(qtbot, panel, "first question")
        await until(_settled(panel, 2))
        _send(qtbot, panel, "second question")
        await until(_settled(panel, 4))
        before = [m.content for m in _messages(panel)]

        panel.view.message_widget(0).buttons["edit"].click()
        assert panel.input.toPlainText() == "first question" and panel.edit_banner.isVisible()
        _send(qtbot, panel, "an edited question")
        await until(lambda: _settled(panel, 2)() and _messages(panel)[0].content == "an edited question")
        item = panel.view.message_widget(0)
        assert _versions_shown(item) == "2/2" and "second question" not in panel.view.toPlainText()

        item.older.click()  # the old question comes back with everything that followed it
        await until(lambda: len(_messages(panel)) == 4)
        assert [m.content for m in _messages(panel)] == before
        assert "second question" in panel.view.toPlainText()
        assert _versions_shown(panel.view.message_widget(0)) == "1/2"
        saved = await panel.workstation.store.load(panel.session.conversation.id)
        assert [m.content for m in saved.messages] == before

        panel.view.message_widget(0).newer.click()
        await until(lambda: len(_messages(panel)) == 2)
        assert _messages(panel)[0].content == "an edited question"

    qloop.run_until_complete(scenario())


def test_a_stopped_reply_offers_continue_which_appends_to_it(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        _tokens(panel, 2000)
        _send(qtbot, panel, "go on and on")
        await _streamed_text(panel)
        qtbot.keyClick(panel.input, Qt.Key.Key_Escape)
        await until(_reply_done(panel, 2))
        stopped = _messages(panel)[1]
        cut, cut_id = stopped.content, stopped.id
        assert stopped.status is MessageStatus.STOPPED and cut
        item = panel.view.message_widget(1)
        assert item.resume_button.isVisibleTo(item)
        assert "Stopped — partial reply Continue" in panel.view.message_text(1)

        _tokens(panel, 6)
        item.resume_button.click()
        await until(lambda: _reply_done(panel, 2)() and len(_messages(panel)[1].content) > len(cut))
        reply = _messages(panel)[1]
        assert len(_messages(panel)) == 2 and reply.id == cut_id and reply.content.startswith(cut)
        assert reply.status is MessageStatus.COMPLETE
        assert not panel.view.message_widget(1).resume_button.isVisibleTo(panel.view.message_widget(1))
        saved = await panel.workstation.store.load(panel.session.conversation.id)
        assert saved.messages[1].content == reply.content and len(saved.messages) == 2

    qloop.run_until_complete(scenario())


def _hold_the_engine(panel):
    """A reply that holds the llama.cpp engine's turn until it is closed: the chat's reply waits behind it."""
    holder = panel.host.stream_chat(EngineKind.LLAMACPP, [{"role": "user", "content": "hold"}], SamplingParams())
    assert not holder.waiting  # it has the turn
    return holder


def _typing(panel):
    """Whether the transcript's last row (the reply, while it streams) shows the typing dots."""
    item = panel.view.message_widget(panel.view.message_count() - 1)
    return item is not None and item.typing.isVisibleTo(item)


def test_typing_dots_show_from_send_to_the_first_token_and_go_on_stop(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        _tokens(panel, 2000)

        holder = _hold_the_engine(panel)
        _send(qtbot, panel, "hello")
        await until(lambda: panel.view.is_streaming and _typing(panel))
        item = panel.view.message_widget(1)
        assert panel.session.reply_text == "" and item.typing.text() in TYPING_FRAMES
        frame = item.typing.text()
        await until(lambda: item.typing.text() != frame)  # the dots move
        await holder.aclose()
        await _streamed_text(panel, 5)  # tokens arrive: the dots are gone while the reply goes on
        assert panel.session.generating and not _typing(panel)
        qtbot.keyClick(panel.input, Qt.Key.Key_Escape)
        await until(_reply_done(panel, 2))

        holder = _hold_the_engine(panel)  # stopped before its first token: the dots go too
        _send(qtbot, panel, "again")
        await until(lambda: panel.view.message_count() == 4 and panel.view.is_streaming and _typing(panel))
        qtbot.keyClick(panel.input, Qt.Key.Key_Escape)
        await holder.aclose()
        await until(lambda: _reply_done(panel, 4)() and not panel.view.is_streaming)
        last = panel.view.message_widget(3)
        assert _messages(panel)[3].status is MessageStatus.STOPPED and _messages(panel)[3].content == ""
        assert last is not None and not last.typing.isVisibleTo(last)

    qloop.run_until_complete(scenario())


def test_typing_dots_go_when_the_reply_fails_before_its_first_token(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        _tokens(panel, 50)
        holder = _hold_the_engine(panel)
        _send(qtbot, panel, "hello")
        await until(lambda: panel.view.is_streaming and _typing(panel))
        panel.host.llamacpp.kill_worker()  # the engine dies before the reply's first token
        await holder.aclose()
        await until(lambda: _reply_done(panel, 2)() and not panel.view.is_streaming)
        assert _messages(panel)[1].status is MessageStatus.FAILED and panel.notice.text()
        assert not _typing(panel)

    qloop.run_until_complete(scenario())


def test_the_transcript_offers_continue_on_the_last_stopped_reply_and_browses_versions(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 600)
    view.show()
    older = [[Message(Role.ASSISTANT, "first try")], [Message(Role.ASSISTANT, "third try")]]
    messages = [
        Message(Role.USER, "q1"),
        Message(Role.ASSISTANT, "stopped early", status=MessageStatus.STOPPED),
        Message(Role.USER, "q2"),
        Message(Role.ASSISTANT, "cut when the app closed", status=MessageStatus.INTERRUPTED, versions=older, version=1),
    ]
    view.show_messages(messages)
    earlier, last = view.message_widget(1), view.message_widget(3)
    assert earlier.mark.isVisibleTo(earlier) and not earlier.resume_button.isVisibleTo(earlier)
    assert last.mark.isVisibleTo(last) and last.resume_button.isVisibleTo(last)
    assert _versions_shown(last) == "2/3" and "‹ 2/3 ›" in view.message_text(3)
    with qtbot.waitSignal(view.continue_requested):
        last.resume_button.click()
    with qtbot.waitSignal(view.version_requested) as older_one:
        last.older.click()
    with qtbot.waitSignal(view.version_requested) as newer_one:
        last.newer.click()
    assert older_one.args == [3, 0] and newer_one.args == [3, 2]
    assert _versions_shown(view.message_widget(0)) == ""  # a message with no other version shows no ‹ › at all
