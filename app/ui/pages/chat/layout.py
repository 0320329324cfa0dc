"""The chat page's widgets and their layout; behaviour lives in ChatPanel.

    [≡] [model picker · Open · Load · status …………………………………] [⚙]
    ┌ chats ┐┌ notices ─────────────────────────────┐┌ settings drawer ┐
    │       ││ System prompt ▸ …                     ││ preset          │
    │       ││ transcript (or the empty state)       ││ sampling        │
    │       ││ [editing an earlier message · Cancel] ││ loading         │
    │       ││ composer: input · Send/Stop · meter   ││ defaults        │
    └───────┘└───────────────────────────────────────┘└─────────────────┘

The chats list and the drawer collapse (their toggles are at the ends of the top row; both are remembered); the
transcript takes the width. Nothing here has a minimum that would widen the window beyond a small laptop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.params import LoadParams, SamplingParams
from app.ui.page import Page
from app.ui.pages.chat.chat_list import ChatList
from app.ui.pages.chat.composer import Composer
from app.ui.pages.chat.drawer import DRAWER_WIDTH, SettingsDrawer
from app.ui.pages.chat.empty_state import EmptyState
from app.ui.pages.chat.model_bar import ModelBar
from app.ui.pages.chat.system_prompt import SystemPromptBox
from app.ui.pages.chat.transcript import ChatView
from app.ui.style.icons import icon
from app.ui.style.theme import set_role
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.notices import NoticeArea

if TYPE_CHECKING:
    from app.services.workstation import Workstation

CHATS_WIDTH = 200
WIDE_WINDOW = 1200  # below this width the drawer starts closed (until the person opens it)


class ChatPanelLayout(Page):
    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(workstation, parent)
        self._build(workstation.settings.sampling, workstation.settings.load)

    def _build(self, sampling: SamplingParams, load: LoadParams) -> None:
        self.model_bar = ModelBar()
        self.notice = NoticeArea()
        self.system_prompt = SystemPromptBox()
        self.view = ChatView()
        self.empty_state = EmptyState()
        self.transcript = QStackedWidget()
        self.transcript.addWidget(self.empty_state)
        self.transcript.addWidget(self.view)
        self.composer = Composer()
        self.input = self.composer.input
        self.drawer = SettingsDrawer(sampling, load)
        self.sampling = self.drawer.sampling
        self.chats_toggle = _toggle("sidebar", "Show or hide the chats (list of conversations)")
        self.drawer_toggle = _toggle("settings", "Show or hide the model's settings")
        self.chats_column = self._build_chat_list()
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("chat_splitter")  # its panes' widths are kept with the window's state
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.chats_column)
        self.splitter.addWidget(self._center_column())
        self.splitter.addWidget(self.drawer)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([CHATS_WIDTH, 800, DRAWER_WIDTH])
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.chats_toggle)
        top.addWidget(self.model_bar, 1)
        top.addWidget(self.drawer_toggle)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(6)
        layout.addLayout(top)
        layout.addWidget(self.splitter, 1)

    def _build_chat_list(self) -> QWidget:
        """The chats column: "New chat" and the chats grouped by date, read from the store in pages."""
        self.chats = ChatList()
        self.chats.setObjectName("chat_list")
        self.new_chat_button = self.chats.new_chat_button
        self.new_chat_button.setToolTip("Start a new chat (Ctrl+N)")
        column = QWidget()
        column.setObjectName("chats_column")
        column.setMinimumWidth(140)
        column.setMaximumWidth(320)
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.chats, 1)
        return column

    def _center_column(self) -> QWidget:
        self.edit_banner = QFrame()
        self.edit_banner.setObjectName("edit_banner")
        set_role(self.edit_banner, "card")
        self.edit_text = ElidedLabel("Editing an earlier message: sending makes a new version (the old stays: ‹ ›).")
        self.edit_text.setObjectName("edit_banner_text")
        self.cancel_edit_button = QPushButton("Cancel")
        row = QHBoxLayout(self.edit_banner)
        row.setContentsMargins(10, 4, 6, 4)
        row.addWidget(QLabelIcon("edit"))
        row.addWidget(self.edit_text, 1)
        row.addWidget(self.cancel_edit_button)
        self.edit_banner.hide()
        column = QWidget()
        column.setObjectName("chat_center")
        column.setMinimumWidth(340)
        layout = QVBoxLayout(column)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.setSpacing(6)
        layout.addWidget(self.notice)
        layout.addWidget(self.system_prompt)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.edit_banner)
        layout.addWidget(self.composer)
        return column

    # --- the two side panes ---------------------------------------------------------------------------------
    def set_chats_open(self, opened: bool) -> None:
        self.chats_column.setVisible(opened)
        _check_quietly(self.chats_toggle, opened)

    def set_drawer_open(self, opened: bool) -> None:
        self.drawer.setVisible(opened)
        _check_quietly(self.drawer_toggle, opened)

    def show_transcript(self, has_messages: bool) -> None:
        """The transcript when the chat has messages (or a reply is coming), else the empty state."""
        self.transcript.setCurrentWidget(self.view if has_messages else self.empty_state)

    # --- notices --------------------------------------------------------------------------------------------
    def show_notice(self, text: str, level: str = "info", key: str | None = None, **options: object) -> None:
        """One banner in the page's notice area (``key`` replaces an earlier one with the same key)."""
        self.notice.show_notice(text, level, key=key, **options)  # type: ignore[arg-type]

    def hide_notice(self, key: str | None = None) -> None:
        """Dismiss the notice with ``key``, or every notice."""
        if key is None:
            self.notice.clear()
        else:
            self.notice.dismiss(key)


class QLabelIcon(QToolButton):
    """A small icon that is not a button (no hover, no focus)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.setIcon(icon(name))
        self.setEnabled(True)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)


def _check_quietly(button: QToolButton, checked: bool) -> None:
    """Show a state without emitting ``toggled`` (which means the person changed it)."""
    button.blockSignals(True)
    button.setChecked(checked)
    button.blockSignals(False)


def _toggle(icon_name: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setIcon(icon(icon_name))
    button.setCheckable(True)
    button.setToolTip(tip)
    button.setAccessibleName(tip)
    return button
