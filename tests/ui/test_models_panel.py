"""Models → Library, offscreen in the real main window, over real generated GGUFs and an HF-format folder."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QFontDatabase
from PySide6.QtWidgets import QMessageBox

from app.services.library import index as library_module
from app.ui.pages.models.table import ENTRY_ROLE
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
    window.context.settings.model_folders = [str(folder)]
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
        assert [panel.proxy.index(hf_row, c).data() for c in (1, 6, 7)] == ["LlamaForCausalLM", "vLLM", "Model folder"]
        cut = _entry(panel, "cut.gguf")
        assert "truncated" in cut.error and panel.proxy.index(_names(panel).index("cut.gguf"), 6).data() == "error"
        assert "5 models" in panel.status_label.text() and "1 unusable" in panel.status_label.text()
        panel.search.setText("ollama tiny")
        assert _names(panel) == ["tiny:latest"]
        panel.search.setText("LLAMAFORCAUSAL")
        assert _names(panel) == ["hf-llama"]
        panel.search.setText("")
        panel.table.sortByColumn(4, Qt.SortOrder.DescendingOrder)  # size, largest first
        sizes = [panel.proxy.index(r, 0).data(ENTRY_ROLE).size_bytes for r in range(panel.proxy.rowCount())]
        assert sizes == sorted(sizes, reverse=True)

    qloop.run_until_complete(scenario())


def test_detail_shows_metadata_and_the_full_template(qloop, make_window, library):
    async def scenario():
        _window, panel = await _open_library(make_window, library)
        _select(panel, "tiny:latest")
        await until(lambda: panel.details is not None)
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
        assert estimator.verdict.summary in estimator.verdict_label.text()
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
        panel.context.settings.model_folders = []  # the folder stops being a library root before the delete
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
        assert window.pages.currentWidget().currentWidget() is window.vllm_panel
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
        window.context.settings.model_folders = [str(library), str(tmp_path / "unplugged")]
        window.apply_settings(window.context.settings)  # the Settings dialog's path: the panel rescans
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
            assert "system RAM (no GPU here: everything runs from RAM)." in estimator.verdict_label.text()
            assert estimator.gpu_layers.toolTip() == "No NVIDIA driver found. Everything runs from RAM."
            estimator.set_header(header)  # another model: still nothing offered on the GPU
            assert estimator.gpu_layers.value() == 0 and estimator.gpu_layers.maximum() == 0

    qloop.run_until_complete(scenario())
