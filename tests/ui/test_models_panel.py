"""Models → Library, offscreen in the real main window, over real generated GGUFs and an HF-format folder."""

from __future__ import annotations

import copy
import shutil
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QFontDatabase
from PySide6.QtWidgets import QMessageBox

from app.services.library import index as library_module
from app.ui.pages.models.table import ACTION, ENTRY_ROLE, LOADED_ROLE, SECONDARY_ROLE, SIZE
from tests.services.test_library import add_ollama_model, write_hf_folder
from tests.support.gguf_factory import CHATML_TEMPLATE
from tests.support.waiting import until


@pytest.fixture
def library(tmp_path, monkeypatch, tiny_gguf, truncated_gguf):
    """A model folder (two GGUFs, a truncated one, an HF folder) and an Ollama store; an empty HF cache."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(tiny_gguf, folder / "tiny.gguf")
    shutil.copyfile(tiny_gguf, folder / "spare.gguf")
    shutil.copyfile(truncated_gguf, folder / "cut.gguf")
    write_hf_folder(folder / "hf-llama")
    add_ollama_model(tmp_path / "ollama", "tiny", "latest", tiny_gguf)
    return folder


async def _open_library(make_window, folder: Path):
    """A window whose model folder is ``folder``, showing Models → Library after its first scan."""
    window = await make_window()
    window.workstation.update_settings(model_folders=[str(folder)])
    window.nav.setCurrentRow(1)  # the first show scans
    panel = window.models_panel
    await until(lambda: panel.last_scan is not None and panel._scan_task.done())
    return window, panel


def _names(panel) -> list[str]:
    return [panel.proxy.index(row, 0).data() for row in range(panel.proxy.rowCount())]


def _select(panel, name: str) -> None:
    row = _names(panel).index(name)
    panel.table.selectRow(row)


def _entry(panel, name: str):
    return panel.proxy.index(_names(panel).index(name), 0).data(ENTRY_ROLE)


def test_table_fills_off_the_qt_thread_sorts_and_filters(qloop, make_window, library, monkeypatch):
    scan_threads: list[str] = []
    real_scan = library_module.ModelLibrary.scan

    def recording_scan(self, progress=None):
        scan_threads.append(threading.current_thread().name)
        return real_scan(self, progress)

    monkeypatch.setattr(library_module.ModelLibrary, "scan", recording_scan)

    async def scenario():
        _window, panel = await _open_library(make_window, library)
        assert scan_threads and threading.main_thread().name not in scan_threads
        assert sorted(_names(panel)) == ["cut.gguf", "hf-llama", "tiny-test-model", "tiny-test-model", "tiny:latest"]
        hf_row = _names(panel).index("hf-llama")
        assert panel.proxy.index(hf_row, 0).data(SECONDARY_ROLE) == "hf-llama · Model folder"
        assert panel.proxy.index(hf_row, ACTION).data() == "Serve"  # vLLM serves it
        tiny_row = _names(panel).index("tiny:latest")
        assert panel.proxy.index(tiny_row, ACTION).data() == "Chat"
        assert panel.proxy.index(tiny_row, 0).data(SECONDARY_ROLE) == "Ollama · llama"
        cut = _entry(panel, "cut.gguf")
        cut_row = _names(panel).index("cut.gguf")
        assert "truncated" in cut.error and panel.proxy.index(cut_row, ACTION).data() == ""
        assert panel.proxy.index(cut_row, 0).data(SECONDARY_ROLE) == "cut.gguf · cannot be used"
        assert "5 models" in panel.status_label.text() and "1 unusable" in panel.status_label.text()
        panel.search.setText("ollama tiny")
        assert _names(panel) == ["tiny:latest"]
        panel.search.setText("LLAMAFORCAUSAL")
        assert _names(panel) == ["hf-llama"]
        panel.search.setText("")
        panel.table.sortByColumn(SIZE, Qt.SortOrder.DescendingOrder)  # size, largest first
        sizes = [panel.proxy.index(r, 0).data(ENTRY_ROLE).size_bytes for r in range(panel.proxy.rowCount())]
        assert sizes == sorted(sizes, reverse=True)

    qloop.run_until_complete(scenario())


def test_detail_shows_metadata_and_the_full_template(qloop, make_window, library):
    async def scenario():
        _window, panel = await _open_library(make_window, library)
        _select(panel, "tiny:latest")
        await until(lambda: panel.details is not None)
        assert panel.facts.value("Quantization") == "F16" and panel.facts.value("Context") == "2,048 tokens"
        assert panel.facts.value("Family") == "llama" and panel.facts.value("Chat template") == "built in"
        assert panel.facts.value("Licence") == "not stated" and panel.facts.value("Engine") == "llama.cpp"
        assert panel.title.text() == "tiny:latest" and panel.subtitle.text() == "Ollama · llama"
        assert panel.facts.isVisible() and not panel.metadata_view.isVisible()  # the raw dump waits under Advanced
        panel.advanced_section.set_expanded(True)
        assert panel.metadata_view.isVisible()
        assert panel.template_view.toPlainText() == CHATML_TEMPLATE
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
        assert panel.template_view.isReadOnly() and panel.template_view.font().family() == fixed
        metadata = panel.metadata_view.toPlainText()
        assert "general.architecture" in metadata and "llama" in metadata
        assert "tokenizer.ggml.tokens" in metadata and "array of" in metadata
        _select(panel, "cut.gguf")
        assert "truncated" in panel.metadata_view.toPlainText() and not panel.load_button.isEnabled()
        _select(panel, "hf-llama")
        await until(lambda: panel.details is not None)
        assert "config.architectures" in panel.metadata_view.toPlainText()

    qloop.run_until_complete(scenario())


def test_estimator_updates_when_the_context_changes(qloop, make_window, library):
    async def scenario():
        _window, panel = await _open_library(make_window, library)
        estimator = panel.estimator
        await until(lambda: estimator.machine is not None)
        _select(panel, "tiny:latest")
        await until(lambda: estimator.estimate is not None)
        assert estimator.context_size.value() == 2048  # the model's trained context (under 4096)
        kv_before = estimator.estimate.kv_cache_bytes
        bars_before = estimator.bars.describe()
        estimator.context_size.setValue(8192)
        assert estimator.estimate.kv_cache_bytes == 4 * kv_before
        assert estimator.bars.describe() != bars_before
        assert estimator.verdict is not None and estimator.verdict.state in ("fits", "tight", "wont_fit")
        assert "Fits" not in estimator.verdict_label.text()  # the verdict is said once, on the pane's fits line
        estimator.type_k.setCurrentText("q8_0")
        assert estimator.estimate.kv_cache_bytes < 4 * kv_before

    qloop.run_until_complete(scenario())


def test_delete_asks_then_removes_and_cancel_keeps(qloop, make_window, library):
    async def scenario():
        _window, panel = await _open_library(make_window, library)
        spare = library / "spare.gguf"
        _select(panel, "tiny-test-model")
        path = panel.selected_entry().path
        panel.ask_delete()
        box = panel.delete_box
        assert box is not None and box.isVisible() and path in box.text()
        box.button(QMessageBox.StandardButton.Cancel).click()
        await until(lambda: panel.delete_box is None)
        assert Path(path).exists()
        _select(panel, "tiny-test-model")
        panel.ask_delete()
        panel.delete_box.button(QMessageBox.StandardButton.Yes).click()
        await until(lambda: "Deleted" in panel.notice.text())
        others = {spare, library / "tiny.gguf"} - {Path(path)}
        assert not Path(path).exists() and len(others) == 1 and all(p.exists() for p in others)
        assert _names(panel).count("tiny-test-model") == 1

    qloop.run_until_complete(scenario())


def test_delete_is_refused_outside_the_library_and_for_ollama(qloop, make_window, library):
    async def scenario():
        _window, panel = await _open_library(make_window, library)
        _select(panel, "tiny:latest")
        panel.ask_delete()
        assert panel.delete_box is None and "ollama rm tiny:latest" in panel.notice.text()
        _select(panel, "cut.gguf")
        panel.workstation.settings.model_folders = []  # the folder stops being a library root before the delete
        panel.ask_delete()
        panel.delete_box.button(QMessageBox.StandardButton.Yes).click()
        await until(lambda: "not inside the library's folders" in panel.notice.text())
        assert (library / "cut.gguf").exists()

    qloop.run_until_complete(scenario())


def test_load_in_chat_reaches_the_chat_panel(qloop, make_window, library):
    async def scenario():
        window, panel = await _open_library(make_window, library)
        _select(panel, "tiny:latest")
        path = panel.selected_entry().path
        panel.load_button.click()
        assert window.nav.currentRow() == 0
        await until(lambda: window.chat_panel.workspace.model is not None)
        assert window.chat_panel.workspace.model.path == path

    qloop.run_until_complete(scenario())


def test_hf_folder_goes_to_the_vllm_page(qloop, make_window, library):
    async def scenario():
        window, panel = await _open_library(make_window, library)
        _select(panel, "hf-llama")
        panel.load_button.click()
        assert window.vllm_panel.form.model.text() == str(library / "hf-llama")
        assert window.pages.currentWidget() is window.vllm_panel  # its own page now
        assert "vLLM" in panel.notice.text()

    qloop.run_until_complete(scenario())


class _UrlCatcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


def test_show_in_file_manager_opens_the_folder(qloop, make_window, library):
    catcher = _UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    try:

        async def scenario():
            _window, panel = await _open_library(make_window, library)
            _select(panel, "tiny:latest")
            panel.show_button.click()
            _select(panel, "hf-llama")
            panel.show_button.click()

        qloop.run_until_complete(scenario())
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in catcher.urls] == [
        str(library.parent / "ollama" / "blobs"),
        str(library / "hf-llama"),
    ]


def test_rescan_finds_a_new_file_and_keeps_the_selection(qloop, make_window, library, tiny_gguf):
    async def scenario():
        _window, panel = await _open_library(make_window, library)
        _select(panel, "hf-llama")
        (library / "sub").mkdir()
        shutil.copyfile(tiny_gguf, library / "sub" / "new.gguf")
        await panel.rescan()
        assert _names(panel).count("tiny-test-model") == 3
        assert panel.selected_entry().name == "hf-llama"

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("dark", [False, True])
def test_memory_bars_paint_in_the_palette_colours(qtbot, dark):
    from PySide6.QtGui import QColor, QPalette

    from app.ui.pages.models.memory_bars import BarRow, MemoryBars, segment_colors

    bars = MemoryBars()
    qtbot.addWidget(bars)
    palette = QPalette(QColor("#202124") if dark else QColor("#f5f5f5"))
    palette.setColor(QPalette.ColorRole.Highlight, QColor("#3d7be0" if dark else "#1a5fb4"))
    bars.setPalette(palette)
    gib = 1 << 30
    bars.set_rows([BarRow("RAM", (6 * gib, 2 * gib, 2 * gib), 16 * gib)])
    bars.resize(400, bars.sizeHint().height())
    image = bars.grab().toImage()
    weights, kv, compute = segment_colors(bars.palette())
    bar_left, bar_width = 64, 400 - 64 - 4
    y = 11  # the middle of the first row
    assert image.pixelColor(bar_left + int(bar_width * 3 / 16), y) == weights  # 6 GiB of 16: weights
    assert image.pixelColor(bar_left + int(bar_width * 7 / 16), y) == kv  # then 2 GiB of KV cache
    assert image.pixelColor(bar_left + int(bar_width * 9 / 16), y) == compute
    assert len({weights.name(), kv.name(), compute.name()}) == 3
    assert bars.describe() == ["RAM: 10.0 GiB of 16.0 GiB (Weights 6.0 GiB, KV cache 2.0 GiB, Compute 2.0 GiB)"]


def test_folder_problems_are_shown_under_the_table(qloop, make_window, library, tmp_path):
    async def scenario():
        window, panel = await _open_library(make_window, library)
        assert not panel.problems_label.isVisible()
        settings = copy.deepcopy(window.workstation.settings)
        settings.model_folders = [str(library), str(tmp_path / "unplugged")]
        window.workstation.replace_settings(settings)  # the Settings page's road: the library rescans, the page follows
        await until(lambda: panel.problems_label.isVisible())
        assert "unplugged does not exist. Fix or remove it in Settings." in panel.problems_label.text()
        assert len(_names(panel)) == 5

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("has_gpu", [False, True])
def test_estimator_without_a_gpu_runs_everything_from_ram(qloop, qtbot, monkeypatch, tiny_gguf, has_gpu):
    from app.core.gguf.header import read_gguf_header
    from app.core.memory.fit import MachineMemory
    from app.ui.pages.models import estimator as models_estimator
    from app.ui.pages.models.estimator import ModelEstimator

    gib = 1 << 30
    gpu = (("Fake GPU",), (8 * gib,), (8 * gib,)) if has_gpu else ((), (), ())
    machine = MachineMemory(*gpu, 16 * gib, 12 * gib, None if has_gpu else "No NVIDIA driver found.")
    monkeypatch.setattr(models_estimator, "read_machine_memory", lambda: machine)  # NVML: no GPU on this machine

    async def scenario():
        estimator = ModelEstimator()
        qtbot.addWidget(estimator)
        header = read_gguf_header(tiny_gguf)
        estimator.set_header(header)  # before the machine is known: any layer count may be chosen
        estimator.gpu_layers.setValue(2)
        await estimator.refresh_machine()
        layers = (header.block_count or 0) + 1
        assert estimator.gpu_layers.isEnabled() is has_gpu
        assert estimator.gpu_layers.maximum() == (layers if has_gpu else 0)
        assert estimator.verdict is not None and estimator.verdict.state == "fits"
        labels = [line.split(":")[0] for line in estimator.bars.describe()]
        if has_gpu:
            assert labels == ["GPU", "RAM"] and "no GPU here" not in estimator.verdict_label.text()
        else:
            assert labels == ["RAM"] and estimator.estimate is not None and estimator.estimate.gpu_bytes == 0
            assert estimator.verdict_label.text() == "No GPU here: everything runs from RAM."
            assert estimator.gpu_layers.toolTip() == "No NVIDIA driver found. Everything runs from RAM."
            estimator.set_header(header)  # another model: still nothing offered on the GPU
            assert estimator.gpu_layers.value() == 0 and estimator.gpu_layers.maximum() == 0

    qloop.run_until_complete(scenario())


# --- the summary, the Loaded badge, the row action, the empty state, the layout ----------------------------------


def test_the_fits_line_says_how_much_of_this_machine_it_uses(qloop, make_window, library):
    import re

    async def scenario():
        _window, panel = await _open_library(make_window, library)
        await until(lambda: panel.estimator.machine is not None)
        _select(panel, "tiny:latest")
        await until(lambda: panel.estimator.verdict is not None)
        text = panel.fits_label.text()
        figures = r"(\d+\.\d of \d+\.\d (GiB|MiB)|\d+\.\d (KiB|MiB) of \d+\.\d GiB)"  # a tiny model in its own unit
        assert re.fullmatch(rf"Fits: uses {figures} (RAM|VRAM)", text), text
        assert panel.fits_label.property("role") == "fits"
        shown = [panel.fits_label.text(), panel.estimator.verdict_label.text(), panel.fits_label.toolTip()]
        assert sum(line.count("Fits") for line in shown) == 1  # one verdict on the pane
        assert sum(bool(re.search(r"\d+\.\d (GiB|MiB|KiB)", line)) for line in shown) == 1  # its figures: once
        panel.estimator.context_size.setValue(panel.estimator.context_size.maximum())  # a million tokens
        assert panel.fits_label.text() != text  # the line follows the estimator's settings

    qloop.run_until_complete(scenario())


def test_the_loaded_badge_follows_the_engine_host(qloop, make_window, library):
    from app.services.engines.entries import EngineKind

    async def scenario():
        window, panel = await _open_library(make_window, library)
        path = str(library / "tiny.gguf")
        row_of = {e.path: r for r in range(panel.model.rowCount()) if (e := panel.model.item(r, 0).data(ENTRY_ROLE))}
        assert not any(panel.model.item(r, 0).data(LOADED_ROLE) for r in range(panel.model.rowCount()))
        panel.select_path(path)
        panel.load_button.click()  # the real chat loads it through the engine host
        await until(lambda: window.workstation.host.loaded(EngineKind.LLAMACPP) is not None, 60)
        assert panel.model.item(row_of[path], 0).data(LOADED_ROLE) is True
        assert [r for r in range(panel.model.rowCount()) if panel.model.item(r, 0).data(LOADED_ROLE)] == [row_of[path]]
        window.open_path("models/library")
        panel.select_path(path)
        assert panel.loaded_badge.isVisible()
        panel.select_path(str(library / "spare.gguf"))  # the same bytes in another file: not the loaded one
        assert not panel.loaded_badge.isVisible()
        await window.workstation.host.unload(EngineKind.LLAMACPP)
        assert not any(panel.model.item(r, 0).data(LOADED_ROLE) for r in range(panel.model.rowCount()))

    qloop.run_until_complete(scenario())


def test_a_model_loaded_before_the_page_is_built_has_its_badge(qloop, make_window, library):
    from app.services.engines.entries import EngineKind

    async def scenario():
        window = await make_window()
        window.workstation.update_settings(model_folders=[str(library)])
        path = str(library / "tiny.gguf")
        await window.chat_panel.load_and_wait(path)
        assert window.workstation.host.loaded(EngineKind.LLAMACPP) is not None
        window.open_path("models/library")
        panel = window.models_panel
        await until(lambda: panel.last_scan is not None and panel._scan_task.done())
        panel.select_path(path)
        assert panel.loaded_badge.isVisible()

    qloop.run_until_complete(scenario())


@pytest.fixture
def make_library(make_standalone_panel, tmp_path, monkeypatch):
    """``await make_library(folders)``: a Library page on its own, its model folders ``folders``; no HF cache or
    Ollama models on this machine."""
    from app.ui.pages.models.library import ModelsPanel

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "empty-ollama"))

    async def make(folders):
        def build(context):
            context.update_settings(model_folders=[str(f) for f in folders])
            return ModelsPanel(context)

        panel = await make_standalone_panel(build, (1000, 640))
        await until(lambda: panel.last_scan is not None and panel._scan_task.done())
        return panel

    return make


def test_an_empty_library_offers_the_starter_discover_and_a_folder(qloop, make_library, tmp_path, tiny_gguf):
    async def scenario():
        panel = await make_library([])
        assert panel.pages.currentWidget() is panel.empty and panel.empty.isVisible()
        assert panel.empty.title.text() == "No models yet"
        asked: list[object] = []
        panel.starter_requested.connect(lambda: asked.append("starter"))
        panel.open_page_requested.connect(asked.append)
        panel.empty.button("Use the starter model").click()
        panel.empty.button("Discover models").click()
        assert asked == ["starter", "models/discover"]
        folder = tmp_path / "my models"
        folder.mkdir()
        shutil.copyfile(tiny_gguf, folder / "tiny.gguf")
        await panel.add_model_folder(str(folder))
        assert panel.workstation.settings.model_folders == [str(folder)]
        assert panel.pages.currentWidget() is not panel.empty and _names(panel) == ["tiny-test-model"]
        assert "Added the folder my models" in panel.notice.text() and str(tmp_path) not in panel.notice.text()
        saved = panel.workstation.paths.settings_file
        await until(saved.exists)
        assert str(folder) in saved.read_text(encoding="utf-8")

    qloop.run_until_complete(scenario())


def test_a_search_that_matches_nothing_says_so_and_clears(qloop, make_library, library):
    async def scenario():
        panel = await make_library([library])
        panel.search.setText("no-such-model-anywhere")
        assert panel.pages.currentWidget() is panel.no_match and "no-such-model-anywhere" in panel.no_match.text.text()
        panel.no_match.button("Clear search").click()
        assert panel.search.text() == "" and panel.pages.currentIndex() == 0 and panel.proxy.rowCount() == 5

    qloop.run_until_complete(scenario())


def test_the_rows_chat_action_loads_that_model(qloop, make_library, library):
    from PySide6.QtTest import QTest

    async def scenario():
        panel = await make_library([library])
        asked: list[str] = []
        panel.load_in_chat_requested.connect(asked.append)
        served: list[str] = []
        panel.serve_in_vllm_requested.connect(served.append)
        for name in ("tiny-test-model", "hf-llama", "cut.gguf"):
            row = _names(panel).index(name)
            rect = panel.table.visualRect(panel.proxy.index(row, ACTION))
            QTest.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert asked == [_entry(panel, "tiny-test-model").path] and served == [str(library / "hf-llama")]

    qloop.run_until_complete(scenario())


def test_a_long_name_and_the_model_file_name_are_one_name_and_a_secondary_line(qloop, make_library, tmp_path):
    from tests.support.gguf_factory import write_tiny_gguf

    folder = tmp_path / "named"
    folder.mkdir()
    write_tiny_gguf(folder / "gemma-3-270m-q4_k_m.gguf", name="Gemma 3 270m")
    write_tiny_gguf(folder / "no-name-q8_0.gguf", name="")

    async def scenario():
        panel = await make_library([folder])
        assert sorted(_names(panel)) == ["Gemma 3 270M", "no-name-q8_0"]
        row = _names(panel).index("Gemma 3 270M")
        assert panel.proxy.index(row, 0).data(SECONDARY_ROLE) == "gemma-3-270m-q4_k_m.gguf · Model folder"

    qloop.run_until_complete(scenario())


LONG_NAME = "A Remarkably Long Model Name That Goes On " * 4


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_library_fits_a_small_laptop_in_every_state(qloop, make_library, library, tmp_path, monkeypatch, theme):
    from PySide6.QtWidgets import QTabWidget

    from tests.support.gguf_factory import write_tiny_gguf
    from tests.support.layout import assert_fits
    from tests.support.page_frame import themed, window_frame

    async def scenario():
        with themed(theme):
            ollama_models = str(library.parent / "ollama")
            monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
            empty = await make_library([])
            tabs = QTabWidget()
            tabs.addTab(empty, "Library")
            empty.show()  # shown on its own first: back in view inside the tabs
            with window_frame(tabs) as frame:
                assert empty.empty.isVisible()
                assert_fits(frame)  # empty
                gate = threading.Event()
                real_scan = library_module.ModelLibrary.scan
                monkeypatch.setattr(
                    library_module.ModelLibrary, "scan", lambda lib, *a: gate.wait(10) and real_scan(lib, *a)
                )
                task = empty.rescan()
                await until(empty.progress.isVisible)
                assert empty.status_label.text() == "Scanning…"
                assert_fits(frame)  # scanning
                gate.set()
                await task
                monkeypatch.setattr(library_module.ModelLibrary, "scan", real_scan)
            empty.setParent(None)  # the page is its own window again, for its fixture to shut down
            monkeypatch.setenv("OLLAMA_MODELS", ollama_models)
            write_tiny_gguf(library / "long.gguf", name=LONG_NAME)
            for index in range(30):
                shutil.copyfile(library / "tiny.gguf", library / f"copy-{index}-{'x' * 60}.gguf")
            full = await make_library([library, tmp_path / ("unplugged-" + "y" * 120)])
            tabs = QTabWidget()  # the frame hid the first one as it closed
            tabs.addTab(full, "Library")
            full.show()
            with window_frame(tabs) as frame:
                assert full.problems_label.isVisible()
                full.select_path(str(library / "long.gguf"))
                await until(lambda: full.details is not None, 10)
                await until(lambda: full.estimator.verdict is not None, 10)
                full.advanced_section.set_expanded(True)
                full._say("A long notice about something that happened " * 5, error=True)
                assert_fits(frame)  # many rows, a long name, notices, a folder problem, everything open
                frame.resize(1366, 768)
                assert_fits(frame)
            full.setParent(None)

    qloop.run_until_complete(scenario())


def test_the_window_with_the_library_fits(qloop, make_window, library):
    async def scenario():
        window = await make_window()
        window.workstation.update_settings(model_folders=[str(library)])
        page = window.open_path("models/library")
        await until(lambda: window.models_panel.last_scan is not None and window.models_panel._scan_task.done())
        assert page is window.models_panel
        hint = window.pages.currentWidget().minimumSizeHint()
        room = (1024 - (window.width() - window.pages.width()), 700 - (window.height() - window.pages.height()))
        assert hint.width() <= room[0] and hint.height() <= room[1], (hint, room)

    qloop.run_until_complete(scenario())


def test_a_models_chat_defaults_are_edited_from_the_library(qloop, make_library, library):
    async def scenario():
        panel = await make_library([library])
        path = str(library / "tiny.gguf")
        panel.select_path(path)
        box = panel.defaults_box
        await until(lambda: box.current is not None)
        assert panel.defaults_section.isVisibleTo(panel) and not box.isVisibleTo(panel)  # closed until opened
        assert box.status.text().startswith("Uses the app's defaults")
        assert box.context_size.value() == panel.workstation.settings.load.n_ctx
        box.context_size.setValue(8192)
        box.temperature.setValue(0.3)
        box.max_tokens.setValue(0)  # until the context is full
        await box.save()
        store = panel.workstation.model_settings
        saved = store.saved(path)
        assert saved is not None and saved.load.n_ctx == 8192 and saved.sampling.temperature == 0.3
        assert saved.sampling.max_tokens is None and saved.sampling.top_p == panel.workstation.settings.sampling.top_p
        assert box.status.text().startswith("Saved for this model")
        assert (panel.workstation.paths.data_dir / "model-settings.json").is_file()
        panel.select_path(str(library / "spare.gguf"))  # another model: its own (default) values
        await until(lambda: box.current is not None and box.entry.endswith("spare.gguf"))
        assert box.context_size.value() == panel.workstation.settings.load.n_ctx
        panel.select_path(path)
        await until(lambda: box.current is not None and box.entry == path)
        assert box.context_size.value() == 8192 and round(box.temperature.value(), 2) == 0.3
        await box.reset()
        assert store.saved(path) is None and box.context_size.value() == panel.workstation.settings.load.n_ctx
        panel.select_path(str(library / "hf-llama"))
        assert not panel.defaults_section.isVisibleTo(panel)  # vLLM's folders have no llama.cpp defaults

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_memory_bars_use_three_distinct_hues_in_both_palettes(theme):
    from app.ui.pages.models.memory_bars import segment_colors
    from app.ui.style.theme import _palette

    colors = segment_colors(_palette(theme == "dark"))
    hues = [c.hslHue() for c in colors]
    for i, a in enumerate(hues):
        for b in hues[i + 1 :]:
            assert min(abs(a - b), 360 - abs(a - b)) >= 60, hues  # not two shades of one blue


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_window_fits_with_every_models_page(qloop, make_window, library, theme):
    from tests.support.layout import assert_fits
    from tests.support.page_frame import themed

    async def scenario():
        with themed(theme):
            window = await make_window()
            window.workstation.update_settings(model_folders=[str(library)])
            for path in ("models/library", "models/discover", "models/downloads", "models/ollama"):
                page = window.open_path(path)
                assert page.isVisible()
                if path == "models/library":
                    await until(lambda: window.models_panel.last_scan is not None)
                    window.models_panel.select_path(str(library / "tiny.gguf"))
                    await until(lambda: window.models_panel.details is not None)
                assert_fits(window)
                window.resize(1024, 700)
                assert (window.width(), window.height()) == (1024, 700)

    qloop.run_until_complete(scenario())
