"""The Modelfiles panel driven as a person would, offscreen: real widgets, Ollama's real parser rules."""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import Qt

from app.core.modelfile.go_template import render_ollama_prompt
from app.core.modelfile.params import format_params
from app.core.modelfile.parser import ModelfileError, parse_modelfile
from app.services.presets import shipped_presets_dir
from app.ui.tasks import running_tasks
from tests.support.fake_ollama import FakeOllama
from tests.support.waiting import until

CHATML = (
    'TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}\n'
    "{{ .Content }}<|im_end|>\n"
    '{{ end }}<|im_start|>assistant\n"""\n'
)


async def _idle() -> None:
    """Let every task the panel started finish (none may outlive the test's event loop)."""
    await until(lambda: not running_tasks())


@pytest.fixture
def make_panel(qloop, qtbot):
    """``await make_panel()`` builds a shown, started Modelfile panel on an isolated home."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.pages.modelfiles.panel import ModelfilePanel

    workstations = []

    async def make(ollama_host: str | None = None):
        context = Workstation.create(app_paths().ensure(), install_logging("INFO", None))
        workstations.append(context)
        context.update_settings(ollama_host=ollama_host or FakeOllama.unused_host())
        panel = ModelfilePanel(context)
        qtbot.addWidget(panel)
        panel.resize(1200, 760)
        panel.show()
        await panel.start()
        return panel

    yield make

    async def finish():
        await _idle()
        for workstation in workstations:
            await workstation.close()  # the shared Ollama client among what it closes

    qloop.run_until_complete(finish())


def _type(qtbot, editor, text: str) -> None:
    """Type ``text`` key by key (Return between lines)."""
    for i, line in enumerate(text.split("\n")):
        if i:
            qtbot.keyClick(editor, Qt.Key.Key_Return)
        if line:
            qtbot.keyClicks(editor, line)


def _ask_button(panel, text: str):
    """The inline question bar's button labelled ``text``."""
    layout = panel.files.ask_bar.buttons
    widgets = [layout.itemAt(i).widget() for i in range(layout.count())]
    return next(w for w in widgets if w is not None and w.text() == text)


async def _settled(panel) -> None:
    await until(lambda: not panel.text.timer.isActive())


def test_typing_raw_text_updates_the_form(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.editor.setFocus()
        _type(qtbot, panel.editor, "FROM llama3.2\nparameter temperature 0.7\n")
        assert panel.text.timer.isActive()  # parsed after a short pause, not on every key
        await _settled(panel)
        assert panel.form.from_combo.currentText() == "llama3.2"
        assert panel.form.params.parameters() == [("temperature", "0.7")]
        panel.editor.moveCursor(panel.editor.textCursor().MoveOperation.End)
        panel.editor.insertPlainText(
            'PARAMETER stop "<|im_end|>"\nSYSTEM """You are terse.\nVery terse."""\n'
            "MESSAGE user Hi\nMESSAGE assistant Hello.\n# a comment stays\n"
        )
        await _settled(panel)
        form = panel.form
        assert form.system.toPlainText() == "You are terse.\nVery terse."
        assert form.params.parameters() == [("temperature", "0.7"), ("stop", "<|im_end|>")]
        assert form.messages.messages() == [("user", "Hi"), ("assistant", "Hello.")]
        assert "# a comment stays" in panel.editor.toPlainText()  # typing never rewrites the text
        assert "•" in panel.title.text()

    qloop.run_until_complete(scenario())


def test_form_edits_regenerate_text_that_parses_back(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText("# old comment\nFROM llama3.2\nPARAMETER temperature 0.7\nRENDERER qwen3\n")
        await _settled(panel)
        form = panel.form
        form.system.setPlainText('Answer in "French".')
        form.params.add_row()
        row = form.params.table.rowCount() - 1
        form.params.table.item(row, 0).setText("num_ctx")
        form.params.set_value(row, "8192")
        form.messages.add_message()
        form.messages.text.setPlainText("Bonjour ?")
        form.from_combo.setCurrentText("qwen2.5:7b")
        text = panel.editor.toPlainText()
        reparsed = parse_modelfile(text)
        assert reparsed.format() == panel.modelfile.format() == text
        assert reparsed.froms() == ["qwen2.5:7b"]
        assert reparsed.system == 'Answer in "French".'
        assert reparsed.parameters() == {"temperature": ["0.7"], "num_ctx": ["8192"]}
        assert reparsed.messages() == [("user", "Bonjour ?")]
        assert reparsed.single("renderer") == "qwen3"  # a command the form does not show is kept
        assert "# old comment" not in text and panel.text.note.isVisible()
        assert not panel.text.timer.isActive()  # the form's text is not parsed again
        panel.editor.undo()  # one undo step per form edit
        assert parse_modelfile(panel.editor.toPlainText()).froms() == ["llama3.2"]

    qloop.run_until_complete(scenario())


def test_malformed_line_shows_ollamas_error_and_pauses_the_form(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        typed = "FROM llama3.2\nPARAMETER temperature 0.7\nTEMPERATURE 0.9\nSYSTEM hi\n"
        panel.editor.setPlainText(typed)
        await _settled(panel)
        with pytest.raises(ModelfileError) as expected:
            parse_modelfile(typed)
        assert panel.text.error_label.isVisible()
        assert panel.text.error_label.text() == str(expected.value)
        assert "(line 3)" in str(expected.value) and "command must be one of" in str(expected.value)
        assert panel.editor.error_line == 3
        marks = panel.editor.extraSelections()
        assert marks and all(mark.cursor.block().blockNumber() == 2 for mark in marks)
        assert not panel.form.tabs.isEnabled() and panel.form.error.isVisible()
        assert panel.editor.toPlainText() == typed
        panel.form.system.setPlainText("ignored while paused")
        assert panel.editor.toPlainText() == typed
        panel.use_in_chat()
        assert "Fix the Modelfile first" in panel.notice.text()

        cursor = panel.editor.textCursor()
        cursor.setPosition(panel.editor.document().findBlockByNumber(2).position())
        cursor.insertText("PARAMETER ")
        await _settled(panel)
        assert panel.form.tabs.isEnabled() and not panel.text.error_label.isVisible()
        assert panel.editor.extraSelections() == []
        assert panel.form.params.parameters() == [("temperature", "0.7"), ("TEMPERATURE", "0.9")]

    qloop.run_until_complete(scenario())


def test_mistyped_parameters_are_flagged_with_ollamas_text(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText("FROM llama3.2\nPARAMETER temperature hot\nPARAMETER Temperature 1\n")
        await _settled(panel)
        table = panel.form.params
        expected = []
        for name, value in (("temperature", "hot"), ("Temperature", "1")):
            with pytest.raises(ModelfileError) as error:
                format_params({name: [value]})
            expected.append(str(error.value))
        assert "hot" in expected[0] and "Temperature" in expected[1]
        assert [table.problem(0), table.problem(1)] == expected
        assert table.table.item(0, 3).text() == expected[0]
        table.table.setCurrentCell(1, 1)
        assert expected[1] in table.help.text()
        table.set_value(0, "0.4")
        assert table.problem(0) == ""
        assert "PARAMETER temperature 0.4" in panel.editor.toPlainText()
        panel.check()
        await until(lambda: "Temperature" in panel.notice.text())
        assert panel.notice.notices()[0].level == "error"

    qloop.run_until_complete(scenario())


def test_template_preview_renders_a_chatml_prompt(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText("FROM llama3.2\nSYSTEM Be brief.\nMESSAGE user Hi\nMESSAGE assistant Hey.\n" + CHATML)
        await _settled(panel)
        preview = panel.form.template.preview.toPlainText()
        sample = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hey."},
            {"role": "user", "content": "Hello!"},
        ]
        assert preview == render_ollama_prompt(panel.modelfile.template, sample, system="Be brief.")
        assert "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHey.<|im_end|>\n" in preview
        assert preview.endswith("<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n")
        panel.form.tabs.setCurrentWidget(panel.form.template)
        panel.form.template.editor.setPlainText("{{ range .Messages }")
        assert panel.form.template.error.isVisible()
        assert "Template error" in panel.form.template.error.text()

    qloop.run_until_complete(scenario())


def test_save_writes_into_the_user_folder_and_lists_it(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.new_file()
        panel.editor.setPlainText("# mine\nFROM llama3.2\n")
        qtbot.mouseClick(panel.files.save_button, Qt.MouseButton.LeftButton)
        assert panel.files.name_bar.isVisible()
        panel.files.name_edit.setText("my-assistant")
        qtbot.mouseClick(panel.files.name_save, Qt.MouseButton.LeftButton)
        target = panel.workstation.paths.modelfiles_dir / "my-assistant.Modelfile"
        await until(lambda: panel.files.user_root.childCount() == 1)
        assert target.read_text(encoding="utf-8") == "# mine\nFROM llama3.2\n"
        assert panel.files.user_root.child(0).text(0) == "my-assistant.Modelfile"
        assert panel.path == target and "•" not in panel.title.text()

        panel.editor.appendPlainText("SYSTEM again")
        qtbot.mouseClick(panel.files.save_button, Qt.MouseButton.LeftButton)
        await until(lambda: "SYSTEM again" in target.read_text(encoding="utf-8"))
        assert not panel.files.name_bar.isVisible()

    qloop.run_until_complete(scenario())


def test_presets_are_listed_and_open_read_only(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        assert panel.files.presets_dir == shipped_presets_dir()
        presets = sorted(p.name for p in panel.files.presets_dir.glob("*.Modelfile"))
        assert {"coding-assistant.Modelfile", "translator.Modelfile"} <= set(presets), presets
        listed = [panel.files.preset_root.child(i).text(0) for i in range(panel.files.preset_root.childCount())]
        assert listed == sorted(presets, key=str.lower)
        item = panel.files.preset_root.child(0)
        original = (panel.files.presets_dir / item.text(0)).read_text(encoding="utf-8")
        panel.files.tree.itemClicked.emit(item, 0)
        await until(lambda: panel.path is not None)
        assert panel.editor.toPlainText() == original
        assert panel.editor.isReadOnly() and panel.form.read_only
        assert panel.copy_button.isVisible() and not panel.files.delete_button.isEnabled()
        assert not panel.files.save_button.isEnabled() and "Duplicate" in panel.files.save_button.toolTip()
        panel.save()
        assert panel.files.name_bar.isVisible() and panel.files.name_edit.text() == item.text(0).removesuffix(
            ".Modelfile"
        )
        qtbot.mouseClick(panel.files.name_save, Qt.MouseButton.LeftButton)
        copy = panel.workstation.paths.modelfiles_dir / item.text(0)
        await until(copy.exists)
        assert copy.read_text(encoding="utf-8") == original
        assert (panel.files.presets_dir / item.text(0)).read_text(encoding="utf-8") == original
        assert not panel.editor.isReadOnly() and panel.path == copy

    qloop.run_until_complete(scenario())


def test_unsaved_changes_ask_before_switching(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        folder = panel.workstation.paths.modelfiles_dir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "a.Modelfile").write_text("FROM a\n", encoding="utf-8")
        (folder / "b.Modelfile").write_text("FROM b\n", encoding="utf-8")
        await panel.files.refresh()
        panel.open_path(folder / "a.Modelfile")
        await until(lambda: panel.path == folder / "a.Modelfile")
        panel.editor.appendPlainText("SYSTEM unsaved")
        edited = panel.editor.toPlainText()
        assert "a.Modelfile •" in panel.title.text()
        panel.open_path(folder / "b.Modelfile")
        assert panel.files.ask_bar.isVisible() and "unsaved changes" in panel.files.ask_bar.message.text()
        qtbot.mouseClick(_ask_button(panel, "Cancel"), Qt.MouseButton.LeftButton)
        assert panel.path == folder / "a.Modelfile" and "SYSTEM unsaved" in panel.editor.toPlainText()
        panel.open_path(folder / "b.Modelfile")
        qtbot.mouseClick(_ask_button(panel, "Save"), Qt.MouseButton.LeftButton)
        await until(lambda: panel.path == folder / "b.Modelfile")
        assert (folder / "a.Modelfile").read_text(encoding="utf-8") == edited
        assert panel.editor.toPlainText() == "FROM b\n"

    qloop.run_until_complete(scenario())


def test_use_in_chat_emits_the_parsed_modelfile(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        text = "FROM llama3.2\nPARAMETER temperature 0.3\nSYSTEM Be kind.\n"
        panel.editor.setPlainText(text)
        received = []
        panel.use_in_chat_requested.connect(received.append)
        qtbot.mouseClick(panel.use_button, Qt.MouseButton.LeftButton)  # before the debounce: parsed now
        assert len(received) == 1
        assert received[0].format() == parse_modelfile(text).format()
        assert received[0].system == "Be kind."

    qloop.run_until_complete(scenario())


def test_missing_local_from_is_flagged(qtbot, qloop, make_panel, tiny_gguf):
    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText("FROM ./no-such-model.gguf\n")
        await _settled(panel)
        await until(lambda: panel.form.from_note.isVisible())
        assert "does not exist" in panel.form.from_note.text()
        panel.form.from_combo.setCurrentText(str(tiny_gguf))
        await until(lambda: not panel.form.from_note.isVisible())
        assert f"FROM {tiny_gguf}" in panel.editor.toPlainText()

    qloop.run_until_complete(scenario())


def test_without_ollama_create_is_disabled_with_a_calm_note(qtbot, qloop, make_panel):
    async def scenario():
        host = FakeOllama.unused_host()
        panel = await make_panel(host)
        assert not panel.create_button.isEnabled()
        assert "not running" in panel.ollama_label.text()
        assert panel.ollama_label.isVisible() and panel.recheck_button.isVisible()
        with FakeOllama() as fake:  # started later, on another host: the new setting is picked up
            fake.add_model("qwen3")
            panel.workstation.update_settings(ollama_host=fake.host)  # the page follows the settings itself
            await until(lambda: panel.create_button.isEnabled())
            await until(lambda: "qwen3:latest" in panel.form.from_candidates())
            assert not panel.ollama_label.isVisible() and not panel.recheck_button.isVisible()
            await _idle()

    qloop.run_until_complete(scenario())


def test_create_in_ollama_with_progress_and_a_failure(qtbot, qloop, make_panel):
    async def scenario():
        with FakeOllama() as fake:
            fake.add_model("llama3.2")
            panel = await make_panel(fake.host)
            assert panel.create_button.isEnabled()
            assert "llama3.2:latest" in panel.form.from_candidates()
            panel.editor.setPlainText("FROM llama3.2\nSYSTEM You are a pirate.\n")
            qtbot.mouseClick(panel.create_button, Qt.MouseButton.LeftButton)
            assert panel.creator.bar.isVisible()
            panel.creator.name_edit.setText("pirate")
            qtbot.mouseClick(panel.creator.go, Qt.MouseButton.LeftButton)
            await until(lambda: panel.creator.go.isEnabled() and panel.creator.status.text())
            assert panel.creator.status.text().startswith("Created pirate"), panel.creator.status.text()
            assert fake.model("pirate") is not None

            fake.fail("/api/create", die=True, after=1)  # the connection drops mid-create
            panel.creator.name_edit.setText("pirate2")
            qtbot.mouseClick(panel.creator.go, Qt.MouseButton.LeftButton)
            await until(lambda: "not created" in panel.creator.status.text())
            assert "was lost while creating pirate2" in panel.creator.status.text()
            assert fake.model("pirate2") is None
            await _idle()  # before the server stops

    qloop.run_until_complete(scenario())


def test_parameter_editors_are_typed(qtbot, qloop, make_panel):
    from PySide6.QtWidgets import QAbstractItemDelegate, QCheckBox, QDoubleSpinBox, QLineEdit, QSpinBox

    from app.ui.widgets.sampling_spin import SamplingSpinBox

    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText(
            "FROM x\nPARAMETER temperature 0.7\nPARAMETER num_ctx 4096\nPARAMETER use_mmap true\n"
            "PARAMETER stop <|im_end|>\nPARAMETER top_k lots\n"
        )
        await _settled(panel)
        panel.form.tabs.setCurrentWidget(panel.form.params)
        view = panel.form.params.table
        kinds = {}
        for row in range(view.rowCount()):
            index = view.model().index(row, 1)
            view.setCurrentIndex(index)
            view.edit(index)
            editor = view.indexWidget(index)
            kinds[view.item(row, 0).text()] = type(editor)
            if isinstance(editor, QDoubleSpinBox):
                editor.setValue(0.25)
            view.commitData(editor)
            view.closeEditor(editor, QAbstractItemDelegate.EndEditHint.NoHint)
        assert kinds == {
            "temperature": SamplingSpinBox,
            "num_ctx": QSpinBox,
            "use_mmap": QCheckBox,
            "stop": QLineEdit,
            "top_k": QLineEdit,  # not an int: edited as text, nothing lost
        }
        assert "PARAMETER temperature 0.25" in panel.editor.toPlainText()
        assert "num_ctx 4096" in panel.editor.toPlainText()
        assert panel.form.params.problem(4) and not panel.form.params.problem(0)

        panel.form.params.table.setCurrentCell(4, 0)
        panel.form.params.remove_row()
        assert "top_k" not in panel.editor.toPlainText()
        panel.form.params.add_row()
        name, value = panel.form.params.parameters()[-1]
        assert name and f"PARAMETER {name} {value}".strip() in panel.editor.toPlainText()

    qloop.run_until_complete(scenario())


def test_new_modelfile_from_the_form_and_message_order(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.new_file()
        assert panel.form.tabs.isEnabled()  # only the FROM line is missing: the form can write it
        assert not panel.form.from_note.isVisible() and not panel.text.error_label.isVisible()  # nothing typed yet
        panel.form.system.setPlainText("You are terse.")  # a first edit without a FROM line: now it is missing
        assert panel.form.from_note.isVisible() and "no FROM line" in panel.form.from_note.text()
        panel.form.from_combo.setCurrentText("llama3.2")
        assert parse_modelfile(panel.editor.toPlainText()).froms() == ["llama3.2"]
        assert not panel.text.error_label.isVisible() and not panel.form.from_note.isVisible()
        messages = panel.form.messages
        messages.add_message()
        messages.text.setPlainText("first")
        messages.add_message()
        messages.text.setPlainText("second")
        messages.move_message(-1)
        assert parse_modelfile(panel.editor.toPlainText()).messages() == [("assistant", "second"), ("user", "first")]
        messages.role.setCurrentText("system")
        assert parse_modelfile(panel.editor.toPlainText()).messages()[0] == ("system", "second")

    qloop.run_until_complete(scenario())


def test_delete_asks_and_saving_over_a_file_asks(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        folder = panel.workstation.paths.modelfiles_dir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "old.Modelfile").write_text("FROM old\n", encoding="utf-8")
        await panel.files.refresh()
        panel.new_file()
        panel.editor.setPlainText("FROM new\n")
        panel.save()
        panel.files.name_edit.setText("old")
        qtbot.mouseClick(panel.files.name_save, Qt.MouseButton.LeftButton)
        await until(lambda: panel.files.ask_bar.isVisible())
        assert "already exists" in panel.files.ask_bar.message.text()
        qtbot.mouseClick(_ask_button(panel, "Replace"), Qt.MouseButton.LeftButton)
        await until(lambda: (folder / "old.Modelfile").read_text(encoding="utf-8") == "FROM new\n")

        await until(lambda: panel.files.delete_button.isEnabled())
        qtbot.mouseClick(panel.files.delete_button, Qt.MouseButton.LeftButton)
        assert panel.files.ask_bar.isVisible() and "Delete old.Modelfile" in panel.files.ask_bar.message.text()
        qtbot.mouseClick(_ask_button(panel, "Delete"), Qt.MouseButton.LeftButton)
        await until(lambda: not (folder / "old.Modelfile").exists() and panel.files.user_root.childCount() == 0)
        assert panel.path is None and panel.editor.toPlainText() == ""

    qloop.run_until_complete(scenario())


def test_from_choices_list_recent_and_folder_models(qtbot, qloop, make_panel, tiny_gguf):
    async def scenario():
        panel = await make_panel()
        models = panel.workstation.paths.models_dir
        models.mkdir(parents=True, exist_ok=True)
        local = models / "local.gguf"
        local.write_bytes(tiny_gguf.read_bytes()[:64])
        panel.workstation.settings.recent_models = [str(tiny_gguf)]
        await panel.refresh_from_choices()
        assert panel.form.from_candidates() == [str(tiny_gguf), str(local)]

    qloop.run_until_complete(scenario())


def test_form_edit_right_after_typing_keeps_both(qtbot, qloop, make_panel):
    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText("FROM llama3.2\nSYSTEM old\n")
        await _settled(panel)
        panel.editor.moveCursor(panel.editor.textCursor().MoveOperation.End)
        panel.editor.insertPlainText("PARAMETER top_k 5\n")
        assert panel.text.timer.isActive()
        panel.form.system.setPlainText("new")  # within the parse delay
        reparsed = parse_modelfile(panel.editor.toPlainText())
        assert reparsed.system == "new" and reparsed.parameters() == {"top_k": ["5"]}
        await _settled(panel)
        assert panel.form.system.toPlainText() == "new"

    qloop.run_until_complete(scenario())


def test_highlighter_follows_ollamas_lexing(qtbot, qloop, make_panel):
    from PySide6.QtGui import QFont

    from app.ui.widgets.palette import error_color

    async def scenario():
        panel = await make_panel()
        panel.editor.setPlainText(
            'from llama3.2\nSYSTEM """one\ntwo # not a comment\nthree"""\n  # a comment\n'
            "PARAMETER temprature 1\nMESSAGE user hi\n"
        )
        doc = panel.editor.document()

        def spans(line):
            """(start, length, bold, italic, colour) of each coloured run on ``line``."""
            runs = doc.findBlockByNumber(line).layout().formats()
            return [
                (
                    r.start,
                    r.length,
                    r.format.fontWeight() == QFont.Weight.Bold,
                    r.format.fontItalic(),
                    r.format.foreground().color().name(),
                )
                for r in runs
            ]

        assert spans(0)[0][:3] == (0, 4, True)  # "from": any case
        assert [doc.findBlockByNumber(n).userState() for n in range(5)] == [-1, 1, 1, -1, -1]
        assert [run[:2] for run in spans(2)] == [(0, len("two # not a comment"))]  # inside the string
        assert spans(4)[0][:2] == (2, len("# a comment")) and spans(4)[0][3]
        red = error_color(panel.editor.palette()).name()
        assert spans(5)[1][:2] == (10, len("temprature")) and spans(5)[1][4] == red  # not an Ollama option
        assert spans(6)[1][:2] == (8, 4) and spans(6)[1][3]  # the role

    qloop.run_until_complete(scenario())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_opening_a_fifo_or_an_oversized_file_says_why_and_keeps_the_document(qtbot, qloop, make_panel, tmp_path):
    async def scenario():
        panel = await make_panel()
        before = panel.editor.toPlainText()
        fifo = tmp_path / "pipe.Modelfile"
        os.mkfifo(fifo)
        panel.open_path(fifo)
        await until(panel.notice.isVisible)
        assert "is not a regular file (a pipe or a device)" in panel.notice.text()
        big = tmp_path / "big.Modelfile"
        big.write_bytes(b"FROM x\nSYSTEM " + b"y" * (2 * 1024 * 1024))
        panel.hide_notice()
        panel.open_path(big)
        await until(panel.notice.isVisible)
        assert "is larger than 1 MiB" in panel.notice.text()
        assert panel.editor.toPlainText() == before and panel.path is None

    qloop.run_until_complete(scenario())
