"""The main window as a whole: navigation, panels, settings flow, log dock, status bar."""

from __future__ import annotations

import json
import logging

import pytest

from app.services.engines.events import VllmEndpoint
from tests.support.waiting import until


def _engine(panel):
    """The engine the chat page's chats run on now."""
    return panel.host.engine(panel.workspace.engine)


def test_navigation_shows_every_panel(qloop, make_window):
    async def scenario():
        window = await make_window()
        names = [window.nav.item(i).text() for i in range(window.nav.count())]
        assert names == [
            "Chat", "Models", "Modelfiles", "vLLM", "Batch", "Bench", "Documents", "Monitor", "API server", "Settings"
        ]  # fmt: skip
        for row, name in enumerate(names):
            window.nav.setCurrentRow(row)
            page = window.pages.currentWidget()
            assert page.objectName() == f"{name.lower().replace(' ', '_')}_page"

    qloop.run_until_complete(scenario())


def test_settings_page_saves_and_applies(qloop, make_window, isolated_home):
    async def scenario():
        window = await make_window()
        window.open_settings()
        page = window.settings_page
        assert page.isVisible()
        page.loading.n_ctx.setValue(8192)
        page.sampling.temperature.box.setValue(0.3)
        page.save()
        settings_file = window.workstation.paths.settings_file
        await until(lambda: settings_file.exists())
        saved = json.loads(settings_file.read_text())
        assert saved["load"]["n_ctx"] == 8192
        assert window.workstation.settings.load.n_ctx == 8192
        assert abs(window.chat_panel.sampling.temperature.value() - 0.3) < 1e-9

    qloop.run_until_complete(scenario())


def test_log_dock_shows_app_logs(qloop, make_window):
    async def scenario():
        window = await make_window()
        window.log_dock.toggleViewAction().trigger()
        assert window.log_dock.isVisible()
        logging.getLogger("app.test").warning("something the user should see")
        await until(lambda: "something the user should see" in window.log_viewer.visible_text())

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("content", ["{broken", "[" * 100_000])
def test_broken_settings_file_is_kept_and_explained(qloop, make_window, isolated_home, content):
    from app.services.paths import app_paths

    paths = app_paths().ensure()
    paths.settings_file.write_text(content)

    async def scenario():
        window = await make_window()
        assert window.chat_panel.notice.isVisible()
        assert "Cannot read the settings file" in window.chat_panel.notice.text()
        await window.workstation.settings_saved()
        assert paths.settings_file.read_text() == content

    qloop.run_until_complete(scenario())


def test_status_bar_switcher_moves_the_chat_to_another_engine(qloop, make_window, tiny_gguf):
    from PySide6.QtWidgets import QMenu

    from tests.support.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer(models=("tiny-llama",)) as fake:

        async def scenario():
            window = await make_window()
            panel = window.chat_panel
            panel.model_bar.select(str(tiny_gguf))
            panel.host.offer_vllm(VllmEndpoint(fake.base_url, "tiny-llama", None, "remote"))
            window.status.backend_label.click()
            menu = window.findChildren(QMenu)[-1]
            labels = [a.text() for a in menu.actions()]
            assert "vLLM · tiny-llama" in labels and tiny_gguf.name in labels
            next(a for a in menu.actions() if a.text() == "vLLM · tiny-llama").trigger()
            await until(lambda: str(panel.workspace.engine) == "vllm" and _engine(panel).model is not None)
            assert window.status.backend_label.text() == "vLLM: ready"
            menu.close()

        qloop.run_until_complete(scenario())
