"""The chat panel's widgets and their layout; behaviour lives in ChatPanel."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.params import SamplingParams
from app.ui.pages.chat.model_bar import ModelBar
from app.ui.pages.chat.sampling_form import SamplingForm
from app.ui.pages.chat.starter_banner import StarterBanner
from app.ui.pages.chat.transcript import ChatView

log = logging.getLogger("app.ui.chat")


class ChatPanelLayout(QWidget):
    def __init__(self, sampling: SamplingParams, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._build(sampling)

    def _build(self, sampling: SamplingParams) -> None:
        self.chats = QListWidget()
        self.chats.setObjectName("chat_list")
        self.chats.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chats.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.new_chat_button = QPushButton("New chat")
        self.delete_chat_button = QPushButton("Delete")
        self.model_bar = ModelBar()
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setObjectName("notice")
        self.notice.hide()
        self.format_note = QLabel()
        self.format_note.setWordWrap(True)
        self.format_note.hide()
        self.starter = StarterBanner()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("System prompt (optional): how the assistant should behave")
        self.system_prompt.setMaximumHeight(60)
        self.view = ChatView()
        self.edit_banner = QLabel()
        self.edit_banner.hide()
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText("Message — Ctrl+Enter sends, Esc stops")
        self.input.setMaximumHeight(110)
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.cancel_edit_button = QPushButton("Cancel edit")
        self.cancel_edit_button.hide()
        self.sampling = SamplingForm(sampling)
        self.save_defaults_button = QPushButton("Save as defaults")
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._chats_column())
        splitter.addWidget(self._center_column())
        splitter.addWidget(self._sampling_column())
        splitter.setSizes([200, 760, 240])
        splitter.setCollapsible(1, False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(splitter)

    def _chats_column(self) -> QWidget:
        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_chat_button)
        buttons.addWidget(self.delete_chat_button)
        layout.addLayout(buttons)
        layout.addWidget(self.chats)
        return column

    def _center_column(self) -> QWidget:
        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.model_bar, self.notice, self.format_note, self.starter, self.system_prompt):
            layout.addWidget(widget)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.edit_banner)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        for button in (self.send_button, self.stop_button, self.cancel_edit_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        row.addLayout(buttons)
        layout.addLayout(row)
        return column

    def _sampling_column(self) -> QWidget:
        box = QGroupBox("Sampling")
        box.setMaximumWidth(280)
        layout = QVBoxLayout(box)
        layout.addWidget(self.sampling)
        layout.addWidget(self.save_defaults_button)
        layout.addStretch(1)
        return box

    # --- notices ------------------------------------------------------------------------------------
    def show_notice(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.show()
        log.info("notice: %s", text)

    def hide_notice(self) -> None:
        self.notice.hide()
