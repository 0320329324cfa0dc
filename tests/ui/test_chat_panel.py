"""The chat panel driven as a person would, offscreen, against the real worker and a real history."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.chat.conversation import MessageStatus, Role
from app.core.params import SamplingParams
from app.services.engines.entries import EngineKind
from app.services.engines.events import VllmEndpoint
from app.ui.pages.chat.chat_list import ACTIVITY_ROLE, GENERATING
from tests.support.waiting import until


def _engine(panel):
    """The engine the chat page's chats run on now."""
    return panel.host.engine(panel.workspace.engine)


async def _load(panel, model):
    panel.hide_notice()
    panel.load_model(str(model))
    bar = panel.model_bar
    await until(
        lambda: (
            getattr(bar, "loaded_path", None) == str(model)
            or (panel.notice.isVisible() and not bar.progress.isVisible())
        )
    )
    assert _engine(panel).model is not None, panel.notice.text()


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
        await _load(panel, tiny_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=16, temperature=0.0))
        assert window.status.model_label.text() == "tiny-test-model"
        _send(qtbot, panel, "Hello, who are you?")
        await until(_reply_done(panel, 2))
        user, reply = _messages(panel)
        assert user.content == "Hello, who are you?" and reply.status is MessageStatus.COMPLETE
        text = panel.view.toPlainText()
        assert "Hello, who are you?" in text and reply.content.strip()[:10] in text
        assert "tok/s" in window.status.speed_label.text()
        assert "/ 4,096" in window.status.context_label.text()
        await until(lambda: panel.chats.titles() == ["Hello, who are you?"])
        assert panel.input.toPlainText() == ""

    qloop.run_until_complete(scenario())


def test_stop_regenerate_edit_and_history_survive_reopen(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=4000, temperature=0.0))  # the context: Stop comes first

        _send(qtbot, panel, "first question")
        await _streamed_text(panel)
        # The status bar's context figure moves while the reply is still being written.
        seen = window.status.context_label.text()
        assert panel.session.generating and seen != "Context: 0 / 4,096 (0%)"
        await until(lambda: window.status.context_label.text() != seen and panel.session.generating)
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
        await _load(panel, long_context_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=4000, temperature=0.0))  # the context: the kill comes first
        _send(qtbot, panel, "tell me everything")
        await _streamed_text(panel)
        panel.host.llamacpp.kill_worker()
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
        await _load(panel, long_context_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=300, temperature=0.0))
        _send(qtbot, panel, "go on")
        await until(lambda: panel.session.generating)
        panel.load_model(str(tiny_gguf))
        await until(lambda: panel.notice.isVisible())
        assert "Stop it (Esc)" in panel.notice.text()
        await until(_reply_done(panel, 2))
        assert _messages(panel)[1].status is MessageStatus.COMPLETE
        assert _engine(panel).model.name == "tiny-8k"

    qloop.run_until_complete(scenario())


def test_bad_model_file_shows_message_and_keeps_chat(qtbot, qloop, make_window, not_a_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.load_model(str(not_a_gguf))
        await until(lambda: panel.notice.isVisible())
        assert "is not a GGUF model file" in panel.notice.text()
        panel.hide_notice()
        _send(qtbot, panel, "anyone there?")  # loads the chosen model first: it fails again, and says so
        await until(lambda: "is not a GGUF model file" in panel.notice.text() and panel.models.loading.done())
        assert panel.input.toPlainText() == "anyone there?"  # nothing typed is lost
        assert await panel.workstation.store.list_conversations() == []  # nothing was sent: no chat saved

    qloop.run_until_complete(scenario())


def test_no_model_offers_starter_model(qtbot, qloop, make_window):
    async def scenario():
        window = await make_window()
        empty = window.chat_panel.empty_state
        assert empty.isVisible() and not window.chat_panel.view.isVisible()
        assert ("starter model" in empty.text.text() and empty.starter_button.isVisible()) or (
            "pip install" in empty.text.text()
        )
        assert not empty.examples_shown()

    qloop.run_until_complete(scenario())


def test_use_modelfile_in_chat_applies_preset_and_reports_gaps(qtbot, qloop, make_window, tiny_gguf):
    from app.core.modelfile.parser import parse_modelfile

    text = (
        f"FROM {tiny_gguf}\nSYSTEM You are terse.\nMESSAGE user Hi\nMESSAGE assistant Hello.\n"
        "PARAMETER num_ctx 1024\nPARAMETER temperature 0.1\nPARAMETER stop <|im_end|>\nPARAMETER num_keep 4\n"
        "TEMPLATE [INST] {{ .Prompt }} [/INST]\n"
    )

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.apply_modelfile(parse_modelfile(text), "terse")
        await until(lambda: _engine(panel).model is not None)
        assert _engine(panel).model.n_ctx == 1024
        conversation = panel.session.conversation
        assert conversation.title == "terse (preset)" and conversation.system_prompt == "You are terse."
        assert [(str(m.role), m.content) for m in conversation.messages] == [("user", "Hi"), ("assistant", "Hello.")]
        params = panel.sampling.params()
        assert params.temperature == pytest.approx(0.1) and params.stop == ("<|im_end|>",)
        notice = panel.notice.text()
        assert "Preset terse applied" in notice and "num_keep" in notice and "TEMPLATE" in notice
        assert panel.system_prompt.toPlainText() == "You are terse."

    qloop.run_until_complete(scenario())


def test_ollama_is_a_third_engine_and_switching_keeps_the_chat(qtbot, qloop, make_window, tiny_gguf, monkeypatch):
    from tests.support.fake_ollama import FakeOllama

    with FakeOllama() as fake:
        fake.add_model("llama3.2:latest")
        monkeypatch.setenv("OLLAMA_HOST", fake.host)

        async def scenario():
            window = await make_window()
            panel = window.chat_panel
            await until(lambda: "ollama:llama3.2:latest" in _entries(panel))
            panel.model_bar.select("ollama:llama3.2:latest")
            await _load(panel, "ollama:llama3.2:latest")
            panel.sampling.set_params(SamplingParams(max_tokens=8, temperature=0.0))
            assert str(panel.workspace.engine) == "ollama" and window.status.backend_label.text() == "Ollama: ready"
            await _send_and_wait(qtbot, panel, "Hello Ollama", 2)
            assert _messages(panel)[1].backend == "ollama" and _messages(panel)[1].content
            await _load(panel, tiny_gguf)
            panel.sampling.set_params(SamplingParams(max_tokens=8, temperature=0.0))
            assert (
                str(panel.workspace.engine) == "llamacpp"
                and window.workstation.host.engine(EngineKind.OLLAMA).model is None
            )
            await _send_and_wait(qtbot, panel, "Hello llama.cpp", 4)
            assert [m.backend for m in _messages(panel)[1::2]] == ["ollama", "llamacpp"]

        qloop.run_until_complete(scenario())


def test_ollama_not_running_is_calm(qtbot, qloop, make_window, monkeypatch):
    from tests.support.fake_ollama import FakeOllama

    monkeypatch.setenv("OLLAMA_HOST", FakeOllama.unused_host())

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await until(lambda: "not running" in panel.model_bar.models.toolTip())
        assert not any(entry.startswith("ollama:") for entry in _entries(panel))
        assert not panel.notice.isVisible()

    qloop.run_until_complete(scenario())


def test_the_picker_lists_the_ollama_the_settings_name_after_a_change(qloop, make_window, monkeypatch):

    from tests.support.fake_ollama import FakeOllama

    with FakeOllama() as first, FakeOllama() as second:
        first.add_model("llama3.2:latest")
        second.add_model("qwen3:4b")
        monkeypatch.setenv("OLLAMA_HOST", first.host)

        async def scenario():
            window = await make_window()
            panel = window.chat_panel
            await until(lambda: "ollama:llama3.2:latest" in _entries(panel))  # listed soon after start-up
            window.workstation.update_settings(ollama_host=second.host)
            await until(lambda: "ollama:qwen3:4b" in _entries(panel), 10)
            assert "ollama:llama3.2:latest" not in _entries(panel)

        qloop.run_until_complete(scenario())


def _activity(panel, chat_id):
    row = panel.chats.model.row_of(chat_id)
    return None if row is None else panel.chats.model.index(row).data(ACTIVITY_ROLE)


def _entries(panel):
    return [panel.model_bar.models.itemData(i) for i in range(panel.model_bar.models.count())]


async def _send_and_wait(qtbot, panel, text, count):
    _send(qtbot, panel, text)
    await until(_reply_done(panel, count))


def test_vllm_chats_generate_at_once_and_keep_going_in_the_background(qtbot, qloop, make_window):
    from tests.support.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        fake.token_delay_s = 0.05
        fake.overlap = (
            2  # the first reply holds its tokens until the second runs beside it: they overlap on any machine
        )

        async def scenario():
            window = await make_window()
            panel = window.chat_panel
            panel.host.offer_vllm(VllmEndpoint(fake.base_url, "tiny-llama", None, "remote"))
            panel.model_bar.select("vllm:tiny-llama")
            await _load(panel, "vllm:tiny-llama")
            panel.sampling.set_params(SamplingParams(max_tokens=40, temperature=0.0))
            assert str(panel.workspace.engine) == "vllm" and window.status.backend_label.text() == "vLLM: ready"
            _send(qtbot, panel, "first chat, a long answer please")
            await until(lambda: panel.session.generating)
            first_chat = panel.session.conversation.id
            panel.new_chat()  # allowed: vLLM runs several replies at once
            await until(lambda: panel.session.conversation is not None and panel.session.conversation.id != first_chat)
            await until(lambda: _activity(panel, first_chat) == GENERATING)  # the list marks it busy
            _send(qtbot, panel, "second chat")
            await until(lambda: fake.max_in_flight >= 2)
            await until(_reply_done(panel, 2))
            assert _messages(panel)[1].status is MessageStatus.COMPLETE
            await until(lambda: not panel.workspace.background)  # the first chat finished while hidden, and was saved
            await until(lambda: _activity(panel, first_chat) is None)
            saved = await panel.workstation.store.load(first_chat)
            assert saved.messages[1].status is MessageStatus.COMPLETE and saved.messages[1].backend == "vllm"
            assert saved.messages[1].content == "You said: first chat, a long answer please"
            assert saved.messages[1].stats.completion_tokens == 8

        qloop.run_until_complete(scenario())


def test_switching_a_chat_from_llamacpp_to_vllm_keeps_history_and_says_what_changes(
    qtbot, qloop, make_window, tiny_gguf
):
    from tests.support.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer(models=("tiny-llama",)) as fake:

        async def scenario():
            window = await make_window()
            panel = window.chat_panel
            await _load(panel, tiny_gguf)
            panel.sampling.set_params(SamplingParams(max_tokens=6, temperature=0.0, typical_p=0.7))
            await _send_and_wait(qtbot, panel, "hello", 2)
            panel.host.offer_vllm(VllmEndpoint(fake.base_url, "tiny-llama", None, "remote"))
            panel.model_bar.select("vllm:tiny-llama")
            await _load(panel, "vllm:tiny-llama")
            assert "continues on vLLM" in panel.notice.text() and "typical_p" in panel.notice.text()
            await _send_and_wait(qtbot, panel, "and now?", 4)
            sent = fake.requests_to("/v1/chat/completions")[-1].json["messages"]
            assert [m["content"] for m in sent][:3] == ["hello", _messages(panel)[1].content, "and now?"]
            assert [m.backend for m in _messages(panel)[1::2]] == ["llamacpp", "vllm"]

        qloop.run_until_complete(scenario())


# --- issue 15: drafts, context per chat, token limit, load on send, restore, per-model settings, presets --------------


def _settings_text(panel):
    path = panel.workstation.paths.settings_file
    return path.read_text() if path.exists() else ""


def test_new_chat_is_a_draft_and_shows_its_own_context(qtbot, qloop, make_window, tiny_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, tiny_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=8, temperature=0.0))
        await _send_and_wait(qtbot, panel, "hello there", 2)
        assert window.status.context_label.full_text() != "Context: 0 / 4,096 (0%)"
        next(a for a in window.actions() if a.shortcut().toString() == "Ctrl+N").trigger()  # File › New chat
        await until(lambda: not _messages(panel))
        assert window.status.context_label.full_text() == "Context: 0 / 4,096 (0%)"
        assert panel.composer.meter.full_text() == "0 / 4,096 tokens"
        assert panel.empty_state.isVisible()
        panel.new_chat()  # and another: still nothing saved
        await until(lambda: not _messages(panel))
        assert len(await panel.workstation.store.list_conversations()) == 1
        await _send_and_wait(qtbot, panel, "second", 2)
        assert len(await panel.workstation.store.list_conversations()) == 2

    qloop.run_until_complete(scenario())


def test_a_reply_at_the_token_limit_says_so_and_continues_in_place(qtbot, qloop, make_window, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=8, temperature=0.0))
        await _send_and_wait(qtbot, panel, "go on and on", 2)
        cut = _messages(panel)[1].content
        if hasattr(panel.view, "continue_requested"):  # the transcript marks the reply and offers Continue
            assert "Stopped at the token limit" in panel.view.toPlainText() and not panel.notice.text()
            panel.view.continue_requested.emit()
        else:  # else the page says so in a notice
            assert "Stopped at the token limit" in panel.notice.text()
            [notice] = [n for n in panel.notice.notices() if n.key == "length"]
            assert notice.action_text == "Continue"
            panel.notice.run_action("length")
        await until(lambda: _reply_done(panel, 2)() and len(_messages(panel)[1].content) > len(cut))
        reply = _messages(panel)[1]
        assert len(_messages(panel)) == 2 and reply.content.startswith(cut) and reply.stats.completion_tokens == 16
        saved = await panel.workstation.store.load(panel.session.conversation.id)
        assert saved.messages[1].content == reply.content

    qloop.run_until_complete(scenario())


def test_sending_with_no_model_loaded_loads_the_chosen_one_first(qtbot, qloop, make_window, tiny_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.model_bar.select(str(tiny_gguf))
        panel.model_bar.selection_changed.emit(str(tiny_gguf))
        assert panel.workspace.model is None
        _send(qtbot, panel, "load and answer")
        await until(lambda: _reply_done(panel, 2)() and panel.session.conversation.messages[1].content, timeout=60)
        assert _engine(panel).model.name == "tiny-test-model"
        assert _messages(panel)[0].content == "load and answer" and panel.input.toPlainText() == ""

    qloop.run_until_complete(scenario())


def test_the_last_model_is_restored_at_start_unless_turned_off(qloop, make_window, tiny_gguf):
    async def scenario():
        first = (await make_window()).chat_panel
        await _load(first, tiny_gguf)
        await first.shutdown()
        await until(lambda: str(tiny_gguf) in _settings_text(first))  # remembered as the last model
        second = (await make_window()).chat_panel
        await until(lambda: _engine(second).model is not None)
        assert second.model_bar.loaded_path == str(tiny_gguf) and second.drawer.restore_last.isChecked()
        second.drawer.restore_last.setChecked(False)  # the opt-out, saved
        await until(lambda: '"restore_last_model": false' in _settings_text(second))
        await second.shutdown()
        third = (await make_window()).chat_panel
        await third.models.restoring
        assert third.models.loading is None and _engine(third).model is None
        assert third.model_bar.current_path() == str(tiny_gguf)  # chosen, not loaded

    qloop.run_until_complete(scenario())


def test_each_model_keeps_its_own_settings_and_defaults_are_separate(qloop, make_window, tiny_gguf, long_context_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, tiny_gguf)
        panel.sampling.temperature.setValue(0.25)
        panel.drawer.load.n_ctx.setValue(2048)
        assert panel.drawer.reload_button.isVisible()  # load options apply on the next load
        await _load(panel, long_context_gguf)
        assert panel.sampling.temperature.value() == pytest.approx(0.7)  # the other model: the defaults
        await _load(panel, tiny_gguf)
        assert panel.sampling.temperature.value() == pytest.approx(0.25)
        assert _engine(panel).model.n_ctx == 2048
        store = panel.workstation.model_settings
        assert store.effective_sampling(str(tiny_gguf)).temperature == pytest.approx(0.25)
        assert (panel.workstation.paths.data_dir / "model-settings.json").exists()
        panel.drawer.save_defaults_button.click()
        assert panel.workstation.settings.sampling.temperature == pytest.approx(0.25)
        panel.drawer.reset_button.click()
        await until(lambda: store.saved(str(tiny_gguf)) is None)
        assert panel.sampling.temperature.value() == pytest.approx(0.25)  # now the defaults say so

    qloop.run_until_complete(scenario())


def test_a_preset_picked_in_the_drawer_applies_to_the_model_and_this_chat(qloop, make_window, tiny_gguf):
    from app.services.paths import app_paths

    folder = app_paths().ensure().modelfiles_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "terse.Modelfile").write_text("FROM x\nSYSTEM Be terse.\nPARAMETER temperature 0.15\n")

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, tiny_gguf)
        picker = panel.drawer.presets
        await until(lambda: picker.findText("terse") >= 0 and picker.findText("starter-text-continuation") >= 0)
        picker.setCurrentIndex(picker.findText("terse"))
        picker.activated.emit(picker.currentIndex())
        await until(lambda: panel.system_prompt.toPlainText() == "Be terse.")
        assert panel.sampling.temperature.value() == pytest.approx(0.15)
        assert "Preset terse applied" in panel.notice.text()
        saved = panel.workstation.model_settings.saved(str(tiny_gguf))
        assert saved.preset == "terse" and saved.sampling.temperature == pytest.approx(0.15)

    qloop.run_until_complete(scenario())


def test_the_drawer_and_the_chats_list_are_remembered(qloop, make_window):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        assert panel.drawer.isVisible() == (window.width() >= 1200)  # the first time: by the window's width
        panel.drawer_toggle.click()
        panel.chats_toggle.click()
        wanted = panel.drawer.isVisible()
        assert not panel.chats_column.isVisible()
        await until(lambda: '"chat_list_open": false' in _settings_text(panel))
        await panel.shutdown()
        again = (await make_window()).chat_panel
        assert again.drawer.isVisible() == wanted and not again.chats_column.isVisible()

    qloop.run_until_complete(scenario())


def test_stop_sequences_with_line_breaks_read_and_round_trip():
    from app.ui.pages.chat.sampling_form import parse_stops, stop_text

    stops = ("<end_of_turn>", "\n\n", "a\\nb", "tab\there")
    assert stop_text(stops) == "<end_of_turn> | \\n\\n | a\\\\nb | tab\\there"
    assert parse_stops(stop_text(stops)) == stops
