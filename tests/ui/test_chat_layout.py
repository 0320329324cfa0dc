"""The chat page fits a small laptop (1024×700) in every state — empty, model loaded, notices showing, reply
streaming — in both palettes, with the chats list and the settings drawer open (the widest case)."""

from __future__ import annotations

import shutil

import pytest

from app.core.params import SamplingParams
from tests.support.layout import assert_fits
from tests.support.page_frame import themed
from tests.support.waiting import until

LONG = "a-model-file-with-a-very-long-name-that-keeps-going-and-going-well-past-any-sensible-width"


@pytest.fixture(params=["light", "dark"])
def theme(request):
    with themed(request.param):
        yield request.param


async def _wide_open_window(make_window):
    window = await make_window()
    window.resize(1024, 700)
    panel = window.chat_panel
    panel.set_chats_open(True)
    panel.set_drawer_open(True)
    assert_fits(window)
    return window, panel


def test_empty_chat_fits(qloop, make_window, theme):
    async def scenario():
        window, panel = await _wide_open_window(make_window)
        assert panel.empty_state.isVisible() and panel.drawer.isVisible() and panel.chats_column.isVisible()
        window.resize(1366, 768)
        assert_fits(window)

    qloop.run_until_complete(scenario())


def test_loaded_model_with_a_long_name_fits(qloop, make_window, theme, tiny_gguf, tmp_path):
    long_model = tmp_path / f"{LONG}.gguf"
    shutil.copy(tiny_gguf, long_model)

    async def scenario():
        window, panel = await _wide_open_window(make_window)
        assert await panel.load_and_wait(str(long_model))
        assert "Loaded in" in panel.model_bar.elapsed.full_text()
        window.status.show_model(panel.workspace.model)
        assert_fits(window)
        assert window.width() <= 1024  # the window did not widen itself

    qloop.run_until_complete(scenario())


def test_notices_and_banners_fit(qloop, make_window, theme):
    async def scenario():
        window, panel = await _wide_open_window(make_window)
        for level in ("info", "warning", "error"):
            panel.show_notice(f"A {level} notice with a long explanation that keeps going. " * 4, level, key=level)
        panel.edit_banner.show()
        panel.system_prompt.setPlainText("Be brief and exact. " * 30)
        panel.system_prompt.set_open(True)
        panel.composer.input.setPlainText("a long message\n" * 30)
        panel.composer.show_context(4000, 4096)
        assert panel.composer.meter_level() == "warning"
        assert_fits(window)

    qloop.run_until_complete(scenario())


def test_streaming_reply_fits(qtbot, qloop, make_window, theme, long_context_gguf):
    async def scenario():
        window, panel = await _wide_open_window(make_window)
        assert await panel.load_and_wait(str(long_context_gguf))
        panel.sampling.set_params(SamplingParams(max_tokens=400, temperature=0.0))
        panel.send_text("stream a long reply")
        await until(lambda: panel.session.generating and len(panel.view.toPlainText()) > 40)
        assert panel.composer.generating and panel.composer.send_button.accessibleName() == "Stop"
        assert_fits(window)
        panel.stop()
        await until(lambda: not panel.session.generating)
        assert panel.composer.send_button.accessibleName() == "Send"

    qloop.run_until_complete(scenario())


def test_the_drawer_puts_the_model_first_and_the_chat_last(qloop, make_window):
    """Model and preset first, then sampling and context; the chat's tools and "When the context is full" last."""
    from PySide6.QtWidgets import QLabel, QScrollArea

    async def scenario():
        window = await make_window()
        drawer = window.chat_panel.drawer
        window.chat_panel.set_drawer_open(True)
        body = drawer.findChild(QScrollArea).widget()
        body.layout().activate()
        sections = sorted((label.y(), label.text()) for label in body.findChildren(QLabel)
                          if label.property("role") == "section" and label.parentWidget() is body)  # fmt: skip
        assert [text for _y, text in sections] == ["This model", "Sampling", "Context and loading", "This chat"]
        parts = [drawer.model_name, drawer.presets, drawer.sampling, drawer.load, drawer.tools, drawer.overflow]
        tops = [part.y() for part in parts]
        assert tops == sorted(tops) and len(set(tops)) == len(tops), tops

    qloop.run_until_complete(scenario())
