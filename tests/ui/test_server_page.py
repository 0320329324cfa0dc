"""The Server page: start on a free port, the real server answers (health, models, the key), the live log gains a
row per request, the snippets name the URL and the key, LAN without a key is refused with the reason, settings
persist, Stop frees the port, and the page fits a small laptop in both palettes."""

from __future__ import annotations

import httpx
import pytest

from app.core.settings import load_settings
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
        assert page.server is None and page.url_label.text() == "Not running." and page.port.isEnabled()
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(timeout=5) as client:
                await client.get(f"{url}/health")
        saved = load_settings(page.context.paths.settings_file)
        assert saved.api_key == "sk-page-test" and saved.api_port == 0

    qloop.run_until_complete(scenario())


def test_network_without_a_key_is_refused_with_the_reason(qloop, make_page):
    async def scenario():
        page = make_page()
        page.host_box.setCurrentIndex(page.host_box.findData("0.0.0.0"))
        page.key.clear()
        page.port.setValue(0)
        await page.toggle()
        assert page.server is None and page.start_button.isEnabled()
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
