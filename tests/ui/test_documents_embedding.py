"""The Documents page's embedding model, end to end with real parts: the picker lists the library's GGUF embedding
models (not its chat models), choosing one sets the setting and the workstation embeds the passages in the
background on the engine host (the row shows it), search then says it is hybrid, and choosing None goes back to
keywords. Rendered at 1024×700 and 1366×768, light and dark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.services.documents import events as ev
from app.services.documents.service import HYBRID, KEYWORD
from tests.support.layout import assert_fits
from tests.support.minilm_gguf import minilm_gguf  # noqa: F401 (a fixture)
from tests.support.page_frame import themed
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(240)
SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
NOTES = {
    "refunds.txt": "Purchases can be returned within 30 days for a full refund if the item is unused and boxed.",
    "printer.txt": "If the printer reports a paper jam, open the rear tray and gently pull out the stuck sheet.",
    "vacation.txt": "Employees earn twenty days of paid leave per year, requested through the HR portal.",
}


def build(workstation):
    from app.ui.pages.documents.page import DocumentsPage

    return DocumentsPage(workstation)


def combo_items(page) -> list[str]:
    return [page.embedding_combo.itemText(i) for i in range(page.embedding_combo.count())]


@pytest.mark.parametrize("palette", ["light", "dark"])
def test_choosing_an_embedding_model_makes_search_hybrid(
    qloop, make_framed_page, tmp_path, palette, minilm_gguf, tiny_gguf  # noqa: F811
):  # fmt: skip
    models = tmp_path / "models"
    models.mkdir()
    os.symlink(minilm_gguf, models / "all-MiniLM-L6-v2.gguf")
    os.symlink(tiny_gguf, models / "tiny-chat.gguf")
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    SHOTS.mkdir(parents=True, exist_ok=True)

    async def scenario(page):
        workstation = page.workstation
        workstation.update_settings(model_folders=[str(models)])
        await workstation.library.scan()
        await page.start()
        await until(lambda: len(combo_items(page)) == 2, 30)
        assert combo_items(page) == ["None — keyword search only", "all-MiniLM-L6-v2.gguf"]
        assert "keywords only" in page.embedding_state.text()
        await page.add_paths([str(notes)], "help desk")
        await until(lambda: not page.service.progress().running and len(page.records) == 3, 60)

        page.embedding_combo.setCurrentIndex(1)
        page.embedding_combo.activated.emit(1)  # as a click does
        assert workstation.settings.documents_embedding_model == str(models / "all-MiniLM-L6-v2.gguf")
        await until(lambda: page.service.embedding().state == ev.EMBED_DONE, 150)
        assert "3 of 3 passages embedded" in page.embedding_state.text()
        page.search_box.setText("can I get my money back")
        page.search_now()
        await until(lambda: page.search_mode == HYBRID and bool(page.hits), 60)
        assert Path(page.hits[0].path).name == "refunds.txt"
        assert "hybrid" in page.results.toPlainText()
        page.show_passage(page.hits[0])
        assert_fits(page)
        for width, height in ((1024, 700), (1366, 768)):
            page.window().resize(width, height)
            await until(lambda: page.window().width() == width, 5)  # noqa: B023 (awaited here)
            shot = SHOTS / f"documents-embedding_{width}x{height}_{palette}.png"
            assert page.window().grab().save(str(shot))

        page.embedding_combo.setCurrentIndex(0)
        page.embedding_combo.activated.emit(0)
        await until(lambda: page.service.embedding().model is None, 10)
        page.search_now()
        await until(lambda: page.search_mode == KEYWORD, 30)
        assert "keywords only" in page.embedding_state.text()
        long_reason = "sqlite-vec could not be loaded (" + "a very long reason " * 20 + "): keywords only."
        page._show_embedding(ev.EmbeddingProgress("/m/e.gguf", ev.EMBED_UNAVAILABLE, reason=long_reason))
        page.window().resize(1024, 700)
        assert_fits(page)  # a long reason never widens the page; its tooltip says it whole
        assert long_reason in page.embedding_state.toolTip()

    with themed(palette):
        page = make_framed_page(build)
        qloop.run_until_complete(scenario(page))


def test_the_library_tags_embedding_models(qapp):
    from PySide6.QtGui import QColor

    from app.services.library.index import EntryKind, EntrySource, LibraryEntry
    from app.ui.pages.models.table import EMBEDDING_ROLE, NAME, SEARCH_ROLE, LibraryTableModel

    entries = [
        LibraryEntry("/m/minilm.gguf", "all-MiniLM-L6-v2", EntryKind.GGUF, EntrySource.FOLDER, architecture="bert"),
        LibraryEntry("/m/chat.gguf", "A chat model", EntryKind.GGUF, EntrySource.FOLDER, architecture="llama"),
    ]
    table = LibraryTableModel()
    table.set_entries(entries, QColor("red"))
    tags = [table.item(row, NAME).data(EMBEDDING_ROLE) for row in range(2)]
    assert tags == [True, False]
    assert "embedding" in table.item(0, NAME).data(SEARCH_ROLE) and "embedding" not in table.item(1, NAME).data(
        SEARCH_ROLE
    )
