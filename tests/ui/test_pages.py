"""The pages a user finds: vLLM on its own page, Batch the batch runner alone, "API server" by that name; every
page, and the settings sections for the engines, with an icon of its own; the old page paths still open them."""

from __future__ import annotations

from app.ui.page_paths import ALIASES, PAGE_PATHS


def test_each_page_and_engine_section_has_its_own_icon(qloop, make_window):
    from app.ui.style.icons import icon_names, svg_text

    async def scenario():
        window = await make_window()
        names = [window.nav.item(row).text() for row in range(window.nav.count())]
        assert names[3:5] == ["vLLM", "Batch"] and "API server" in names and "Server" not in names
        page_icons = [spec.icon for spec in window._specs]
        assert len(set(page_icons)) == len(page_icons) and set(page_icons) <= set(icon_names())
        drawings = {svg_text(name, "#000") for name in page_icons}
        assert len(drawings) == len(page_icons)  # distinct drawings, not only distinct names
        settings = window.open_path("settings")
        by_section = {section.name: section.icon for section in settings.sections}
        engine_icons = [by_section["Ollama"], by_section["vLLM"], window._specs[names.index("API server")].icon]
        assert len(set(engine_icons)) == 3  # Ollama, vLLM and the API server no longer share one
        assert window.batch_panel.parent() is not None and window.open_path("batch") is window.batch_panel

    qloop.run_until_complete(scenario())


def test_every_page_path_opens_a_page_and_the_old_batch_paths_still_work(qloop, make_window):
    async def scenario():
        window = await make_window()
        seen = {}
        for path in PAGE_PATHS:
            seen[path] = window.open_path(path)
            assert window.pages.currentWidget().isVisible(), path
        assert seen["batch/vllm"] is seen["vllm"] is window.vllm_panel
        assert seen["batch/runner"] is seen["batch"] is window.batch_panel
        assert seen["models"] is seen["models/library"]
        distinct = [seen[path] for path in PAGE_PATHS if path not in ALIASES]
        assert len({id(page) for page in distinct}) == len(distinct)  # ALIASES names every second name

    qloop.run_until_complete(scenario())
