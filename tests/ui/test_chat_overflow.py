"""A chat outgrowing its context, in the window: the policy is chosen in the drawer and kept with the chat, the
reply sent without the oldest turns says so, and the status bar warns before the context is full."""

from __future__ import annotations

from app.core.chat.conversation import MessageStatus, OverflowPolicy
from app.core.params import SamplingParams
from tests.support.waiting import until
from tests.ui.test_chat_panel import _load, _messages, _reply_done, _send

LONG = "tell me about the weather in the mountains " * 6


def test_the_chosen_policy_is_kept_and_a_cut_reply_is_marked(qtbot, qloop, make_window, tiny_gguf):
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.set_drawer_open(True)
        await _load(panel, tiny_gguf)
        panel.drawer.load.n_ctx.setValue(256)  # saved for this model; Reload applies it
        panel.models.reload()
        await until(lambda: _engine_ctx(panel) == 256 and panel.models.loading.done())
        panel.sampling.set_params(SamplingParams(max_tokens=8, temperature=0.0))
        picker = panel.drawer.overflow
        assert picker.policy() is OverflowPolicy.DROP_OLDEST and "default" in picker.combo.currentText()
        assert "oldest turns" in picker.note.text()
        for i in range(6):
            _send(qtbot, panel, f"{i} {LONG}")
            await until(_reply_done(panel, 2 * (i + 1)))
        last = _messages(panel)[-1]
        assert last.status is MessageStatus.COMPLETE
        await until(lambda: "not sent to the model" in panel.view.toPlainText())

        picker.combo.setCurrentIndex(picker.combo.findData(str(OverflowPolicy.STOP)))
        picker.combo.activated.emit(picker.combo.currentIndex())
        assert "stops and asks" in picker.note.text()
        await until(lambda: panel.session.conversation.overflow is OverflowPolicy.STOP)
        for _ in range(100):  # saved by a task
            saved = await panel.session.store.load(panel.session.conversation.id)
            if saved.overflow is OverflowPolicy.STOP:
                break
        assert saved.overflow is OverflowPolicy.STOP

    qloop.run_until_complete(scenario())


def _engine_ctx(panel):
    model = panel.host.engine(panel.workspace.engine).model
    return model.n_ctx if model is not None else None


def test_the_status_bar_warns_before_the_context_is_full(qloop, make_window):
    async def scenario():
        window = await make_window()
        status = window.status
        from app.core.chat.overflow import when_full

        status.show_context(3000, 4096, False, when_full(OverflowPolicy.DROP_OLDEST))
        assert "nearly full" not in status.context_label.full_text()
        status.show_context(3400, 4096, False, when_full(OverflowPolicy.TRUNCATE_MIDDLE))
        assert status.context_label.full_text() == "Context: 3,400 / 4,096 (83%) · nearly full"
        assert "between the first and the latest" in status.context_label.toolTip()
        assert status.context_label.styleSheet()  # the warning colour

    qloop.run_until_complete(scenario())


def test_reload_right_after_a_change_uses_it_even_when_saving_is_slow(qloop, make_window, tiny_gguf, monkeypatch):
    """The drawer's settings are saved off the Qt thread; Reload waits for that save instead of reading the old
    settings (seen on a loaded machine: the model came back with its previous context size)."""
    import time

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.set_drawer_open(True)
        await _load(panel, tiny_gguf)
        store = panel.workspace.model_settings
        update = store.update

        def slow_update(entry, **changes):
            time.sleep(0.5)  # a busy disk or machine
            return update(entry, **changes)

        monkeypatch.setattr(store, "update", slow_update)
        first_load = panel.models.loading
        panel.drawer.load.n_ctx.setValue(768)  # llama.cpp rounds a context up to 256s
        panel.models.reload()
        await until(lambda: panel.models.loading is not first_load and panel.models.loading.done())
        assert _engine_ctx(panel) == 768

    qloop.run_until_complete(scenario())
