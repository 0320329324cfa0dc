"""The Documents page with real files: adding a folder indexes it in the background and the table shows each file's
state (a file that cannot be read with its reason), a search shows the passage with its page and opens the file,
Pause/Resume/Cancel change the run, the empty state says what to do, and the page fits 1024×700 unclipped."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QAbstractButton, QLabel

from tests.support.documents import page_text, write_pdf
from tests.support.layout import assert_fits
from tests.support.page_frame import themed
from tests.support.waiting import until

MANY = 150  # enough small files that a run is still going when the test acts on it
SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


def build(workstation):
    from app.ui.pages.documents.page import DocumentsPage

    return DocumentsPage(workstation)


def states(page) -> dict[str, str]:
    return {page.table.item(row, 0).text(): page.table.item(row, 1).text() for row in range(page.table.rowCount())}


def a_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "papers"
    folder.mkdir()
    write_pdf(folder / "report.pdf", [page_text("harbour"), page_text("glacier")])
    (folder / "notes.md").write_text("# Field notes\n\n" + page_text("meadow") + "\n", encoding="utf-8")
    (folder / "empty.md").write_bytes(b"")
    return folder


def clipped_labels(root) -> list[str]:
    """Visible one-line labels and buttons narrower than their text needs, wrapped labels lower than it."""
    clipped = []
    for label in root.findChildren(QLabel):
        if label.isVisible() and label.wordWrap() and label.height() < label.heightForWidth(label.width()):
            clipped.append(f"QLabel {label.text()!r} {label.height()} < {label.heightForWidth(label.width())} high")
    for widget in [*root.findChildren(QLabel), *root.findChildren(QAbstractButton)]:
        if not widget.isVisible() or not widget.text() or (isinstance(widget, QLabel) and widget.wordWrap()):
            continue
        if widget.width() < widget.minimumSizeHint().width() or widget.width() < widget.sizeHint().width() - 1:
            if isinstance(widget, QLabel) and widget.sizePolicy().horizontalPolicy().name == "Ignored":
                continue
            clipped.append(f"{type(widget).__name__} {widget.text()!r} {widget.width()} < {widget.sizeHint().width()}")
    return clipped


def test_a_folder_is_indexed_with_states_and_a_search_finds_the_page(qloop, make_framed_page, tmp_path):
    folder = a_folder(tmp_path)
    page = make_framed_page(build)
    opened = []
    page.open_file = lambda path, number: opened.append((path, number))

    async def scenario():
        await page.start()
        assert page.stack.currentIndex() == 0  # nothing indexed yet: the empty state
        await page.add_paths([str(folder)], "papers")
        await until(lambda: not page.service.progress().running and len(states(page)) == 3)
        await until(lambda: states(page).get("notes.md") == "indexed")
        assert states(page) == {"empty.md": "failed: empty file", "notes.md": "indexed", "report.pdf": "indexed"}
        row = [page.table.item(r, 0).text() for r in range(3)].index("report.pdf")
        assert page.table.item(row, 3).text() == "2" and int(page.table.item(row, 2).text()) >= 1  # pages, chunks
        assert page.table.item(row, 4).text() == str(folder / "report.pdf")
        assert page.selected_collection() == "papers" and "1 could not be read" in page.files_summary.text()

        page.search_box.setText("glacier procedure")
        page.search_now()
        await until(lambda: bool(page.hits))
        assert page.tabs.currentIndex() == 1
        top = page.hits[0]
        assert Path(top.path).name == "report.pdf" and top.page == 2
        shown = page.results.toHtml()
        assert "report.pdf" in shown and "page 2" in shown
        assert "font-weight:700" in shown or "font-weight:600" in shown  # the matched terms emphasised
        page._hit_clicked(QUrl("hit:0"))
        assert opened == [(top.path, 2)]
        assert "glacier" in page.detail.toPlainText() and "page 2" in page.detail.toPlainText()

        page.search_box.setText("nothingmatcheshere")
        page.search_now()
        await until(lambda: "No passages match" in page.results.toPlainText())

    qloop.run_until_complete(scenario())


def many_notes(tmp_path):
    """A folder of ``MANY`` small Markdown notes: a run long enough to pause, cancel or close mid-way."""
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(MANY):
        (folder / f"note{n:02}.md").write_text(f"# Note {n}\n\n" + page_text(f"topic{n}", 60), encoding="utf-8")
    return folder


def test_pause_resume_and_cancel_change_the_run(qloop, make_framed_page, tmp_path):
    folder = many_notes(tmp_path)
    page = make_framed_page(build)

    async def scenario():
        await page.start()
        run = page.add_paths([str(folder)], "notes")
        page.pause_button.click()  # before the first file: nothing is parsed until Resume
        await until(lambda: page.service.progress().paused)
        assert page.progress_label.text().startswith("Paused — ")
        assert page.resume_button.isVisible() and not page.pause_button.isVisible()
        assert page.service.progress().done == 0
        page.resume_button.click()
        await until(lambda: page.service.progress().done > 2)
        running = page.progress_label.text()
        page.pause_button.click()
        assert running.startswith("Indexing — ") and f" of {MANY} files" in running
        assert page.progress_label.text().startswith("Paused — ") and page.resume_button.isVisible()
        await until(lambda: "indexed" in states(page).values() and page.collections)  # the table follows the run
        assert clipped_labels(page) == []
        SHOTS.mkdir(parents=True, exist_ok=True)
        assert page.window().grab().save(str(SHOTS / "documents-paused_1024x700.png"))
        page.cancel_button.click()
        totals = await run
        assert totals is not None and totals.cancelled and totals.indexed < MANY
        await until(lambda: "cancelled" in page.progress_label.text() and not page.cancel_button.isVisible())
        await until(lambda: sum(state == "indexed" for state in states(page).values()) == totals.indexed)

        again = await page.add_paths([str(folder)], "notes")  # a rerun goes on where it stopped
        assert again is not None and again.unchanged == totals.indexed and again.indexed == MANY - totals.indexed
        await until(lambda: len(states(page)) == MANY and set(states(page).values()) == {"indexed"})
        await until(lambda: not page.progress_row.isVisible() or "cancelled" not in page.progress_label.text())

    qloop.run_until_complete(scenario())


def test_the_empty_state_says_what_works_now(qloop, make_framed_page):
    page = make_framed_page(build)

    async def scenario():
        await page.start()
        await until(lambda: page.loaded)
        assert page.stack.currentIndex() == 0 and page.empty_text.isVisible()
        assert "search them" in page.empty_text.text() and "chat" not in page.empty_text.text()
        assert page.empty_add_files.isVisible() and page.empty_add_folder.isVisible()
        assert not page.progress_row.isVisible()

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("palette", ["light", "dark"])
def test_the_page_fits_1024x700_with_nothing_clipped(qloop, make_framed_page, tmp_path, palette):
    folder = a_folder(tmp_path)
    SHOTS.mkdir(parents=True, exist_ok=True)

    async def scenario(page):
        await page.start()
        assert_fits(page)
        assert clipped_labels(page) == []  # the empty state
        await page.add_paths([str(folder)], "a collection with a long name")
        await until(lambda: not page.service.progress().running and len(states(page)) == 3)
        assert_fits(page)
        assert clipped_labels(page) == []
        page.search_box.setText("harbour")
        page.search_now()
        await until(lambda: bool(page.hits))
        page.show_passage(page.hits[0])
        assert clipped_labels(page) == []
        assert page.window().grab().save(str(SHOTS / f"documents-search_1024x700_{palette}.png"))

    with themed(palette):
        page = make_framed_page(build)
        qloop.run_until_complete(scenario(page))


def test_closing_the_workstation_stops_indexing_and_keeps_what_was_committed(qloop, make_framed_page, tmp_path):
    from app.services.documents.store import DocumentStore

    folder = many_notes(tmp_path)
    page = make_framed_page(build)
    service = page.workstation.documents
    assert page.workstation.documents is service  # one service, made on first use

    async def scenario():
        await page.start()
        run = page.add_paths([str(folder)], "notes")
        await until(lambda: service.progress().done > 2)
        await page.workstation.close()  # as the window's close does
        totals = await run
        assert totals is not None and totals.cancelled and totals.indexed < MANY
        store = DocumentStore(service.path)
        try:
            indexed = [r for r in store.files("notes") if r.state == "indexed"]
            assert len(indexed) == totals.indexed >= 2
        finally:
            store.close()

    qloop.run_until_complete(scenario())


def test_a_new_collection_is_made_by_dropping_files_on_it_and_removed_after_a_confirmation(
    qloop, make_framed_page, tmp_path, monkeypatch
):
    from PySide6.QtCore import QMimeData, QPoint, Qt
    from PySide6.QtGui import QDropEvent
    from PySide6.QtWidgets import QInputDialog, QMessageBox

    folder = a_folder(tmp_path)
    page = make_framed_page(build)
    asked = []

    async def scenario():
        await page.start()
        monkeypatch.setattr(QInputDialog, "getText", lambda *args, **kwargs: ("Field trip", True))
        page.new_collection()
        assert page.selected_collection() == "Field trip" and "no files yet" in page.files_summary.text()
        data = QMimeData()
        data.setUrls([QUrl.fromLocalFile(str(folder / "notes.md"))])
        drop = QDropEvent(
            QPoint(20, 20), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
        )
        page.dropEvent(drop)
        await until(lambda: states(page) == {"notes.md": "indexed"})
        assert [s.name for s in page.collections] == ["Field trip"]

        monkeypatch.setattr(
            QMessageBox, "question", lambda *args: asked.append(args[2]) or QMessageBox.StandardButton.Cancel
        )
        page.remove_collection()
        assert "Field trip" in asked[0] and "stay where they are" in asked[0]
        await until(lambda: not page.service.progress().running)
        assert [s.name for s in await page.service.summaries()] == ["Field trip"]  # kept: the answer was Cancel
        monkeypatch.setattr(QMessageBox, "question", lambda *args: QMessageBox.StandardButton.Yes)
        page.remove_collection()
        await until(lambda: page.loaded and not page.collections and page.stack.currentIndex() == 0)

    qloop.run_until_complete(scenario())


def test_a_folder_added_on_the_page_is_watched_and_the_watch_box_turns_it_off(qloop, make_framed_page, tmp_path):
    import os

    folder = a_folder(tmp_path)
    page = make_framed_page(build)
    page.service.watch_interval_s = 0.05

    def write(name: str, text: str) -> None:
        part = folder / f".{name}.part"
        part.write_text(text, encoding="utf-8")
        os.replace(part, folder / name)

    async def scenario():
        await page.start()
        assert not page.watch_box.isEnabled()  # nothing added yet: nothing to watch
        await page.add_watching_folders([str(folder)], "papers")
        await until(lambda: page.watch_box.isEnabled() and page.watch_box.isChecked())
        assert "Watching 1 of the 1" in page.watch_box.toolTip()

        write("later.md", "# Later\n\nThe okapi lives in the rainforest.\n")  # followed while watched
        await until(lambda: states(page).get("later.md") == "indexed", timeout=60)

        page.watch_box.setChecked(False)  # as a click does
        await until(lambda: not page.watch_box.isChecked() and "Watching 0 of the 1" in page.watch_box.toolTip())
        assert await page.service.watched() == []
        page.watch_box.setChecked(True)
        await until(lambda: "Watching 1 of the 1" in page.watch_box.toolTip())

    qloop.run_until_complete(scenario())
