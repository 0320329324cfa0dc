"""Closing the window: a second close while its shutdown runs (a SIGTERM after the close button, a double click)
waits for that shutdown (it used to be accepted at once, and the app then quit with the shutdown half done); a
SIGTERM while a reply is written keeps the reply, saved as stopped."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.waiting import until
from tests.ui.test_chat_panel import _load, _send, _streamed_text


@pytest.fixture
def no_quit_on_close(qapp):
    """The window closes within the test: the app must not quit (that would stop the test's event loop)."""
    qapp.setQuitOnLastWindowClosed(False)
    yield
    qapp.setQuitOnLastWindowClosed(True)


def test_a_close_during_the_shutdown_waits_for_it(qloop, make_window, no_quit_on_close):
    async def scenario():
        window = await make_window()
        order = []
        close_context = window.workstation.close

        async def recorded_close():
            await close_context()
            order.append("engines and history closed")

        window.workstation.close = recorded_close
        window.close()  # the close button: the shutdown begins
        window.close()  # again, while it runs
        assert window.isVisible()
        await until(lambda: not window.isVisible())
        order.append("window closed")
        assert order == ["engines and history closed", "window closed"]

    qloop.run_until_complete(scenario())


def test_sigterm_while_a_reply_streams_keeps_it_saved_as_stopped(
    qtbot, qloop, make_window, long_context_gguf, no_quit_on_close
):
    """The window's SIGTERM path (as run_gui wires it) with a reply being written: the window closes the normal
    way and the history has the reply, stopped, with what was written of it."""
    from app.core.chat.conversation import MessageStatus, Role
    from app.core.params import SamplingParams
    from app.services.chat.history import ConversationStore
    from app.ui.app import close_on_quit
    from app.ui.lifecycle import QuitRequest

    request = QuitRequest()

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, long_context_gguf)
        # the whole context: still writing when the SIGTERM lands, even with both cores busy (2,000 were not)
        panel.sampling.set_params(SamplingParams(max_tokens=4000, temperature=0.0))
        _send(qtbot, panel, "a question")
        await _streamed_text(panel)
        chat_id = panel.session.conversation.id
        request.catch()
        close_on_quit(request, window)
        os.kill(os.getpid(), signal.SIGTERM)
        await until(lambda: not window.isVisible())
        store = ConversationStore(window.workstation.paths.conversations_db)
        try:
            user, reply = store.load(chat_id).messages
        finally:
            store.close()
        assert (user.role, user.content) == (Role.USER, "a question")
        assert reply.role is Role.ASSISTANT and reply.status is MessageStatus.STOPPED and reply.content

    try:
        qloop.run_until_complete(scenario())
    finally:
        request.requested = None  # handled: nothing to deliver again
        request.release()
