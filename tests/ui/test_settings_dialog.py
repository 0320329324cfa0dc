"""SettingsDialog: exact round trip, edits, None-meaning widgets, validation gating Save."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialog

from app.core.params import LoadParams, SamplingParams
from app.core.settings import Settings
from app.ui.dialogs.settings_dialog import FROM_MODEL, SettingsDialog

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
    ),
    sampling=SamplingParams(
        temperature=0.35, top_p=0.9, top_k=20, min_p=0.1, repeat_penalty=1.3, max_tokens=None, seed=1234
    ),
    system_prompt="Be terse.\nAnswer in English.",
    recent_models=["/models/a/x.gguf"],
    log_level="DEBUG",
)


@pytest.fixture
def make_dialog(qtbot):
    def make(settings: Settings) -> SettingsDialog:
        dialog = SettingsDialog(settings)
        qtbot.addWidget(dialog)
        dialog.open()
        return dialog

    return make


def _save(qtbot, dialog: SettingsDialog) -> Settings:
    with qtbot.waitSignal(dialog.settings_saved, timeout=1000) as blocker:
        dialog.save_button().click()
    assert dialog.result() == QDialog.DialogCode.Accepted
    return blocker.args[0]


@pytest.mark.parametrize(
    "settings",
    [
        CUSTOM,
        Settings(),
        Settings(
            load=LoadParams(n_gpu_layers=0, chat_format="my-own-format"),
            sampling=SamplingParams(temperature=0.123456, min_p=0.0, max_tokens=2048, seed=0),
            log_level="WARNING",
        ),
    ],
    ids=["custom", "defaults", "odd-values"],
)
def test_saving_unchanged_settings_round_trips_exactly(qtbot, make_dialog, settings):
    dialog = make_dialog(settings)
    assert dialog.isVisible()
    saved = _save(qtbot, dialog)
    assert saved == settings
    assert saved is not settings


def test_open_does_not_block(make_dialog):
    dialog = make_dialog(Settings())
    assert dialog.isVisible()  # open() returned while the dialog is up: nothing blocked.


def test_widgets_show_none_values(make_dialog):
    dialog = make_dialog(Settings(load=LoadParams(n_gpu_layers=None, n_threads=None)))
    assert dialog.all_gpu_layers.isChecked()
    assert not dialog.n_gpu_layers.isEnabled()
    assert dialog.n_threads.text() == "Automatic"
    assert dialog.seed.text() == "random"
    assert dialog.chat_format.currentText() == FROM_MODEL
    dialog.max_tokens.setValue(0)
    assert dialog.max_tokens.text() == "until context is full"


def test_edits_change_the_saved_settings(qtbot, make_dialog):
    dialog = make_dialog(CUSTOM)
    assert dialog.add_model_folder("/new/models")
    assert not dialog.add_model_folder("/models/a")  # Already listed.
    dialog.folder_list.item(0).setSelected(True)
    dialog.remove_folder_button.click()
    dialog.n_ctx.setValue(2048)
    dialog.all_gpu_layers.setChecked(True)
    dialog.n_threads.setValue(0)
    dialog.type_k.setCurrentText("f16")
    dialog.use_mlock.setChecked(False)
    dialog.chat_format.setCurrentText(FROM_MODEL)
    dialog.temperature.setValue(1.25)
    dialog.top_k.setValue(64)
    dialog.max_tokens.setValue(1000)
    dialog.seed.setValue(-1)
    dialog.system_prompt.setPlainText("You are helpful.")
    dialog.log_level.setCurrentText("ERROR")

    saved = _save(qtbot, dialog)
    assert saved.model_folders == ["/srv/gguf", "/new/models"]
    assert saved.load == LoadParams(
        n_ctx=2048,
        n_gpu_layers=None,
        n_threads=None,
        n_batch=256,
        flash_attn=True,
        type_k="f16",
        type_v="q4_0",
        use_mmap=False,
        use_mlock=False,
        chat_format=None,
    )
    assert saved.sampling == SamplingParams(
        temperature=1.25, top_p=0.9, top_k=64, min_p=0.1, repeat_penalty=1.3, max_tokens=1000, seed=None
    )
    assert saved.system_prompt == "You are helpful."
    assert saved.log_level == "ERROR"
    assert saved.recent_models == CUSTOM.recent_models


def test_explicit_gpu_layers_and_custom_chat_format(qtbot, make_dialog):
    dialog = make_dialog(Settings())
    dialog.all_gpu_layers.setChecked(False)
    assert dialog.n_gpu_layers.isEnabled()
    dialog.n_gpu_layers.setValue(33)
    dialog.chat_format.setEditText("  zephyr  ")
    saved = _save(qtbot, dialog)
    assert saved.load.n_gpu_layers == 33
    assert saved.load.chat_format == "zephyr"


def test_quantized_v_without_flash_attention_disables_save(qtbot, make_dialog):
    dialog = make_dialog(CUSTOM)
    assert dialog.save_button().isEnabled()
    assert not dialog.problems_label.isVisibleTo(dialog)

    dialog.flash_attn.setChecked(False)  # type_v is q4_0: now it cannot load.
    assert not dialog.save_button().isEnabled()
    assert dialog.problems_label.isVisibleTo(dialog)
    assert "flash attention" in dialog.problems_label.text()
    assert dialog.problems() == dialog.load_params().problems() != []

    with qtbot.assertNotEmitted(dialog.settings_saved, wait=50):
        dialog.save_button().click()
    assert dialog.isVisible()

    dialog.type_v.setCurrentText("f16")
    assert dialog.save_button().isEnabled()
    assert not dialog.problems_label.isVisibleTo(dialog)
    assert _save(qtbot, dialog).load.type_v == "f16"


def test_small_context_is_reported(make_dialog):
    dialog = make_dialog(Settings())
    dialog.n_ctx.setValue(8)
    assert "Context size" in dialog.problems_label.text()
    assert not dialog.save_button().isEnabled()


def test_cancel_emits_nothing(qtbot, make_dialog):
    dialog = make_dialog(CUSTOM)
    dialog.n_ctx.setValue(1024)
    with qtbot.assertNotEmitted(dialog.settings_saved, wait=50):
        dialog.reject()
    assert dialog.result() == QDialog.DialogCode.Rejected


def test_mlock_tooltip_mentions_swap(make_dialog):
    dialog = make_dialog(Settings())
    assert "swap" in dialog.use_mlock.toolTip()
    assert "KV cache" in dialog.use_mlock.toolTip()
    for name in ("gemma", "chatml", "llama-2", "llama-3", "mistral-instruct", "qwen", "zephyr"):
        assert dialog.chat_format.findText(name) >= 0
