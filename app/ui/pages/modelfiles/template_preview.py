"""The TEMPLATE editor with a live preview of the prompt it renders for a sample conversation."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QSplitter, QVBoxLayout, QWidget

from app.core.modelfile.go_template import TemplateError, render_ollama_prompt
from app.ui.style.theme import set_role

SAMPLE_USER_MESSAGE = "Hello!"


class TemplatePreview(QWidget):
    """``changed`` fires when the user edits the template; the preview follows every change."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("template_editor")
        self.editor.setFont(mono)
        self.editor.setPlaceholderText(
            "Go template, e.g. {{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
        )
        self.preview = QPlainTextEdit()
        self.preview.setObjectName("template_preview")
        self.preview.setFont(mono)
        self.preview.setReadOnly(True)
        self.caption = QLabel(f'Prompt for a sample chat: SYSTEM, the MESSAGE list, then user: "{SAMPLE_USER_MESSAGE}"')
        self.caption.setWordWrap(True)
        self.error = QLabel()
        self.error.setObjectName("template_error")
        self.error.setWordWrap(True)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.hide()
        below = QWidget()
        below_layout = QVBoxLayout(below)
        below_layout.setContentsMargins(0, 0, 0, 0)
        below_layout.addWidget(self.caption)
        below_layout.addWidget(self.error)
        below_layout.addWidget(self.preview, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.editor)
        splitter.addWidget(below)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self._system: str | None = None
        self._messages: list[tuple[str, str]] = []
        self._loading = False
        self.editor.textChanged.connect(self._edited)
        self._style()
        self.refresh_preview()

    def set_template(self, template: str) -> None:
        self._loading = True
        if self.editor.toPlainText() != template:
            self.editor.setPlainText(template)
        self._loading = False
        self.refresh_preview()

    def set_read_only(self, read_only: bool) -> None:
        self.editor.setReadOnly(read_only)

    def template(self) -> str:
        return self.editor.toPlainText()

    def set_conversation(self, system: str | None, messages: list[tuple[str, str]]) -> None:
        self._system, self._messages = system, list(messages)
        self.refresh_preview()

    def refresh_preview(self) -> None:
        template = self.template()
        if not template.strip():
            self.error.hide()
            self.preview.setPlainText("")
            self.preview.setPlaceholderText("No TEMPLATE: Ollama uses the template of the FROM model.")
            return
        sample = [{"role": role, "content": text} for role, text in self._messages]
        sample.append({"role": "user", "content": SAMPLE_USER_MESSAGE})
        try:
            prompt = render_ollama_prompt(template, sample, system=self._system or None)
        except TemplateError as exc:
            self.error.setText(f"Template error: {exc}")
            self.error.show()
            return  # keep the last good preview, dimmed by the error above it
        self.error.hide()
        self.preview.setPlainText(prompt)

    def _edited(self) -> None:
        if self._loading:
            return
        self.refresh_preview()
        self.changed.emit()

    def _style(self) -> None:
        set_role(self.error, "error")
        set_role(self.caption, "muted")
