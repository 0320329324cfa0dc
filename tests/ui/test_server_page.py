"""The Server page, a view of ``workstation.api``: start on a free port, the real server answers (health, models, the
key), the live log gains a row per request, the snippets name the URL and the key, LAN without a key is refused
with the reason, settings persist, Stop frees the port, the page fits a small laptop in both palettes, the
snippets run when pasted (every value quoted), the status bar shows the running server, the server keeps serving
while another page is shown (its log intact when the page is shown again, or built again), and it autostarts
with the window without its page being built."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess

import httpx
import pytest

from app.core.settings import Settings, load_settings, save_settings
from app.services.api.events import ApiState
from app.services.engines.entries import EngineKind
from tests.support.layout import assert_fits
from tests.support.page_frame import themed
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def make_page(make_framed_page):
    from app.ui.pages.server.page import ServerPage

    return lambda: make_framed_page(ServerPage)


def _cell(page, row: int, column: str) -> str:
    from app.ui.pages.server.page import COLUMNS

    item = page.table.item(row, COLUMNS.index(column))
    return item.text() if item is not None else ""


def test_start_serve_log_and_stop(qloop, make_page):
    async def scenario():
        page = make_page()
        assert page.url_label.text() == "Not running." and not page.copy_url.isEnabled()
        assert page.empty_log.isVisible() and page.table.rowCount() == 0
        page.port.setValue(0)  # a free port
        page.key.setText("sk-page-test")
        page.key.editingFinished.emit()
        await page.toggle()
        url = page.url
        assert url is not None and url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        assert url in page.url_label.text() and page.start_button.text() == "Stop server"
        assert not page.port.isEnabled() and not page.key.isEnabled()
        assert all(url in text.toPlainText() for text in page.snippet_texts)
        assert "sk-page-test" in page.copy_snippet()
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/health")).status_code == 200
            refused = await client.get("/v1/models")
            assert refused.status_code == 401 and "error" in refused.json()
            listed = await client.get("/v1/models", headers={"Authorization": "Bearer sk-page-test"})
            assert listed.status_code == 200 and listed.json()["object"] == "list"
            by_header = await client.get("/v1/models", headers={"x-api-key": "sk-page-test"})
            assert by_header.status_code == 200
        await until(lambda: page.table.rowCount() >= 3, 5)
        assert not page.empty_log.isVisible()
        assert _cell(page, 0, "Endpoint") == "models" and _cell(page, 0, "Status").startswith("200")
        assert any(_cell(page, row, "Status").startswith("401") for row in range(page.table.rowCount()))
        assert _cell(page, 0, "Client").startswith("127.0.0.1")
        await page.toggle()
        assert page.workstation.api.state is ApiState.STOPPED and page.url is None
        assert page.url_label.text() == "Not running." and page.port.isEnabled()
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(timeout=5) as client:
                await client.get(f"{url}/health")
        await page.workstation.settings_saved()
        saved = load_settings(page.workstation.paths.settings_file)
        assert saved.api_key == "sk-page-test" and saved.api_port == 0

    qloop.run_until_complete(scenario())


def test_network_without_a_key_is_refused_with_the_reason(qloop, make_page):
    async def scenario():
        page = make_page()
        page.host_box.setCurrentIndex(page.host_box.findData("0.0.0.0"))
        page.key.clear()
        page.port.setValue(0)
        await page.toggle()
        assert page.workstation.api.state is ApiState.FAILED and page.start_button.isEnabled()
        shown = page.notices.text()
        assert "key" in shown.lower(), shown
        assert page.url_label.text() == "Not running."

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("palette", ["light", "dark"])
def test_page_fits_a_small_laptop(qloop, make_page, palette):
    with themed(palette):
        page = make_page()
        assert_fits(page)
        page.window().resize(1024, 700)
        assert page.window().width() == 1024 and page.window().height() == 700


ODD_KEY = "sk-it's a $key"  # a quote, a space and a dollar: each breaks an unquoted shell line


def test_the_snippets_are_valid_shell_and_python_for_any_name_and_key(tmp_path):
    from app.services.agents.agents import CLAUDE
    from app.ui.pages.server.snippets import SNIPPETS, agent_snippet

    model = "Gemma 3 270M (it's $HOME)"
    for name, make in SNIPPETS:
        for key in (None, ODD_KEY):
            text = make("http://127.0.0.1:8417", model, key)
            if name.startswith("Python"):
                compile(text, name, "exec")  # raises on a broken literal
            else:
                checked = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
                assert checked.returncode == 0, (name, text, checked.stderr)
    pasted = agent_snippet(CLAUDE, "http://127.0.0.1:8417", model, ODD_KEY)
    assert pasted.startswith("# Claude Code") and "llm-workstation launch claude" in pasted.splitlines()[0]
    claude = tmp_path / "bin" / "claude"  # a stand-in that shows what it was given
    claude.parent.mkdir()
    claude.write_text('#!/bin/sh\nprintf "%s\\n" "$ANTHROPIC_MODEL" "$ANTHROPIC_AUTH_TOKEN" "$ANTHROPIC_BASE_URL"\n')
    claude.chmod(0o755)
    shown = subprocess.run(["bash", "-c", pasted], text=True, capture_output=True, check=True,
                           env={**os.environ, "PATH": f"{claude.parent}:{os.environ['PATH']}"})  # fmt: skip
    assert shown.stdout.splitlines() == [model, ODD_KEY, "http://127.0.0.1:8417"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_the_curl_snippet_pasted_into_bash_gets_a_reply_from_the_running_server(qloop, make_page, tmp_path):
    """The snippet as the page shows it, for a model whose name has spaces and a key with a quote, against the
    real server on a tiny GGUF the app has loaded: HTTP 200 and a chat completion."""
    from app.core.params import LoadParams
    from tests.support.gguf_factory import write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "spaced.gguf", name="Tiny Chat 3 270M")

    async def scenario():
        page = make_page()
        await page.workstation.host.load(str(gguf), LoadParams(n_ctx=256))
        page.port.setValue(0)
        page.key.setText(ODD_KEY.replace(" ", "-"))  # a key has no spaces (the server refuses them)
        await page.toggle()
        assert page.url is not None
        curl = page.snippet_texts[0].toPlainText()
        assert "Tiny Chat 3 270M" in curl and page.url in curl
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", curl + " -sS -w '\\n%{http_code}'", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        body, _, status = out.decode().rpartition("\n")
        assert status == "200", (status, body, err.decode())
        reply = json.loads(body)
        assert reply["object"] == "chat.completion" and reply["model"] == "Tiny Chat 3 270M"
        await page.toggle()
        await page.workstation.host.unload(EngineKind.LLAMACPP)

    qloop.run_until_complete(scenario())


def test_the_status_bar_shows_the_running_server_and_its_requests(qloop, make_window):
    async def scenario():
        window = await make_window()
        item = window.status.server_label
        assert not item.isVisible()
        page = window.open_path("server")
        page.port.setValue(0)
        await page.toggle()
        url = page.url
        assert item.isVisible() and url.split("://")[1] in item.text() and "0 requests" in item.text()
        assert url in window.open_path("batch").app_detail.full_text()  # the batch runner can target it
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/v1/models")).status_code == 200
        await until(lambda: "1 request" in item.text(), 5)
        window.show_page("Chat")
        item.click()
        assert window.pages.currentWidget() is page
        await page.toggle()
        assert not item.isVisible() and "not running" in window.batch_panel.app_detail.full_text()

    qloop.run_until_complete(scenario())


def test_the_server_keeps_serving_while_another_page_is_shown_and_its_log_is_intact(qloop, make_window):
    from app.ui.pages.server.page import ServerPage

    async def scenario():
        window = await make_window()
        page = window.open_path("server")
        page.port.setValue(0)
        await page.toggle()
        url = page.url
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/v1/models")).status_code == 200
            window.show_page("Chat")
            assert not page.isVisible()
            for _ in range(2):  # answered while its page is hidden
                assert (await client.get("/v1/models")).status_code == 200
        await until(lambda: window.workstation.api.snapshot().requests == 3, 10)
        window.show_page("API server")
        assert window.pages.currentWidget() is page and page.url == url
        assert page.table.rowCount() == 3 and all(_cell(page, r, "Status").startswith("200") for r in range(3))
        again = ServerPage(window.workstation)  # a page built anew shows the same log (the service's)
        try:
            assert again.url == url and again.table.rowCount() == 3 and "Stop server" in again.start_button.text()
        finally:
            await again.shutdown()
            again.deleteLater()
        window.workstation.update_settings(api_idle_ttl_s=120.0)  # elsewhere (the Settings page): on the next start
        assert page.ttl.value() == 2 and "restart it to apply" in page.url_label.text() and page.url == url
        await page.toggle()

    qloop.run_until_complete(scenario())


def test_the_server_starts_with_the_window_without_its_page_being_built(qloop, make_window):
    from app.services.paths import app_paths

    save_settings(Settings(api_autostart=True, api_port=0), app_paths().ensure().settings_file)

    async def scenario():
        window = await make_window()
        await until(lambda: window.workstation.api.state is ApiState.SERVING, 20)
        url = window.workstation.api.url
        assert "server" not in window._widgets  # the page was never built
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/v1/models")).status_code == 200
        item = window.status.server_label
        await until(lambda: item.isVisible() and "1 request" in item.text(), 10)
        assert url in window.open_path("batch").app_detail.full_text()  # the batch runner can target it
        page = window.open_path("server")
        assert page.url == url and page.table.rowCount() == 1 and "Stop server" in page.start_button.text()
        await page.toggle()  # stopped on the loop: between tests the loop does not run

    qloop.run_until_complete(scenario())
