"""Images in the chat page, driven as a person would (offscreen, real widgets, the real llama.cpp worker): attach,
paste and drop into the composer, thumbnails before and after sending, a vision model that reads them through
its projector, a text-only model that says so before anything is sent, and the images kept with the chat."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QImage
from PySide6.QtWidgets import QApplication, QFileDialog

from app.core.chat.conversation import MessageStatus
from app.core.params import SamplingParams
from app.services.paths import app_paths
from app.ui.pages.chat.message_item import MessageItem
from tests.support.projector_factory import IMAGE_TOKENS, png_bytes, write_tiny_projector, write_tiny_vision_model
from tests.support.waiting import until


@pytest.fixture(scope="module")
def vision_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vision") / "Tiny VL"
    folder.mkdir()
    write_tiny_projector(folder / "mmproj-tiny-vl-f16.gguf")
    return write_tiny_vision_model(folder / "tiny-vl-q8_0.gguf")


@pytest.fixture
def pictures(tmp_path):
    first, second = tmp_path / "chart é.png", tmp_path / "photo.png"
    first.write_bytes(png_bytes(40, 30))
    second.write_bytes(png_bytes(20, 50))
    (tmp_path / "notes.txt").write_text("not an image")
    return first, second, tmp_path / "notes.txt"


async def _load(panel, model):
    panel.load_model(str(model))
    await until(lambda: panel.workspace.model is not None or panel.notice.isVisible())
    assert panel.workspace.model is not None, panel.notice.text()


def _drop(widget, mime):
    position = QPointF(widget.rect().center())
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(position.toPoint(), actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0))
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    drop = QDropEvent(position, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0))
    QApplication.sendEvent(widget, drop)


def _user_items(panel):
    items = panel.view.findChildren(MessageItem)
    return [i for i in items if i.message is not None and i.message.attachments and i.isVisible()]


def test_attach_paste_and_drop_then_a_vision_model_reads_them(qtbot, qloop, make_window, vision_model, pictures):
    first, second, _ = pictures

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        composer = panel.composer
        await _load(panel, vision_model)
        panel.sampling.set_params(SamplingParams(max_tokens=6, temperature=0.0))
        assert panel.workspace.model.vision is True
        # Attach: the button opens a file dialog; choosing files adds them
        qtbot.mouseClick(composer.attach_button, Qt.MouseButton.LeftButton)
        dialog = composer.findChild(QFileDialog, "attach_dialog")
        assert dialog is not None and dialog.isVisible()
        dialog.filesSelected.emit([str(first)])
        dialog.close()
        await until(lambda: len(composer.images) == 1 and not composer.adding)
        # Paste: an image on the clipboard (a screenshot), Ctrl+V in the input
        image = QImage(16, 12, QImage.Format.Format_RGB32)
        image.fill(Qt.GlobalColor.darkCyan)
        QGuiApplication.clipboard().setImage(image)
        panel.input.setFocus()
        qtbot.keyClick(panel.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
        await until(lambda: len(composer.images) == 2 and not composer.adding)
        # Drop: a file from the file manager onto the composer
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(second))])
        _drop(composer, mime)
        await until(lambda: len(composer.images) == 3 and not composer.adding)
        assert panel.input.toPlainText() == ""  # images never become text
        names = [a.name for a in composer.images]
        assert names == ["chart é.png", "pasted image.png", "photo.png"]
        assert (composer.images[1].width, composer.images[1].height) == (16, 12)
        strip = composer.strip
        await until(lambda: all(t.picture.pixmap() is not None and not t.picture.pixmap().isNull()
                                for t in strip.thumbnails))  # fmt: skip
        assert strip.isVisible() and len(strip.thumbnails) == 3
        # remove the pasted one with its × button
        qtbot.mouseClick(strip.thumbnails[1].remove_button, Qt.MouseButton.LeftButton)
        assert [a.name for a in composer.images] == ["chart é.png", "photo.png"]
        await until(lambda: len(strip.thumbnails) == 2)
        panel.input.setPlainText("What do you see?")
        qtbot.keyClick(panel.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        await until(lambda: not panel.session.generating and len(panel.session.conversation.messages) == 2)
        user, reply = panel.session.conversation.messages
        assert reply.status is MessageStatus.COMPLETE, reply.error
        assert [a.name for a in user.attachments] == ["chart é.png", "photo.png"]
        assert reply.stats.prompt_tokens > 2 * IMAGE_TOKENS  # both images went into the prompt
        assert composer.images == [] and not strip.isVisible() and panel.input.toPlainText() == ""
        stored = app_paths().attachments_dir
        assert [(stored / a.path).read_bytes() for a in user.attachments] == [first.read_bytes(), second.read_bytes()]
        # the sent message shows its thumbnails in the transcript
        await until(lambda: bool(_user_items(panel)) and _user_items(panel)[0].images.isVisible())
        shown = _user_items(panel)[0].images
        assert len(shown.thumbnails) == 2
        await until(lambda: all(t.picture.pixmap() is not None and not t.picture.pixmap().isNull()
                                for t in shown.thumbnails))  # fmt: skip
        # and the chat keeps them: opened again from the history
        chat_id = panel.session.conversation.id
        reopened = await panel.workspace.store.load(chat_id)
        assert reopened.messages[0].attachments == user.attachments
        # editing the message keeps its images
        await panel.session.edit_and_resend(0, "And now?")
        edited = panel.session.conversation.messages[0]
        assert (edited.content, edited.attachments) == ("And now?", user.attachments)
        return window

    qloop.run_until_complete(scenario())


def test_a_text_only_model_says_so_before_sending_and_keeps_the_draft(qtbot, qloop, make_window, tiny_gguf, pictures):
    first, _, not_an_image = pictures

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        composer = panel.composer
        await _load(panel, tiny_gguf)
        composer.add_files([str(not_an_image), str(first)])  # one of them is not an image
        await until(lambda: not composer.adding and len(composer.images) == 1)
        assert "notes.txt is not an image the app can send" in panel.notice.text()
        panel.input.setPlainText("Describe this chart")
        qtbot.keyClick(panel.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        await until(lambda: "cannot read images" in panel.notice.text())
        assert "Your message and images are kept" in panel.notice.text()
        assert panel.input.toPlainText() == "Describe this chart" and len(composer.images) == 1
        assert panel.session.conversation.messages == [] and not panel.session.generating
        # removing the image lets the message go
        qtbot.mouseClick(composer.strip.thumbnails[0].remove_button, Qt.MouseButton.LeftButton)
        panel.sampling.set_params(SamplingParams(max_tokens=4, temperature=0.0))
        qtbot.keyClick(panel.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        await until(lambda: not panel.session.generating and len(panel.session.conversation.messages) == 2)
        assert panel.session.conversation.messages[0].attachments == []
        return window

    qloop.run_until_complete(scenario())
