"""Documents in the chat page, offscreen, with the real window, worker, index and PDFs: the Documents button's
collections, a drop of a file (indexed first), chips that remove, sources under a reply and the source dialog."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.core.chat.conversation import Message, ReplyStats, Role
from app.core.documents.citations import COUNT_KEY, MODE_KEY, PASSAGES, WHOLE, Source
from app.core.params import SamplingParams
from app.services.documents.service import IndexProgress
from app.ui.pages.chat.chat_documents import progress_text
from app.ui.pages.chat.source_dialog import SourceDialog
from app.ui.pages.chat.transcript import TranscriptView
from tests.support.documents import page_text, write_pdf
from tests.support.waiting import until
from tests.ui.test_chat_panel import _load, _reply_done


def _drop(widget, paths):
    """Drag files over ``widget`` and drop them, as a file manager does."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(path) for path in paths])
    where, action = QPointF(20, 20), Qt.DropAction.CopyAction
    enter = QDragEnterEvent(where.toPoint(), action, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    drop = QDropEvent(where, action, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)
    assert drop.isAccepted()


def _chips(panel):
    return [chip.name.text() for chip in panel.composer.documents_bar.chips]


def test_attach_collection_and_dropped_file_then_open_a_source(qtbot, qloop, make_window, tiny_gguf, tmp_path,
                                                               monkeypatch):  # fmt: skip
    notes = write_pdf(tmp_path / "notes.pdf", [page_text("alpha", 60), page_text("walrus", 60)])
    dropped = write_pdf(tmp_path / "dropped.pdf", [page_text("okapi", 40)])
    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(opened.append))

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        await _load(panel, tiny_gguf)
        panel.sampling.set_params(SamplingParams(max_tokens=6, temperature=0.0))
        await panel.workstation.documents.index([str(notes)], "notes")
        button = panel.composer.documents_button
        assert button.isVisible() and button.menu() is not None
        await panel.chat_documents.list_collections()
        (notes_action,) = [a for a in button.collections_menu.actions() if a.text() == "notes"]
        notes_action.trigger()
        await until(lambda: _chips(panel) == ["notes (collection)"])
        _drop(panel, [str(dropped)])
        await until(lambda: _chips(panel) == ["notes (collection)", "dropped.pdf"])
        await until(lambda: not panel.session.indexing)
        panel.composer.documents_bar.chips[1].remove_button.click()
        await until(lambda: _chips(panel) == ["notes (collection)"])
        panel.input.setPlainText("What does the walrus section say?")
        panel.send()
        await until(_reply_done(panel, 2))
        reply = panel.session.conversation.messages[-1]
        assert reply.settings["documents_mode"] == WHOLE and [s.label for s in reply.sources] == ["notes.pdf"]
        await until(lambda: "[1] notes.pdf" in panel.view.toPlainText())
        assert "Answered from full text of 1 document" in panel.view.toPlainText()
        row = len(panel.session.conversation.messages) - 1
        panel.view.action("source:1", row)
        dialog = panel.chat_documents.dialog
        assert isinstance(dialog, SourceDialog) and dialog.isVisible()
        await until(lambda: dialog.loaded)
        assert "walrus section explains" in dialog.text.toPlainText()
        dialog.open_button.click()
        assert opened == [QUrl.fromLocalFile(str(notes))]
        dialog.close()
        item = panel.view.message_widget(row)
        panel.view.link_clicked(item, QUrl("source:1"))  # a citation in the reply's text opens the same
        assert panel.chat_documents.dialog is not dialog and panel.chat_documents.dialog.source == reply.sources[0]
        panel.chat_documents.dialog.close()
        saved = await panel.workstation.store.load(panel.session.conversation.id)
        assert [d.collection for d in saved.documents] == ["notes"]

    qloop.run_until_complete(scenario())


def test_a_reply_shows_its_sources_and_its_citations_link_to_them(qtbot):
    view = TranscriptView()
    qtbot.addWidget(view)
    view.resize(700, 400)
    view.show()
    source = Source(1, "/d/manual.pdf", 5, "The heron passage.", None, 3, 0, 18)
    stats = ReplyStats(prompt_tokens=1267, cached_prompt_tokens=1225, completion_tokens=9, ttft_ms=12.0)
    settings = {MODE_KEY: PASSAGES, COUNT_KEY: 1}
    reply = Message(Role.ASSISTANT, "It is item 7 [1].", sources=[source], settings=settings, stats=stats)
    view.show_messages([Message(Role.USER, "Which item?"), reply])
    item = view.message_widget(1)
    assert item is not None and 'href="source:1"' in item.body.toHtml()
    assert "Answered from 1 passage · [1] manual.pdf, p. 5" in view.message_text(1)
    assert "prompt 42 new + 1,225 reused (12 ms)" in view.message_text(1)
    with qtbot.waitSignal(view.source_requested) as clicked:
        item.sources.linkActivated.emit("source:1")
    assert clicked.args == [source]


def test_indexing_progress_reads_as_a_person_would_say_it():
    assert progress_text(IndexProgress()) == ""
    running = IndexProgress(running=True, done=1, total=4, current="/d/report.pdf")
    assert progress_text(running) == "Indexing 1 of 4: report.pdf — the reply waits for it"
    assert progress_text(IndexProgress(running=True)) == "Indexing…"
