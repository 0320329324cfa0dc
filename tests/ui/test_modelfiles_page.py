"""The Modelfiles page as redesigned for issue 15: it fits a small laptop in every state and both palettes, a preset
can be browsed but not saved, "My Modelfiles" starts on an empty state with New and Import, sampling figures read
as everywhere else."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from app.services.presets import shipped_presets_dir
from app.ui.tasks import running_tasks
from tests.support.fake_ollama import FakeOllama
from tests.support.layout import assert_fits
from tests.support.page_frame import themed, window_frame
from tests.support.waiting import until

LONG_NAME = "a-modelfile-with-a-very-long-name-that-keeps-going-and-going-well-past-any-sensible-width"


@pytest.fixture(params=["light", "dark"])
def theme(request):
    with themed(request.param):
        yield request.param


@pytest.fixture
def make_page(qloop, qtbot):
    """``await make_page()``: the page in a frame shaped like the main window (menus, navigation, status bar), shown
    at 1024×700 and started, on an isolated home."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.modelfiles.panel import ModelfilePanel

    frames, pages = contextlib.ExitStack(), []

    async def make():
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        context.update_settings(ollama_host=FakeOllama.unused_host())
        page = ModelfilePanel(context)
        frames.enter_context(window_frame(page))
        await page.start()
        pages.append(page)
        return page

    yield make

    async def finish():
        await until(lambda: not running_tasks())
        for page in pages:
            await page.shutdown()
            await page.workstation.close()

    qloop.run_until_complete(finish())
    frames.close()


async def _open_preset(page, name: str = "starter-text-continuation.Modelfile") -> Path:
    root = page.files.preset_root
    item = next(root.child(i) for i in range(root.childCount()) if root.child(i).text(0) == name)
    page.files.tree.itemClicked.emit(item, 0)
    await until(lambda: page.path is not None and page.path.name == name)
    return page.path


def test_empty_state_fits_and_offers_new_and_import(qloop, make_page, theme, tmp_path):
    async def scenario():
        page = await make_page()
        files = page.files
        assert files.empty_state.isVisible() and files.user_root.isHidden()
        assert not files.new_button.isVisible() and not files.import_button.isVisible()  # the card has them
        assert_fits(page)
        page.editor.setPlainText("FROM x\n")
        files.empty_state.new_button.click()  # unsaved text: asks first
        assert files.ask_bar.isVisible()

    qloop.run_until_complete(scenario())


def test_every_state_fits_a_small_laptop(qloop, make_page, theme):
    async def scenario():
        page = await make_page()
        await _open_preset(page)
        assert_fits(page)
        for index in range(page.form.tabs.count()):
            page.form.tabs.setCurrentIndex(index)
            assert_fits(page)
        page.edit_copy()
        page.files.name_edit.setText(LONG_NAME)
        page._untitled = LONG_NAME + ".Modelfile (not saved yet)"
        page._show_title()
        page.save()  # the name bar
        page.files.ask_bar.ask("A question with a long sentence " * 4, [("Yes", lambda: None), ("No", lambda: None)])
        page.show_notice("Cannot save it: the disk is full and the long explanation goes on. " * 3)
        page.notice.show_notice("A check result\nwith\nseveral\nlines", "warning", key="check")
        page.creator.offer(LONG_NAME)
        page.creator.status.setText("Created it in Ollama, with a long status line that goes on. " * 3)
        assert page.files.name_bar.isVisible() and page.files.ask_bar.isVisible() and page.creator.bar.isVisible()
        assert_fits(page)
        page.window().resize(1366, 768)
        assert_fits(page)

    qloop.run_until_complete(scenario())


def test_a_preset_can_be_browsed_but_not_changed(qtbot, qloop, make_page):
    from PySide6.QtWidgets import QAbstractItemView

    async def scenario():
        page = await make_page()
        path = await _open_preset(page)
        form = page.form
        assert form.tabs.isEnabled() and form.isEnabled()  # the tabs can be browsed
        for index in range(form.tabs.count()):
            form.tabs.setCurrentIndex(index)
            assert form.tabs.currentIndex() == index and form.tabs.currentWidget().isEnabled()
        assert form.system.isReadOnly() and form.adapter.isReadOnly() and form.requires.isReadOnly()
        assert not form.from_combo.isEnabled() and not form.from_browse.isEnabled()
        params = form.params
        assert params.table.editTriggers() == QAbstractItemView.EditTrigger.NoEditTriggers
        assert not params.add_button.isEnabled() and not params.remove_button.isEnabled()
        params.table.setCurrentCell(1, 0)  # rows can still be selected: their help shows
        assert params.parameters()[1][0] in params.help.text()
        assert form.template.editor.isReadOnly()
        assert not form.messages.add_button.isEnabled()
        assert not page.files.save_button.isEnabled() and "Duplicate" in page.files.save_button.toolTip()
        assert page.badge.isVisible() and page.copy_button.text() == "Duplicate to edit"
        before = page.editor.toPlainText()
        page._save_shortcut()  # Ctrl+S does nothing on a preset
        assert not page.files.name_bar.isVisible()
        form.system.setPlainText("typed into a read-only field by a program")
        assert page.editor.toPlainText() == before  # nothing reaches the preset's text

        page.copy_button.click()
        assert page.path is None and not form.read_only and not page.editor.isReadOnly()
        assert page.files.save_button.isEnabled() and not page.badge.isVisible()
        assert (
            params.add_button.isEnabled()
            and params.table.editTriggers() != QAbstractItemView.EditTrigger.NoEditTriggers
        )
        assert page.files.name_edit.text() == path.stem
        form.system.setPlainText("mine now")
        assert 'SYSTEM "mine now"' in page.editor.toPlainText() or "SYSTEM mine now" in page.editor.toPlainText()

    qloop.run_until_complete(scenario())


def test_a_read_only_preset_shows_its_messages(qloop, make_page, tmp_path):
    async def scenario():
        page = await make_page()
        presets = shipped_presets_dir()
        with_messages = next(
            (p.name for p in sorted(presets.glob("*.Modelfile")) if "MESSAGE" in p.read_text(encoding="utf-8")), None
        )
        if with_messages is None:
            pytest.skip("no shipped preset has MESSAGE lines")
        await _open_preset(page, with_messages)
        messages = page.form.messages
        assert messages.list.count() >= 1
        messages.list.setCurrentRow(0)
        assert messages.text.isEnabled() and messages.text.isReadOnly() and messages.text.toPlainText()
        assert not messages.role.isEnabled() and not messages.remove_button.isEnabled()

    qloop.run_until_complete(scenario())


def test_import_copies_into_my_modelfiles_under_a_free_name(qloop, make_page, tmp_path):
    async def scenario():
        page = await make_page()
        source = tmp_path / "pirate" / "Modelfile"
        source.parent.mkdir()
        source.write_text("FROM llama3.2\nSYSTEM Arr.\n", encoding="utf-8")
        target = await page.files.import_file(source)
        folder = page.workstation.paths.modelfiles_dir
        assert target == folder / "pirate.Modelfile"  # a file named "Modelfile" is named after its folder
        await until(lambda: page.path == target)
        assert page.editor.toPlainText() == "FROM llama3.2\nSYSTEM Arr.\n"
        assert not page.files.empty_state.isVisible() and not page.files.user_root.isHidden()
        assert page.files.new_button.isVisible() and page.files.import_button.isVisible()
        again = await page.files.import_file(source)
        assert again == folder / "pirate-2.Modelfile" and target.read_text(encoding="utf-8").startswith("FROM llama3.2")
        await until(lambda: page.files.user_root.childCount() == 2)

    qloop.run_until_complete(scenario())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_import_of_a_fifo_says_why(qloop, make_page, tmp_path):
    async def scenario():
        page = await make_page()
        fifo = tmp_path / "pipe.Modelfile"
        os.mkfifo(fifo)
        assert await page.files.import_file(fifo) is None
        await until(page.notice.isVisible)
        assert "Cannot import it" in page.notice.text() and "not a regular file" in page.notice.text()
        assert not list(page.workstation.paths.modelfiles_dir.glob("*"))

    qloop.run_until_complete(scenario())


def test_sampling_figures_read_the_same_as_in_settings(qloop, make_page):
    from PySide6.QtWidgets import QAbstractItemDelegate

    from app.core.units import format_sampling_value

    async def scenario():
        page = await make_page()
        page.editor.setPlainText("FROM x\nPARAMETER top_p 0.95\nPARAMETER typical_p 1\n")
        await until(lambda: page.form.params.parameters() == [("top_p", "0.95"), ("typical_p", "1")])
        table = page.form.params.table
        assert table.item(0, 2).text() == "0.9" == format_sampling_value(0.9)  # the default column
        assert table.item(1, 2).text() == "1.0"
        index = table.model().index(0, 1)
        table.setCurrentIndex(index)
        table.edit(index)
        editor = table.indexWidget(index)
        assert editor.text() == "0.95"  # not 0.9500
        editor.setValue(0.5)
        table.commitData(editor)
        table.closeEditor(editor, QAbstractItemDelegate.EndEditHint.NoHint)
        assert "PARAMETER top_p 0.5\n" in page.editor.toPlainText()

    qloop.run_until_complete(scenario())
