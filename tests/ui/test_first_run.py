"""First run to a good first reply, with real llama.cpp and the real starter model (the ``demo`` extra): a fresh
data folder, a click on an example opening with no model loaded — the starter model is written, loaded with its
shipped preset, and the opening sent — then every other example; each reply ends by itself (the end of text or a
stop sequence) within the preset's num_predict, with a fixed seed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from app.backends.llamacpp.repack import NO_REPACK_ENV
from app.core.chat.conversation import MessageStatus
from app.core.chat.formats import TEXT_CONTINUATION_FORMAT
from app.services import starter_model
from tests.support.waiting import until

pytest.importorskip(starter_model.PACKAGE)
pytestmark = pytest.mark.slow

SEED = 42
NUM_PREDICT = 200  # the starter preset's


def _reply_done(panel, count):
    def done():
        session = panel.session
        return session is not None and not session.generating and len(session.conversation.messages) >= count

    return done


def test_fresh_install_starter_examples_end_by_themselves(qtbot, qloop, make_window, monkeypatch):
    # Some VMs fault in llama.cpp's AMX kernels (see app/backends/llamacpp/repack.py); the replies do not depend on it.
    monkeypatch.setenv(NO_REPACK_ENV, "1")

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        settings = window.workstation.settings
        assert settings.recent_models == [] and panel.workspace.model is None
        settings.sampling = replace(settings.sampling, seed=SEED)  # the preset leaves the seed to the defaults
        empty = panel.empty_state
        assert empty.starter_button.isVisible() and not empty.examples_shown()

        replies = []
        for number, chip in enumerate(empty.chips):
            if number:
                panel.new_chat()
                await until(lambda: panel.session.conversation is not None and not panel.session.conversation.messages)
                assert empty.isVisible() and empty.examples_shown()
            qtbot.mouseClick(chip, Qt.MouseButton.LeftButton)
            await until(_reply_done(panel, 2), timeout=120)
            user, reply = panel.session.conversation.messages
            assert user.content == chip.prompt
            replies.append(reply)
            if number == 0:  # loaded on send: the starter model, with its preset
                assert starter_model.is_starter(panel.workspace.entry)
                assert panel.drawer.presets.currentText() == starter_model.PRESET_NAME
                assert panel.workspace.model.chat_format == TEXT_CONTINUATION_FORMAT
                sampling = panel.sampling.params()
                assert sampling.max_tokens == NUM_PREDICT and "\n\n" in sampling.stop and sampling.seed == SEED

        for chip, reply in zip(empty.chips, replies, strict=True):
            assert reply.status is MessageStatus.COMPLETE, (chip.prompt, reply.error)
            assert reply.stats.finish_reason == "stop", (chip.prompt, reply.stats, reply.content)
            assert 0 < reply.stats.completion_tokens < NUM_PREDICT, (chip.prompt, reply.stats)
            assert reply.content.strip(), chip.prompt
        chats = await panel.workstation.store.list_conversations()
        assert len(chats) == len(empty.chips)  # one per example, no empty chat saved

    qloop.run_until_complete(scenario())
