"""Code in replies is coloured in the transcript, readable in the app's light and dark palettes."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QTextDocument

from app.core.chat import code_highlight
from app.core.chat.code_highlight import contrast
from app.core.chat.conversation import Message, Role
from app.ui.pages.chat.transcript import ChatView
from app.ui.style.theme import _palette, tokens

REPLY = 'Try:\n\n```python\ndef greet(name):\n    return f"hi {name}"  # say hi\n```\n'


def _fragments(document: QTextDocument) -> dict[str, QColor]:
    """Each text fragment of the code block (its lines) with its colour."""
    out: dict[str, QColor] = {}
    block = document.begin()
    while block.isValid():
        if not block.text().startswith(("def greet", "    return")):
            block = block.next()
            continue
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            out[fragment.text()] = fragment.charFormat().foreground().color()
            it += 1
        block = block.next()
    return out


def _rgb(color: QColor) -> tuple[int, int, int]:
    return color.red(), color.green(), color.blue()


@pytest.mark.parametrize("dark", [False, True])
def test_code_is_coloured_and_readable_in_both_palettes(qtbot, dark: bool) -> None:
    code_highlight.prepare(("python",))
    view = ChatView()
    qtbot.addWidget(view)
    view.setPalette(_palette(dark))
    view.resize(600, 400)
    view.show()
    view.show_messages([Message(Role.USER, "greet?"), Message(Role.ASSISTANT, REPLY)])
    item = view.message_widget(1)
    assert item is not None
    colours = _fragments(item.body.document())
    background = _rgb(tokens(_palette(dark)).code_bg)
    keyword, comment = colours["def"], colours["# say hi"]
    assert keyword != comment  # different kinds, different colours
    assert len({c.name() for c in colours.values()}) >= 4
    for text, colour in colours.items():
        if text.strip():
            assert contrast(_rgb(colour), background) >= 4.5, (text, colour.name(), background)
