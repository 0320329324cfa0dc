"""The Ollama part of the Models page, offscreen, against FakeOllama through the official client (real HTTP)."""

from __future__ import annotations

import logging

import pytest
import shiboken6
from PySide6.QtWidgets import QApplication, QLabel

from app.ui.tasks import running_tasks
from tests.support.fake_ollama import FakeOllama
from tests.support.waiting import until

GB = 1_000_000_000


async def _idle() -> None:
    """Let every task the panel started finish (none may outlive the test's event loop)."""
    await until(lambda: not running_tasks(), timeout=60)


@pytest.fixture
def fake():
    with FakeOllama() as server:
        yield server


@pytest.fixture
def make_panel(qloop, qtbot):
    """``await make_panel(host)`` builds a shown, started panel on an isolated home."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.models.ollama import OllamaModelsPanel

    panels = []

    async def make(host: str):
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        context.update_settings(ollama_host=host)
        panel = OllamaModelsPanel(context)
        qtbot.addWidget(panel)
        panel.resize(1000, 700)
        panel.show()
        panels.append(panel)
        await panel.start()
        await _idle()
        return panel

    yield make

    async def finish():
        for panel in panels:  # pytest-qt may have closed and deleted it already (its teardown hook runs first)
            if shiboken6.isValid(panel):
                panel.hide()  # stops the memory timer
        await _idle()
        for panel in panels:
            await panel.workstation.close()  # the shared Ollama client among what it closes

    qloop.run_until_complete(finish())


def _column(table, column: int = 0) -> list[str]:
    return [table.item(row, column).text() for row in range(table.rowCount())]


def _select(panel, name: str) -> None:
    panel.installed_table.selectRow(_column(panel.installed_table).index(name))


def _error_dialogs() -> list:
    from app.ui.dialogs.error_dialog import ErrorDialog

    return [w for w in QApplication.topLevelWidgets() if isinstance(w, ErrorDialog) and w.isVisible()]


def test_not_running_is_a_calm_state_and_check_again_finds_it(qloop, make_panel, caplog):
    host = FakeOllama.unused_host()
    server = FakeOllama()

    async def scenario():
        with caplog.at_level(logging.INFO):
            panel = await make_panel(host)
            assert panel.status_label.text() == f"Ollama is not running at {host}: start it with `ollama serve`."
            assert panel.recheck_button.isVisible() and not panel.body.isVisible()
            assert panel.card.isVisible() and panel.install_button.isVisible()  # what it is, how to start, install
            assert "separate app" in panel.card.findChild(QLabel, "ollama_card_text").text()
            assert panel.installed_table.rowCount() == 0 and not panel.ollama_running
            panel._tick()  # the memory timer does nothing while Ollama is away: no polling, no notices
            assert not running_tasks()
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert not _error_dialogs()
            server.port = int(host.rsplit(":", 1)[1])  # now Ollama starts at that address
            server.add_model("llama3.2")
            server.start()
            panel.recheck_button.click()
            await until(lambda: panel.ollama_running)
            await _idle()
            assert panel.running_label.text() == f"● Ollama 0.12.6 is running at {host}"
            assert not panel.recheck_button.isVisible() and not panel.card.isVisible() and panel.body.isVisible()
            assert _column(panel.installed_table) == ["llama3.2:latest"]

    try:
        qloop.run_until_complete(scenario())
    finally:
        server.stop()


def test_installed_and_running_tables(qloop, fake, make_panel):
    fake.add_model("llama3.2", size=2 * GB, parameter_size="3.2B", quantization_level="Q4_K_M")
    fake.add_model("qwen3:4b", size=2_500_000_000, family="qwen3", parameter_size="4.0B", quantization_level="Q8_0")
    fake.vram_fraction = 0.5
    fake.load("llama3.2", num_ctx=8192)

    async def scenario():
        panel = await make_panel(fake.host)
        assert sorted(_column(panel.installed_table)) == ["llama3.2:latest", "qwen3:4b"]
        row = _column(panel.installed_table).index("qwen3:4b")
        cells = [panel.installed_table.item(row, c).text() for c in range(6)]
        assert cells[:5] == ["qwen3:4b", "2.3 GiB", "qwen3", "4.0B", "Q8_0"]
        assert cells[5] == "less than a minute ago"
        running = [panel.running_table.item(0, c).text() for c in range(6)]
        size = 2 * GB + 8192 * 1024
        assert running[:5] == ["llama3.2:latest", "1.9 GiB", "957.7 MiB", "50%", "8,192"]
        assert running[5].startswith("in ") and "minute" in running[5]
        assert panel.running_table.item(0, 1).toolTip() == f"{size:,} bytes"
        assert not panel.empty.isVisible() and panel.running_table.isVisible() and not panel.running_empty.isVisible()

    qloop.run_until_complete(scenario())


def test_memory_is_polled_only_while_visible(qloop, fake, make_panel):
    fake.add_model("llama3.2")
    fake.add_model("qwen3:4b")

    async def scenario():
        panel = await make_panel(fake.host)
        assert panel.timer.isActive() and panel.running_table.rowCount() == 0
        panel.timer.setInterval(20)
        fake.load("qwen3:4b")
        await until(lambda: _column(panel.running_table) == ["qwen3:4b"])
        panel.hide()
        assert not panel.timer.isActive()
        await _idle()
        polls = len(fake.requests_to("/api/ps"))
        fake.load("llama3.2")
        await until(lambda: not running_tasks())
        assert len(fake.requests_to("/api/ps")) == polls and panel.running_table.rowCount() == 1
        panel.show()  # a later show asks again, and polling resumes
        assert panel.timer.isActive()
        await until(lambda: panel.running_table.rowCount() == 2)
        fake.stop()  # Ollama quits while the panel is open: the calm message, once
        await until(lambda: not panel.ollama_running)
        await _idle()
        assert panel.status_label.text().startswith("Ollama is not running at")
        assert panel.running_table.rowCount() == 0 and panel.recheck_button.isVisible()

    qloop.run_until_complete(scenario())


def test_empty_ollama_puts_the_pull_box_first_with_suggestions(qloop, fake, make_panel):
    async def scenario():
        panel = await make_panel(fake.host)
        assert panel.empty.isVisible() and panel.installed_table.rowCount() == 0
        assert panel.empty.title.text() == "Ollama has no models yet"
        assert not panel.chat_button.isVisible() and not panel.delete_button.isVisible()  # no row, no row actions
        assert panel.running_empty.isVisible() and not panel.running_table.isVisible()
        panel.empty.button("qwen3:4b").click()
        assert panel.pull_name.text() == "qwen3:4b" and panel.pull_button.isEnabled()

    qloop.run_until_complete(scenario())


def test_delete_asks_inline_then_removes(qloop, fake, make_panel):
    fake.add_model("llama3.2")
    fake.add_model("qwen3:4b")

    async def scenario():
        panel = await make_panel(fake.host)
        _select(panel, "qwen3:4b")
        panel.delete_button.click()
        assert panel.confirm_bar.isVisible() and "qwen3:4b" in panel.confirm_text.text()
        panel.confirm_cancel_button.click()
        assert not panel.confirm_bar.isVisible() and fake.model("qwen3:4b") is not None
        panel.delete_button.click()
        panel.confirm_delete_button.click()
        await until(lambda: _column(panel.installed_table) == ["llama3.2:latest"])
        await _idle()
        assert fake.model("qwen3:4b") is None
        assert panel.notice.text() == "Deleted qwen3:4b." and panel.notice.isVisible()
        assert not _error_dialogs()

    qloop.run_until_complete(scenario())


def test_chat_with_it_emits_the_ollama_entry(qloop, fake, make_panel):
    fake.add_model("llama3.2")

    async def scenario():
        panel = await make_panel(fake.host)
        entries: list[str] = []
        panel.chat_requested.connect(entries.append)
        panel.chat_button.click()  # nothing selected: nothing asked
        _select(panel, "llama3.2:latest")
        panel.chat_button.click()
        assert entries == ["ollama:llama3.2:latest"]

    qloop.run_until_complete(scenario())


def test_pull_shows_progress_then_the_model_is_installed(qloop, fake, make_panel):
    fake.add_remote("qwen3:4b", [3_000_000_000, 1_000_000])
    fake.chunk_delay = 0.03

    async def scenario():
        panel = await make_panel(fake.host)
        panel.pull_name.setText("qwen3:4b")
        panel.pull_button.click()
        assert not panel.pull_button.isEnabled() and panel.pull_cancel.isVisible()
        bar = panel.pull_progress
        await until(lambda: bar.isVisible() and bar.maximum() == 1000 and 0 < bar.value() < 1000)
        assert " of 2.8 GiB" in panel.pull_status.text() and panel.pull_status.text().startswith("pulling ")
        await until(lambda: "qwen3:4b" in _column(panel.installed_table))
        await _idle()
        assert panel.pull_status.text().startswith("Pulled qwen3:4b")
        assert not bar.isVisible() and not panel.pull_cancel.isVisible() and panel.pull_button.isEnabled()
        assert panel.pull_name.text() == ""

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"error": "write /models/blobs: no space left on device"}, "no space left on device"),
        ({"die": True}, "The connection to Ollama at"),
    ],
    ids=["error-line", "server-died"],
)
def test_a_failed_pull_says_why_and_installs_nothing(qloop, fake, make_panel, fault, reason):
    fake.add_remote("qwen3:4b", [4_000_000, 1_000_000])
    fake.fail("/api/pull", after=3, **fault)

    async def scenario():
        panel = await make_panel(fake.host)
        panel.pull_name.setText("qwen3:4b")
        task = panel.pull()
        await until(task.done)
        await _idle()
        assert panel.pull_status.text().startswith("qwen3:4b was not pulled: ")
        assert reason in panel.pull_status.text()
        assert not panel.pull_progress.isVisible() and panel.pull_button.isEnabled()
        assert panel.installed_table.rowCount() == 0 and fake.model("qwen3:4b") is None
        assert panel.ollama_running and not _error_dialogs()

    qloop.run_until_complete(scenario())


def test_pull_of_an_unknown_model_and_cancel(qloop, fake, make_panel):
    fake.add_remote("big", [50_000_000])
    fake.chunk_delay = 0.05

    async def scenario():
        panel = await make_panel(fake.host)
        panel.pull_name.setText("no-such-model")
        await until(panel.pull().done)
        assert "could not find no-such-model" in panel.pull_status.text()
        panel.pull_name.setText("big")
        task = panel.pull()
        await until(lambda: panel.pull_progress.maximum() == 1000)
        panel.pull_cancel.click()
        await until(task.done)
        await _idle()
        assert task.cancelled() and panel.pull_status.text().startswith("Pull of big cancelled")
        assert not panel.pull_progress.isVisible() and panel.pull_button.isEnabled()
        assert fake.model("big") is None and panel.installed_table.rowCount() == 0

    qloop.run_until_complete(scenario())


def test_settings_changed_reads_the_host_again(qloop, fake, make_panel):
    fake.add_model("llama3.2")

    async def scenario():
        panel = await make_panel(FakeOllama.unused_host())
        assert not panel.ollama_running
        panel.workstation.update_settings(ollama_host=fake.host)  # the page follows the settings itself
        await until(lambda: panel.ollama_running)
        await _idle()
        assert _column(panel.installed_table) == ["llama3.2:latest"]

    qloop.run_until_complete(scenario())


def test_install_opens_the_download_page(qloop, make_panel):
    from PySide6.QtCore import QObject, QUrl, Slot
    from PySide6.QtGui import QDesktopServices

    class Catcher(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.urls: list[str] = []

        @Slot(QUrl)
        def open(self, url: QUrl) -> None:
            self.urls.append(url.toString())

    catcher = Catcher()
    QDesktopServices.setUrlHandler("https", catcher, "open")
    try:

        async def scenario():
            panel = await make_panel(FakeOllama.unused_host())
            panel.install_button.click()

        qloop.run_until_complete(scenario())
    finally:
        QDesktopServices.unsetUrlHandler("https")
    assert catcher.urls == ["https://ollama.com/download"]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_ollama_page_fits_a_small_laptop_in_every_state(qloop, make_panel, theme):
    from PySide6.QtWidgets import QTabWidget

    from tests.support.layout import assert_fits
    from tests.support.page_frame import themed, window_frame

    async def scenario():
        with themed(theme):
            for state in ("not-running", "empty", "full"):
                server = FakeOllama()
                if state == "full":
                    for index in range(25):
                        server.add_model(f"{'a-really-long-model-name-' * 3}{index}:latest", size=3 * GB)
                    server.load(f"{'a-really-long-model-name-' * 3}0:latest", num_ctx=8192)
                host = FakeOllama.unused_host() if state == "not-running" else None
                if host is None:
                    server.start()
                try:
                    panel = await make_panel(host or server.host)
                    tabs = QTabWidget()
                    tabs.addTab(panel, "Ollama")
                    panel.show()
                    with window_frame(tabs) as frame:
                        await _idle()
                        assert panel.card.isVisible() is (state == "not-running")
                        if state == "full":
                            _select(panel, _column(panel.installed_table)[0])
                            panel.ask_delete()
                            panel.notice.show_notice("A long notice about Ollama " * 8, level="error")
                        assert_fits(frame)
                        frame.resize(1366, 768)
                        assert_fits(frame)
                    panel.setParent(None)
                    panel.hide()
                    await _idle()
                finally:
                    if host is None:
                        server.stop()

    qloop.run_until_complete(scenario())


def test_the_ollama_and_modelfile_pages_share_the_workstations_one_client(qloop, fake, make_panel):
    """Both pages talk to Ollama through ``workstation.ollama``: one client for the host, lent to each."""
    from app.ui.pages.modelfiles.panel import ModelfilePanel

    fake.add_model("llama3.2")

    async def scenario():
        panel = await make_panel(fake.host)
        modelfiles = ModelfilePanel(panel.workstation)
        try:
            await modelfiles.start()
            await until(lambda: modelfiles.ollama_running and "llama3.2:latest" in modelfiles.form.from_candidates())
            await panel.recheck()
            state = panel.workstation.ollama.snapshot()
            assert state.host == fake.host and state.made == 1 and state.lent >= 4 and state.in_use == 0
            assert _column(panel.installed_table) == ["llama3.2:latest"]
        finally:
            await _idle()
            await modelfiles.shutdown()
            modelfiles.deleteLater()

    qloop.run_until_complete(scenario())
