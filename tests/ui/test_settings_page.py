"""The Settings page: every setting kept and round-tripped exactly, Save/Revert, validation gating Save, the theme
and the log level applied at once, an unreadable settings file never overwritten, and a layout that fits."""

from __future__ import annotations

import copy
import logging
from dataclasses import replace

import pytest
from PySide6.QtWidgets import QLineEdit

from app.core.params import LoadParams, SamplingParams
from app.core.settings import Settings, load_settings
from app.ui.pages.settings.defaults_sections import FROM_MODEL
from tests.support.layout import assert_fits
from tests.support.page_frame import themed

CUSTOM = Settings(
    model_folders=["/models/a", "/srv/gguf"],
    load=LoadParams(
        n_ctx=8192,
        n_gpu_layers=20,
        n_threads=6,
        n_batch=256,
        flash_attn=True,
        type_k="q8_0",
        type_v="q4_0",
        use_mmap=False,
        use_mlock=True,
        chat_format="llama-3",
        repeat_last_n=128,
    ),
    sampling=SamplingParams(
        temperature=0.35, top_p=0.9, top_k=20, min_p=0.1, repeat_penalty=1.3, max_tokens=None, seed=1234, stop=("##",)
    ),
    system_prompt="Be terse.\nAnswer in English.",
    recent_models=["/models/a/x.gguf"],
    log_level="DEBUG",
    ollama_host="http://ollama-box:11434",
    vllm_python="/opt/vllm/bin/python",
    vllm_remote_url="http://gpu-box:8000",
    vllm_options={"max_model_len": 4096},
    download_dir="/data/hub",
    hf_token="hf_secret",
    monitor_interval_s=1.25,
    prometheus_enabled=True,
    prometheus_port=9500,
    theme="dark",
    restore_last_model=False,
)


@pytest.fixture
def make_page(make_framed_page):
    """``make_page(settings)``: the page in a frame shaped like the main window, shown at 1024×700."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.settings.page import SettingsPage

    def make(settings: Settings | None = None, context: Workstation | None = None) -> SettingsPage:
        if context is None and settings is not None:
            context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
            context.settings = copy.deepcopy(settings)
        return make_framed_page(SettingsPage, context)

    return make


@pytest.fixture
def app_logger():
    logger = logging.getLogger("app")
    level = logger.level
    yield logger
    logger.setLevel(level)


class _Changes:
    """The SettingsChanged events a workstation emits while the block runs."""

    def __init__(self, workstation) -> None:
        self.workstation, self.events = workstation, []

    def __enter__(self) -> list:
        self._unsubscribe = self.workstation.subscribe(self.events.append)
        return self.events

    def __exit__(self, *exc) -> None:
        self._unsubscribe()


def _save(qtbot, page) -> Settings:
    """Click Save: the changed fields go the one road (an event names them); the settings in use after it."""
    with _Changes(page.workstation) as events:
        page.save_button.click()
    assert len(events) == 1 and events[0].names
    return copy.deepcopy(page.workstation.settings)


@pytest.mark.parametrize(
    "settings",
    [
        CUSTOM,
        Settings(),
        Settings(
            load=LoadParams(n_gpu_layers=0, chat_format="my-own-format"),
            sampling=SamplingParams(temperature=0.123456, min_p=0.0, max_tokens=2048, seed=0),
            log_level="WARNING",
            monitor_interval_s=0.333333,
            theme="light",
        ),
    ],
    ids=["custom", "defaults", "odd-values"],
)
def test_unchanged_settings_round_trip_exactly_and_save_waits_for_a_change(qtbot, make_page, settings):
    page = make_page(settings)
    assert page.settings() == settings and page.settings() is not page.workstation.settings
    assert not page.has_unsaved_changes()
    assert not page.save_button.isEnabled() and not page.revert_button.isEnabled()
    with _Changes(page.workstation) as events:
        assert page.save() is None
    assert events == []


def test_widgets_show_none_values_and_sampling_figures_like_the_chat(make_page):
    page = make_page(Settings(load=LoadParams(n_gpu_layers=None, n_threads=None)))
    loading, sampling = page.loading, page.sampling
    assert loading.all_gpu_layers.isChecked() and not loading.n_gpu_layers.isEnabled()
    assert loading.n_threads.text() == "Automatic"
    assert sampling.seed.text() == "random"
    assert loading.chat_format.currentText() == FROM_MODEL
    sampling.max_tokens.setValue(0)
    assert sampling.max_tokens.text() == "until context is full"
    assert sampling.top_p.box.text() == "0.95"  # not 0.950
    assert sampling.temperature.box.text() == "0.7" and sampling.repeat_penalty.box.text() == "1.1"


def test_every_setting_is_on_the_page(make_page):
    page = make_page(CUSTOM)
    assert [s.name for s in page.sections] == [
        "General", "Loading", "Sampling", "Models & folders", "Downloads", "Ollama", "vLLM", "Monitor", "Log",
    ]  # fmt: skip
    assert page.general.theme.currentText() == "Dark" and not page.general.restore_last_model.isChecked()
    assert page.general.system_prompt.toPlainText() == CUSTOM.system_prompt
    assert page.models.model_folders() == CUSTOM.model_folders
    assert page.downloads.download_dir.edit.text() == "/data/hub"
    assert page.downloads.hf_token.text() == "hf_secret"
    assert page.downloads.hf_token.echoMode() == QLineEdit.EchoMode.Password  # masked until Show
    page.downloads.show_token.click()
    assert page.downloads.hf_token.echoMode() == QLineEdit.EchoMode.Normal
    assert page.ollama.ollama_host.text() == CUSTOM.ollama_host
    assert page.vllm.vllm_python.edit.text() == CUSTOM.vllm_python
    assert page.vllm.vllm_remote_url.text() == CUSTOM.vllm_remote_url
    assert page.monitor.monitor_interval.box.value() == pytest.approx(1.25, abs=0.051)
    assert page.monitor.prometheus_enabled.isChecked() and page.monitor.prometheus_port.value() == 9500
    assert page.log_section.log_level.currentText() == "DEBUG"


def test_edits_change_the_saved_settings(qtbot, make_page, app_logger):
    page = make_page(CUSTOM)
    loading, sampling, models = page.loading, page.sampling, page.models
    assert models.add_model_folder("/new/models")
    assert not models.add_model_folder("/models/a")  # already listed
    models.folder_list.item(0).setSelected(True)
    models.remove_folder_button.click()
    loading.n_ctx.setValue(2048)
    loading.all_gpu_layers.setChecked(True)
    loading.n_threads.setValue(0)
    loading.type_k.setCurrentText("f16")
    loading.use_mlock.setChecked(False)
    loading.chat_format.setCurrentText(FROM_MODEL)
    sampling.temperature.box.setValue(1.25)
    sampling.top_k.setValue(64)
    sampling.max_tokens.setValue(1000)
    sampling.seed.setValue(-1)
    page.general.system_prompt.setPlainText("You are helpful.")
    page.general.restore_last_model.setChecked(True)
    page.log_section.log_level.setCurrentText("ERROR")
    page.vllm.vllm_python.edit.setText("  /srv/venv/bin/python ")
    page.monitor.monitor_interval.box.setValue(2.0)
    page.monitor.prometheus_enabled.setChecked(False)
    assert page.has_unsaved_changes() and page.unsaved_label.isVisible() and page.revert_button.isEnabled()

    saved = _save(qtbot, page)
    assert saved.model_folders == ["/srv/gguf", "/new/models"]
    assert saved.load == replace(
        CUSTOM.load, n_ctx=2048, n_gpu_layers=None, n_threads=None, type_k="f16", use_mlock=False, chat_format=None
    )
    assert saved.load.repeat_last_n == 128  # no widget here: carried over
    assert saved.sampling == replace(CUSTOM.sampling, temperature=1.25, top_k=64, max_tokens=1000, seed=None)
    assert saved.sampling.stop == ("##",)
    assert (saved.system_prompt, saved.restore_last_model, saved.log_level) == ("You are helpful.", True, "ERROR")
    assert saved.vllm_python == "/srv/venv/bin/python" and saved.vllm_options == CUSTOM.vllm_options
    assert saved.monitor_interval_s == 2.0 and not saved.prometheus_enabled
    assert saved.recent_models == CUSTOM.recent_models and saved.hf_token == CUSTOM.hf_token
    assert app_logger.level == logging.ERROR  # applied at once
    assert not page.has_unsaved_changes() and not page.save_button.isEnabled()


def test_quantized_v_without_flash_attention_disables_save(qtbot, make_page):
    page = make_page(CUSTOM)
    page.loading.n_batch.setValue(128)
    assert page.save_button.isEnabled() and not page.problems_label.isVisibleTo(page)
    page.loading.flash_attn.setChecked(False)  # type_v is q4_0: now it cannot load
    assert not page.save_button.isEnabled()
    assert page.problems_label.isVisibleTo(page) and "flash attention" in page.problems_label.text()
    assert "problems" in page.save_button.toolTip()
    with _Changes(page.workstation) as events:
        page.save_button.click()
        assert page.save() is None
    assert events == []
    page.loading.type_v.setCurrentText("f16")
    assert page.save_button.isEnabled() and not page.problems_label.isVisibleTo(page)
    assert _save(qtbot, page).load.type_v == "f16"


def test_small_context_is_reported(make_page):
    page = make_page(Settings())
    page.loading.n_ctx.setValue(8)
    assert "Context size" in page.problems_label.text()
    assert not page.save_button.isEnabled()


def test_explicit_gpu_layers_and_custom_chat_format(qtbot, make_page):
    page = make_page(Settings())
    page.loading.all_gpu_layers.setChecked(False)
    assert page.loading.n_gpu_layers.isEnabled()
    page.loading.n_gpu_layers.setValue(33)
    page.loading.chat_format.setEditText("  zephyr  ")
    saved = _save(qtbot, page)
    assert saved.load.n_gpu_layers == 33 and saved.load.chat_format == "zephyr"


def test_revert_forgets_the_edits(qtbot, make_page):
    page = make_page(CUSTOM)
    page.loading.n_ctx.setValue(1024)
    page.general.restore_last_model.setChecked(True)
    with _Changes(page.workstation) as events:
        page.revert_button.click()
    assert events == []
    assert page.settings() == CUSTOM and not page.save_button.isEnabled()
    assert page.loading.n_ctx.value() == 8192 and not page.general.restore_last_model.isChecked()


def test_settings_from_other_pages_show_and_are_kept(qtbot, make_page):
    page = make_page(Settings())
    page.workstation.update_settings(vllm_python="/from/the/vllm/page")  # as the vLLM page does
    assert page.vllm.vllm_python.edit.text() == "/from/the/vllm/page" and not page.has_unsaved_changes()
    page.loading.n_ctx.setValue(2048)  # now an edit is pending …
    page.workstation.update_settings(prometheus_port=9999)  # … and the Monitor page changes its port
    assert page.loading.n_ctx.value() == 2048  # the edit is kept
    saved = _save(qtbot, page)
    assert saved.load.n_ctx == 2048 and saved.prometheus_port == 9999  # neither overwrites the other


def test_save_then_reload_round_trips_through_the_file(qtbot, qloop, make_page):
    page = make_page(Settings())
    context = page.workstation

    async def scenario():
        page.general.restore_last_model.setChecked(False)
        page.sampling.top_p.box.setValue(0.9)
        page.ollama.ollama_host.setText("http://other:11434")
        page.downloads.hf_token.setText("hf_new")
        saved = _save(qtbot, page)
        await context.settings_saved()
        on_disk = load_settings(context.paths.settings_file)
        assert on_disk == saved
        assert not on_disk.restore_last_model and on_disk.sampling.top_p == 0.9 and on_disk.hf_token == "hf_new"
        again = make_page(on_disk)
        assert again.settings() == saved
        assert again.sampling.top_p.box.text() == "0.9" and not again.general.restore_last_model.isChecked()

    qloop.run_until_complete(scenario())


def _choose_theme(qtbot, page, label: str) -> Settings:
    """Choose a theme in the list (no Save): it alone is changed at once; the settings in use after it."""
    with _Changes(page.workstation) as events:
        page.general.theme.setCurrentText(label)
    assert [event.names for event in events] == [frozenset({"theme"})]
    return copy.deepcopy(page.workstation.settings)


def test_a_chosen_theme_applies_at_once_and_is_saved_alone(qtbot, make_page):
    from PySide6.QtWidgets import QApplication

    from app.ui.style.theme import tokens

    app = QApplication.instance()
    with themed("light"):
        page = make_page(Settings(theme="light"))
        style = app.style()
        page.loading.n_ctx.setValue(2048)  # an edit that waits for Save
        saved = _choose_theme(qtbot, page, "Dark")
        assert saved.theme == "dark" and saved.load.n_ctx == Settings().load.n_ctx  # the theme only
        assert not tokens(app.palette()).dark  # applied on the next event-loop turn, not inside the combo's signal
        qtbot.waitUntil(lambda: tokens(app.palette()).dark)
        assert "QPushButton" in app.styleSheet() and app.style() is style  # palette and sheet; the style stays
        assert page.changed_fields() == ["load"] and page.save_button.isEnabled()
        assert _choose_theme(qtbot, page, "System").theme == "system"
        qtbot.waitUntil(lambda: not tokens(app.palette()).dark)  # the platform's palette is back (light, offscreen)
        assert _save(qtbot, page).load.n_ctx == 2048


def test_showing_the_settings_applies_and_saves_no_theme(make_page):
    page = make_page(CUSTOM)  # the fields are filled while the page is built and shown
    with _Changes(page.workstation) as events:
        page.workstation.update_settings(theme="light")  # another page's change comes in
    assert page.general.theme.currentText() == "Light"
    assert not page.theme_pending() and [event.names for event in events] == [frozenset({"theme"})]


def test_an_unreadable_settings_file_is_never_overwritten(qtbot, qloop, make_page):
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    paths = app_paths().ensure()
    broken = b'{"version": 1, "load": {"n_ctx": '
    paths.settings_file.write_bytes(broken)
    context = Workstation.create(paths, install_logging("INFO", None))
    assert context.settings_problem
    page = make_page(context=context)

    async def scenario():
        assert "could not be read" in page.notices.text() and str(paths.settings_file) not in page.notices.text()
        page.loading.n_ctx.setValue(2048)
        assert page.has_unsaved_changes() and not page.save_button.isEnabled()
        assert "could not be read" in page.save_button.toolTip()
        with _Changes(context) as events:
            assert page.save() is None
        assert events == []
        await page.reread()  # still broken: nothing changes
        assert paths.settings_file.read_bytes() == broken
        assert "still cannot be read" in page.notices.text() and context.settings_problem

        paths.settings_file.write_text('{"version": 1, "load": {"n_ctx": 1024}}', encoding="utf-8")
        with _Changes(context) as events:
            await page.reread()
        assert events and "load" in events[0].names and context.settings.load.n_ctx == 1024
        assert context.settings_problem is None and not page.notices.isVisible()
        assert page.loading.n_ctx.value() == 1024
        page.loading.n_ctx.setValue(4096)
        assert page.save_button.isEnabled()

    qloop.run_until_complete(scenario())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_section_fits_a_small_laptop(make_page, theme):
    with themed(theme):
        page = make_page(CUSTOM)
        page.loading.flash_attn.setChecked(False)  # a problem shows at the bottom
        page.loading.n_ctx.setValue(8)
        page.notices.show_notice("A notice with a long sentence that goes on. " * 4, "warning")
        page.models.add_model_folder("/a/very/long/folder/" + "name-" * 60)
        for section in page.sections:
            page.show_section(section.name)
            assert page.stack.currentIndex() == page.sections.index(section)
            assert_fits(page)
        page.window().resize(1366, 768)
        assert_fits(page)


def test_mlock_tooltip_mentions_swap_and_chat_formats_are_offered(make_page):
    page = make_page(Settings())
    assert "swap" in page.loading.use_mlock.toolTip() and "KV cache" in page.loading.use_mlock.toolTip()
    for name in ("gemma", "chatml", "llama-2", "llama-3", "mistral-instruct", "qwen", "zephyr"):
        assert page.loading.chat_format.findText(name) >= 0
