"""The Server page's "Launch a coding agent" card: each agent shows whether it is installed (how it was found, or
the install command to copy), "Check again" sees one installed meanwhile; "Open in terminal" starts the server when
it is not running and opens ``llm-workstation launch`` in the terminal emulator as argv, which aims the agent (a
stand-in on PATH) at this server, key included, and its request lands in the page's log; without a terminal a notice
says so and offers the command to copy; the agent tabs of the snippets name the real URL, model and key."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtGui import QGuiApplication

from app.core.params import LoadParams
from app.services.api.events import ApiState
from app.services.engines.entries import EngineKind
from tests.support.fake_agents import install_fake_agent, install_fake_terminal, read_record
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.layout import assert_fits
from tests.support.page_frame import themed
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A PATH of stand-ins only (no real agent, npx or terminal), and a home without npm's cache."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("TERMINAL", "npm_config_cache", "NPM_CONFIG_CACHE", "LLMW_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_AGENT_RECORD", str(tmp_path / "agent.json"))
    monkeypatch.setenv("FAKE_TERMINAL_RECORD", str(tmp_path / "terminal.json"))
    return folder


@pytest.fixture
def make_page(make_framed_page):
    from app.ui.pages.server.page import ServerPage

    return lambda: make_framed_page(ServerPage)


def test_each_agent_says_whether_it_is_installed_and_how_to_install_it(qloop, make_page, bin_dir):
    install_fake_agent(bin_dir, "claude")
    page = make_page()
    rows = page.agents.rows
    assert all(row.status.text() == "Checking…" for row in rows.values())  # the lookup runs off the Qt thread
    qloop.run_until_complete(page.agents.checking)
    assert "Installed" in rows["claude"].status.text() and rows["claude"].open.isEnabled()
    assert rows["claude"].copy_install.isHidden()
    for agent_id, command in (("codex", "npm install -g @openai/codex"), ("opencode", "npm install -g opencode-ai")):
        row = rows[agent_id]
        assert "Not installed" in row.status.text() and command in row.status.text()
        assert not row.open.isEnabled() and command in row.open.toolTip() and not row.copy_install.isHidden()
        row.copy_install.click()
        assert QGuiApplication.clipboard().text() == command
    install_fake_agent(bin_dir, "codex")
    qloop.run_until_complete(page.agents.refresh())  # "Check again"
    assert "Installed" in rows["codex"].status.text() and rows["codex"].open.isEnabled()


def test_open_in_terminal_starts_the_server_and_aims_the_agent_at_it(qloop, make_page, bin_dir, tmp_path):
    install_fake_agent(bin_dir, "claude")
    install_fake_terminal(bin_dir)
    gguf = write_tiny_gguf(tmp_path / "agent-model.gguf", name="Agent Model")

    async def scenario():
        page = make_page()
        await page.workstation.host.load(str(gguf), LoadParams(n_ctx=256))
        page.port.setValue(0)
        page.key.setText("k-agent-page")
        page.key.editingFinished.emit()
        assert page.workstation.api.state is ApiState.STOPPED
        await page.agents.checking
        page.agents.rows["claude"].open.click()
        await until(lambda: (tmp_path / "terminal.json").exists(), 60)
        assert "opened in a terminal" in page.notices.text()
        await until(lambda: (tmp_path / "agent.json").exists(), 120)
        url = page.url
        assert url is not None  # the button started the server first
        terminal = read_record(tmp_path / "terminal.json")
        port = url.rsplit(":", 1)[1]
        assert terminal["argv"][1:] == ["-e", sys.executable, "-m", "app", "launch", "claude", "--port", port,
                                        "--keep-open"]  # fmt: skip
        assert terminal["env_key"] == "k-agent-page"  # the key of the running server, not on the command line
        agent = read_record(tmp_path / "agent.json")
        assert agent["env"]["ANTHROPIC_BASE_URL"] == url and agent["env"]["ANTHROPIC_MODEL"] == "Agent Model"
        assert agent["status"] == 200, agent
        await until(lambda: any(_cell(page, row, "Endpoint") == "messages" for row in range(page.table.rowCount())), 30)
        await page.toggle()
        await page.workstation.host.unload(EngineKind.LLAMACPP)

    qloop.run_until_complete(scenario())


def test_without_a_terminal_a_notice_offers_the_command(qloop, make_page, bin_dir):
    install_fake_agent(bin_dir, "claude")

    async def scenario():
        page = make_page()
        page.port.setValue(0)
        assert await page.launch_agent("claude") is None
        port = page.url.rsplit(":", 1)[1]
        shown = page.notices.text()
        assert "No terminal emulator was found" in shown and f"llm-workstation launch claude --port {port}" in shown
        page.notices.run_action("agent")
        assert QGuiApplication.clipboard().text() == f"llm-workstation launch claude --port {port}"
        await page.toggle()

    qloop.run_until_complete(scenario())


def test_the_agent_snippets_name_the_running_servers_url_model_and_key(qloop, make_page, bin_dir):
    from app.services.agents.agents import AGENTS

    async def scenario():
        page = make_page()
        page.port.setValue(0)
        page.key.setText("k-snippet")
        page.key.editingFinished.emit()
        await page.toggle()
        names = [page.snippets.tabText(i) for i in range(page.snippets.count())]
        assert names[-3:] == [agent.name for agent in AGENTS]
        for agent in AGENTS:
            page.snippets.setCurrentIndex(names.index(agent.name))
            text = page.copy_snippet()
            assert QGuiApplication.clipboard().text() == text
            lines = [line.rstrip("\\").strip() for line in text.splitlines()]
            assert page.url in text and "k-snippet" in text and agent.executable in lines
            assert f"llm-workstation launch {agent.id} --port {page.url.rsplit(':', 1)[1]})" in text  # no model yet
        await page.toggle()

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("palette", ["light", "dark"])
def test_the_page_with_the_agents_card_fits_a_small_laptop(qloop, make_page, bin_dir, palette):
    with themed(palette):
        page = make_page()
        qloop.run_until_complete(page.agents.checking)  # the longest texts: the install commands
        assert_fits(page)


def _cell(page, row: int, column: str) -> str:
    from app.ui.pages.server.page import COLUMNS

    item = page.table.item(row, COLUMNS.index(column))
    return item.text() if item is not None else ""
