"""The raw Modelfile editor: syntax colours (Ollama's lexing rules) and the marked line of a parse error."""

from __future__ import annotations

import contextlib
import re

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPalette,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QTextEdit, QVBoxLayout, QWidget

from app.core.modelfile.params import OLLAMA_OPTIONS
from app.core.modelfile.parser import Modelfile, ModelfileError, parse_modelfile
from app.ui.style.theme import set_role
from app.ui.widgets.palette import error_color, is_dark, mix

COMMANDS = frozenset(
    {"from", "license", "template", "system", "adapter", "parameter", "message", "requires", "renderer", "parser"}
    | {"draft"}
)
ROLES = frozenset({"system", "user", "assistant", "tool"})

PARSE_DELAY_MS = 200
NO_FROM = "no FROM line"
CANONICAL_NOTE = "Editing the form rewrites this text in canonical form: comments and blank lines are not kept."
_NORMAL, _IN_TRIPLE, _IN_QUOTE = -1, 1, 2
_WORD = re.compile(r"\s*(\S+)")


def _format(color: QColor, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(color)
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    fmt.setFontItalic(italic)
    return fmt


class ModelfileHighlighter(QSyntaxHighlighter):
    """Commands (any case), PARAMETER names, MESSAGE roles, ``#`` comments at line start, quoted values.

    A ``\"\"\"`` or ``"`` string may span lines: the block state carries the open quote to the next line.
    """

    def __init__(self, document: QTextDocument, palette: QPalette) -> None:
        super().__init__(document)
        self.set_palette(palette)

    def set_palette(self, palette: QPalette) -> None:
        text, base = palette.color(QPalette.ColorRole.Text), palette.color(QPalette.ColorRole.Base)
        dark = is_dark(palette)
        accent = palette.color(QPalette.ColorRole.Link)
        self.keyword = _format(accent, bold=True)
        self.parameter = _format(mix(accent, text, 0.45))
        self.unknown = _format(error_color(palette))
        self.role = _format(accent, italic=True)
        self.string = _format(QColor("#a5d6a7") if dark else QColor("#2e7d32"))
        self.comment = _format(mix(text, base, 0.45), italic=True)
        self.rehighlight()

    def highlightBlock(self, text: str) -> None:
        self.setCurrentBlockState(_NORMAL)
        state = self.previousBlockState()
        if state == _IN_TRIPLE:
            self._string(text, 0, '"""', 0)
            return
        if state == _IN_QUOTE:
            self._string(text, 0, '"', 0)
            return
        stripped = text.lstrip()
        if not stripped:
            return
        start = len(text) - len(stripped)
        if stripped.startswith("#"):
            self.setFormat(start, len(text) - start, self.comment)
            return
        match = _WORD.match(text)
        assert match is not None
        command = match.group(1).lower()
        if command not in COMMANDS:
            return  # the parse error marks the line
        self.setFormat(match.start(1), len(match.group(1)), self.keyword)
        pos = match.end(1)
        if command in ("parameter", "message"):
            word = _WORD.match(text, pos)
            if word is None:
                return
            if command == "parameter":
                fmt = self.parameter if word.group(1) in OLLAMA_OPTIONS else self.unknown
            else:
                fmt = self.role if word.group(1).lower() in ROLES else self.unknown
            self.setFormat(word.start(1), len(word.group(1)), fmt)
            pos = word.end(1)
        value = len(text) - len(text[pos:].lstrip())
        if text.startswith('"""', value):
            self._string(text, value, '"""', 3)
        elif text.startswith('"', value):
            self._string(text, value, '"', 1)

    def _string(self, text: str, start: int, quote: str, skip: int) -> None:
        """Colour a string that opened at ``start`` (``skip`` quote characters there) up to its close."""
        end = text.find(quote, start + skip)
        if end < 0:
            self.setFormat(start, len(text) - start, self.string)
            self.setCurrentBlockState(_IN_TRIPLE if quote == '"""' else _IN_QUOTE)
            return
        self.setFormat(start, end + len(quote) - start, self.string)


class ModelfileEditor(QPlainTextEdit):
    """Monospace text editor with the highlighter and an error mark on one line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelfile_text")
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setPlaceholderText('FROM llama3.2\nPARAMETER temperature 0.7\nSYSTEM """You are a helpful assistant."""')
        self.highlighter = ModelfileHighlighter(self.document(), self.palette())
        self.error_line: int | None = None

    def mark_error_line(self, line: int | None) -> None:
        """Underline (and tint) 1-based ``line``; None clears the mark."""
        self.error_line = line
        selections: list[QTextEdit.ExtraSelection] = []
        block = self.document().findBlockByNumber(line - 1) if line else None
        if block is not None and block.isValid():
            red = error_color(self.palette())
            selection = QTextEdit.ExtraSelection()
            selection.format.setBackground(mix(self.palette().color(QPalette.ColorRole.Base), red, 0.18))
            selection.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
            cursor = QTextCursor(block)
            selection.cursor = cursor
            underline = QTextEdit.ExtraSelection()
            underline.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            underline.format.setUnderlineColor(red)
            cursor = QTextCursor(block)
            cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            underline.cursor = cursor
            selections = [selection, underline]
        self.setExtraSelections(selections)

    def replace_text(self, text: str) -> None:
        """Replace everything as one undoable edit (setPlainText would clear the undo history)."""
        if text == self.toPlainText():
            return
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.insertText(text)
        cursor.endEditBlock()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.highlighter.set_palette(self.palette())
            self.mark_error_line(self.error_line)


class ModelfileTextPane(QWidget):
    """The raw text, parsed 200 ms after the last keystroke; Ollama's error is shown under it, its line marked.

    ``parsed`` carries the Modelfile after a parse, ``failed`` the ModelfileError of a text whose commands are
    unknown. Text written by ``replace_text`` (the form's canonical text) does not go back to the form.
    """

    parsed = Signal(object)
    failed = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = ModelfileEditor()
        self.error_label = QLabel()
        self.error_label.setObjectName("parse_error")
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.hide()
        self.note = QLabel(CANONICAL_NOTE)
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Raw text"))
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.error_label)
        layout.addWidget(self.note)
        self.error: ModelfileError | None = None
        self.modelfile: Modelfile | None = None  # the commands, also when only the FROM line is missing
        self._writing = False
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(PARSE_DELAY_MS)
        self.timer.timeout.connect(self.parse_now)
        self.editor.textChanged.connect(self._typed)
        self._style()

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str, read_only: bool = False) -> Modelfile | None:
        """Show a new document (its undo history starts afresh) and parse it at once."""
        self.editor.setPlainText(text)
        self.editor.setReadOnly(read_only)
        return self.parse_now()

    def replace_text(self, text: str) -> None:
        """Write the form's canonical text as one undoable edit; the form is not refreshed from it."""
        self._writing = True
        try:
            self.editor.replace_text(text)
        finally:
            self._writing = False
        self.parse_now(notify=False)

    def _typed(self) -> None:
        if not self._writing:
            self.timer.start()

    def parse_now(self, notify: bool = True) -> Modelfile | None:
        """Parse the text; returns the Modelfile, or None when Ollama would refuse it (the error is shown).

        A text that only lacks its FROM line is refused too, but its commands still reach the form (``parsed``),
        so a new Modelfile can be written from the form.
        """
        self.timer.stop()
        text = self.text()
        self.modelfile = None
        try:
            self.modelfile = parse_modelfile(text)
            self.error = None
        except ModelfileError as exc:
            self.error = exc
            if str(exc) == NO_FROM and exc.line is None:  # every line parsed: only the FROM is missing
                with contextlib.suppress(ModelfileError):
                    self.modelfile = Modelfile(parse_modelfile(text + "\nFROM _").commands[:-1])
        shown = self.error is not None and bool(text.strip())  # an empty page is not an error yet
        self.error_label.setText(str(self.error or ""))
        self.error_label.setVisible(shown)
        self.editor.mark_error_line(self.error.line if self.error is not None else None)
        if notify:
            if self.modelfile is not None:
                self.parsed.emit(self.modelfile)
            else:
                self.failed.emit(self.error)
        return self.modelfile if self.error is None else None

    def _style(self) -> None:
        set_role(self.error_label, "error")
        set_role(self.note, "muted")
