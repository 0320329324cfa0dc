"""Speculative decoding and parallel sequences per model, in the chat drawer: the draft picker lists the library's
GGUFs that can draft (checked off the Qt thread), the others disabled with the failed check's words, projector
files never; the choice is saved with the model's settings; a reply's figures show the acceptance rate and, once
the model has replied without speculation, the speed-up."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import gguf
from PySide6.QtWidgets import QFormLayout, QWidget

from app.core.chat.conversation import Message, ReplyStats, Role
from app.core.params import LoadParams
from app.ui.pages.chat.message_item import ItemState, figures, item_key
from app.ui.widgets.speculation_fields import NO_DRAFTS, SpeculationFields
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.waiting import until
from tests.ui.test_models_panel import make_library  # noqa: F401 (the fixture)


def _other_vocab(path: Path) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(300)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def library(folder: Path, tiny_gguf: Path) -> dict[str, Path]:
    folder.mkdir(exist_ok=True)
    files = {
        "model": Path(shutil.copyfile(tiny_gguf, folder / "big.gguf")),
        "draft": write_tiny_gguf(folder / "small-draft.gguf", n_layer=1, seed=3),
        "other": _other_vocab(folder / "other-vocab.gguf"),
        "projector": Path(shutil.copyfile(tiny_gguf, folder / "mmproj-big.gguf")),
    }
    return files


def test_draft_picker_checks_off_the_qt_thread_and_explains_the_rest(qloop, qtbot, tmp_path, tiny_gguf) -> None:
    files = library(tmp_path / "models", tiny_gguf)
    host = QWidget()
    qtbot.addWidget(host)
    fields = SpeculationFields(host)
    fields.add_rows(QFormLayout(host))
    host.show()

    async def scenario():
        fields.set_values("draft:" + str(files["draft"]), 2)
        task = fields.set_model(str(files["model"]), [str(p) for p in files.values()])
        assert fields.draft_note.text().startswith("Checking")  # the headers are read in the executor
        assert fields.speculative() == f"draft:{files['draft']}"  # the saved choice holds while it checks
        await task
        names = [fields.draft.itemText(i) for i in range(fields.draft.count())]
        assert names == ["small-draft.gguf", "other-vocab.gguf"]  # the model itself and its projector left out
        assert fields.draft.currentData() == str(files["draft"])
        item = fields.draft.model().item(1)
        assert not item.isEnabled()
        assert "vocabulary size differs" in fields.draft.itemData(1, 3)  # Qt.ToolTipRole
        params = fields.apply(LoadParams())
        assert (params.speculative, params.n_parallel) == (f"draft:{files['draft']}", 2)
        fields.n_parallel.setValue(0)
        assert fields.n_parallel.text() == "auto" and fields.apply(LoadParams()).n_parallel is None  # the estimate
        fields.n_parallel.setValue(1)
        assert fields.apply(LoadParams()).n_parallel == 1  # one at a time, on the API server too
        await fields.set_model(str(files["other"]), [str(files["model"]), str(files["projector"])])
        assert fields.draft_note.text() == NO_DRAFTS and not fields.draft.isEnabled()
        assert fields.speculative() == "off"
        fields.mode.setCurrentIndex(fields.mode.findData("ngram"))
        assert not fields.draft.isVisible() and fields.speculative() == "ngram"

    qloop.run_until_complete(scenario())


def test_the_drawer_saves_speculation_and_parallel_for_the_model(qloop, make_window, tmp_path, tiny_gguf) -> None:
    files = library(tmp_path / "models", tiny_gguf)

    async def scenario():
        window = await make_window()
        window.workstation.update_settings(model_folders=[str(tmp_path / "models")])
        panel = window.chat_panel
        entry = str(files["model"])
        await until(lambda: entry in panel.models.chat_ggufs, 30)  # the library scanned, offered to the chat
        panel.model_bar.select(entry)  # the person picks the model in the bar
        panel.model_bar.selection_changed.emit(entry)
        fields = panel.drawer.load.speculation
        await until(lambda: fields.entry == entry and fields.draft.count() > 0, 30)
        assert fields.draft.itemText(0) == "small-draft.gguf"
        fields.mode.setCurrentIndex(fields.mode.findData("draft"))
        fields.n_parallel.setValue(3)
        panel.models.flush_settings()
        store = panel.workstation.model_settings
        await until(lambda: store.effective_load(entry).n_parallel == 3, 10)
        assert store.effective_load(entry).speculative == f"draft:{files['draft']}"
        panel.drawer.load.set_params(LoadParams())  # another model shown, then this one again
        panel.models.show_settings(entry)
        assert fields.mode.currentData() == "draft" and fields.n_parallel.value() == 3

    qloop.run_until_complete(scenario())


def test_reply_figures_show_the_acceptance_rate() -> None:
    stats = ReplyStats(completion_tokens=90, decode_tokens_per_s=120.0, spec_mode="ngram", spec_drafted=80,
                       spec_accepted=50)  # fmt: skip
    short, tip = figures(Message(Role.ASSISTANT, "hi", stats=stats))
    assert short == "90 tokens · 120.0 tok/s · 62% accepted"
    assert "speculative decoding (n-gram lookup): 50 of 80 drafted tokens accepted" in tip
    plain, _tip = figures(Message(Role.ASSISTANT, "hi", stats=ReplyStats(completion_tokens=9)))
    assert "accepted" not in plain


def test_reply_figures_show_the_speed_up_once_it_is_known() -> None:
    unknown = ReplyStats(completion_tokens=90, decode_tokens_per_s=120.0, spec_mode="ngram", spec_drafted=80,
                         spec_accepted=50)  # fmt: skip
    known = replace(unknown, spec_speedup=1.8)
    short, tip = figures(Message(Role.ASSISTANT, "hi", stats=known))
    assert short == "90 tokens · 120.0 tok/s · 62% accepted · 1.8× vs off"
    assert "1.80× as fast as the median of this model's replies without it" in tip
    assert "vs off" not in figures(Message(Role.ASSISTANT, "hi", stats=unknown))[0]
    nothing = replace(known, spec_drafted=0, spec_accepted=0)
    assert figures(Message(Role.ASSISTANT, "hi", stats=nothing))[0].endswith("nothing drafted · 1.8× vs off")
    state = ItemState()  # the speed-up is part of what an item shows: it is redrawn when it changes
    assert item_key(Message(Role.ASSISTANT, "hi", stats=unknown), state) != item_key(
        Message(Role.ASSISTANT, "hi", stats=known), state
    )


def test_the_library_edits_speculation_and_parallel_for_a_model(qloop, make_library, tmp_path, tiny_gguf) -> None:  # noqa: F811
    files = library(tmp_path / "models", tiny_gguf)

    async def scenario():
        panel = await make_library([tmp_path / "models"])
        entry = str(files["model"])
        panel.select_path(entry)
        box = panel.defaults_box
        fields = box.speculation
        await until(lambda: box.current is not None and fields.entry == entry and fields.draft.count() > 0, 30)
        assert [fields.draft.itemText(i) for i in range(fields.draft.count())] == [
            "small-draft.gguf",
            "other-vocab.gguf",
        ]
        fields.mode.setCurrentIndex(fields.mode.findData("ngram"))
        fields.n_parallel.setValue(4)
        await box.save()
        saved = panel.workstation.model_settings.saved(entry)
        assert saved is not None and (saved.load.speculative, saved.load.n_parallel) == ("ngram", 4)
        panel.select_path(str(files["draft"]))
        await until(lambda: box.current is not None and box.entry == str(files["draft"]))
        assert fields.mode.currentData() == "off" and fields.n_parallel.value() == 0
        panel.select_path(entry)
        await until(lambda: box.current is not None and box.entry == entry)
        assert fields.mode.currentData() == "ngram" and fields.n_parallel.value() == 4

    qloop.run_until_complete(scenario())


def test_ngram_chosen_in_the_drawer_reaches_the_reply_figures(qtbot, qloop, make_window, tiny_gguf) -> None:
    """The real llama.cpp worker loads with the drawer's n-gram lookup; the reply's figures show its acceptance."""
    from tests.ui.test_chat_panel import _load, _messages, _reply_done, _send

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, tiny_gguf)
        fields = panel.drawer.load.speculation
        fields.mode.setCurrentIndex(fields.mode.findData("ngram"))
        assert panel.drawer.reload_button.isVisible()  # a load option: applies on the next load
        panel.models.flush_settings()
        await panel.models._saving
        panel.drawer.reload_button.click()
        await until(lambda: _engine_loaded_with_ngram(panel) and panel.models.loading.done(), 120)
        _send(qtbot, panel, "one two three one two three one two three")
        await until(_reply_done(panel, 2), 120)
        stats = _messages(panel)[-1].stats
        assert stats is not None and stats.spec_mode == "ngram"
        short, tip = figures(_messages(panel)[-1])
        assert "speculative decoding (n-gram lookup)" in tip
        assert short.endswith("accepted") or short.endswith("nothing drafted")

    qloop.run_until_complete(scenario())


def _engine_loaded_with_ngram(panel) -> bool:
    params = panel.workspace.loaded_params()
    return params is not None and params.speculative == "ngram"


def test_a_chosen_draft_joins_the_librarys_estimate(qloop, make_library, tmp_path, tiny_gguf) -> None:  # noqa: F811
    """Choosing a draft model in the Library grows the estimate and the fit verdict by the draft's memory (its header
    read off the Qt thread); back to off, they shrink again; a saved draft is in the estimate when the model is
    chosen again."""
    files = library(tmp_path / "models", tiny_gguf)

    async def scenario():
        panel = await make_library([tmp_path / "models"])
        entry, estimator = str(files["model"]), panel.estimator
        panel.select_path(entry)
        box, fields = panel.defaults_box, panel.defaults_box.speculation
        await until(lambda: box.current is not None and fields.draft.count() > 0 and estimator.verdict is not None, 30)
        alone, verdict = estimator.estimate, estimator.verdict
        assert alone is not None and alone.draft_bytes == 0
        fields.mode.setCurrentIndex(fields.mode.findData("draft"))
        assert fields.speculative() == f"draft:{files['draft']}"
        await until(lambda: estimator.estimate is not None and estimator.estimate.draft_bytes > 0, 30)
        assert estimator.estimate.total_bytes == alone.total_bytes + estimator.estimate.draft_bytes
        assert estimator.verdict is not None and estimator.verdict.needed_bytes > verdict.needed_bytes
        assert "Includes the draft model" in estimator.verdict_label.text()
        with_draft = estimator.estimate.total_bytes
        fields.mode.setCurrentIndex(fields.mode.findData("off"))
        assert estimator.estimate.total_bytes == alone.total_bytes and estimator.draft is None
        fields.mode.setCurrentIndex(fields.mode.findData("draft"))
        await box.save()
        panel.select_path(str(files["draft"]))
        await until(lambda: box.entry == str(files["draft"]) and box.current is not None, 30)
        assert estimator.draft is None  # the draft itself speculates with nothing
        panel.select_path(entry)
        await until(lambda: estimator.estimate is not None and estimator.estimate.total_bytes == with_draft, 30)

    qloop.run_until_complete(scenario())
