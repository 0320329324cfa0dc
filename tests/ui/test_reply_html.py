"""A reply's safe inline HTML shows as formatting in the transcript's document (Qt's rich text), other tags as
the characters the model wrote."""

from __future__ import annotations

from PySide6.QtGui import QFont, QTextCharFormat, QTextDocument

from app.ui.pages.chat.reply_document import message_html


def _formats(document: QTextDocument) -> dict[str, QTextCharFormat]:
    found: dict[str, QTextCharFormat] = {}
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            found[fragment.text()] = fragment.charFormat()
            it += 1
        block = block.next()
    return found


def test_bold_italic_subscript_and_breaks_render_and_the_rest_is_text(qapp):
    document = QTextDocument()
    document.setHtml(message_html("<b>bold</b> <i>it</i> H<sub>2</sub>O<br>next <u>u</u>", [], "monospace"))
    formats = _formats(document)
    assert formats["bold"].fontWeight() == QFont.Weight.Bold
    assert formats["it"].fontItalic()
    assert formats["2"].verticalAlignment() == QTextCharFormat.VerticalAlignment.AlignSubScript
    text = document.toPlainText()
    assert "<b>" not in text and "H2O\nnext" in text
    assert "<u>u</u>" in text and not formats.get("u", QTextCharFormat()).fontUnderline()
