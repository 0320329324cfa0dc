"""Thinking in the chat page, as a person uses it, against the real worker: the drawer offers thinking on/off and an
effort only for a model whose template reads them, the choice is kept for that model, and a thinking reply shows
its thinking in a Thinking block above the answer."""

from __future__ import annotations

import pytest

from app.core.chat.thinking import ThinkingChoice
from app.core.params import SamplingParams
from tests.backends.test_thinking_engines import THINK_TEMPLATE
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.waiting import until
from tests.ui.test_chat_panel import _load, _messages, _reply_done, _send


@pytest.fixture(scope="module")
def think_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("ui-think") / "tiny-think.gguf"
    return write_tiny_gguf(path, chat_template=THINK_TEMPLATE, name="tiny-think", never_eos=True)


def test_the_drawer_offers_thinking_where_the_model_does_and_replies_show_it(qtbot, qloop, make_window,
                                                                             think_gguf, tiny_gguf):  # fmt: skip
    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        form = panel.drawer.thinking
        panel.set_drawer_open(True)
        await _load(panel, tiny_gguf)
        await until(lambda: not panel.host.generating(panel.workspace.engine))
        assert not form.isVisibleTo(panel.drawer)  # a plain ChatML template offers no switches

        await _load(panel, think_gguf)
        await until(lambda: form.isVisibleTo(panel.drawer))
        assert form.toggle.isVisibleTo(form) and form.effort.isVisibleTo(form)
        panel.sampling.set_params(SamplingParams(max_tokens=12, temperature=0.0))

        form.toggle.setCurrentIndex(form.toggle.findText("Off"))
        form.toggle.activated.emit(form.toggle.currentIndex())
        entry = str(think_gguf)
        await until(lambda: panel.workspace.settings_of(entry).thinking_choice == ThinkingChoice(False))
        _send(qtbot, panel, "hello there")
        await until(_reply_done(panel, 2))
        off = _messages(panel)[-1]
        assert off.content and not off.reasoning

        form.toggle.setCurrentIndex(form.toggle.findText("On"))
        form.toggle.activated.emit(form.toggle.currentIndex())
        await until(lambda: panel.workspace.settings_of(entry).thinking_choice == ThinkingChoice(True))
        _send(qtbot, panel, "and again")
        await until(_reply_done(panel, 4))
        on = _messages(panel)[-1]
        assert on.reasoning and not on.content  # random weights never close the block the template opened
        item = panel.view.message_widget(3)
        assert item is not None and item.thinking.isVisibleTo(item)
        assert item.thinking.toggle.text().startswith("▸ Thought for ") and "tokens" in item.thinking.toggle.text()
        panel.continue_reply()  # cut off mid-thought: nothing to continue, and the page says what to do
        assert "still thinking" in panel.notice_text() and not panel.session.generating

    qloop.run_until_complete(scenario())
