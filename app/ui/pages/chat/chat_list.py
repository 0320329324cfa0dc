"""The list of chats: a model over the history store, loaded a page at a time as the list scrolls; pinned chats
first, then the rest grouped by date (Today, Yesterday, Previous 7 days, Previous 30 days, Older); "New chat" and
a search box on top, a folder filter when folders exist, and per chat a delete action (a trash icon on hover, or
Del) and a context menu (rename, pin, folder, fork, export, delete). A chat is renamed in place (the menu, a
double-click or F2): Enter saves, Esc cancels. Typing in the search box shows matching messages with their
snippets instead of the chats; choosing one emits the chat and the message. Every read is off the Qt thread."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QFocusEvent, QKeyEvent, QKeySequence, QMouseEvent, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.date_groups import date_group
from app.services.chat.history import MAX_PAGE, ChatSummary, ConversationPage, SearchHit
from app.ui.pages.chat.search_results import SearchResults
from app.ui.style.icons import icon
from app.ui.style.theme import RADIUS, SPACE_S, SPACE_XS, set_role, tokens
from app.ui.tasks import loop_running, spawn

log = logging.getLogger("app.ui.chat")

__all__ = ["ChatList", "ChatListModel", "ChatSource"]

ID_ROLE = Qt.ItemDataRole.UserRole
HEADER_ROLE = Qt.ItemDataRole.UserRole + 1
ACTIVITY_ROLE = Qt.ItemDataRole.UserRole + 2  # GENERATING or APPROVAL for a chat busy in the background
GENERATING = "generating"
APPROVAL = "approval"
_ACTIVITY_TIPS = {
    GENERATING: "Still replying in the background",
    APPROVAL: "Waiting for your approval of a tool call: open the chat to decide",
}
_DOT = 8  # the activity dot's diameter
PAGE_SIZE = 100
_ROW_H = 34  # headers too: uniform rows let the view lay out thousands at no cost
_TRASH = 24  # the delete icon's square, at a row's right end

Index = QModelIndex | QPersistentModelIndex


PINNED = "Pinned"
ALL_CHATS = "All chats"
SEARCH_DELAY_MS = 200  # typing pauses this long before a search runs
MAX_TITLE = 200  # characters a chat's name may have


class ChatSource(Protocol):
    """Where the list reads chats from: the history store (``AsyncConversationStore``) or anything alike."""

    async def conversations_page(
        self,
        limit: int = 100,
        after: tuple[float, int] | None = None,
        *,
        pinned: bool | None = None,
        folder: str | None = None,
    ) -> ConversationPage: ...

    async def folders(self) -> list[str]: ...

    async def search(self, text: str, limit: int = 50) -> list[SearchHit]: ...


@dataclass(frozen=True)
class _Row:
    header: str = ""  # a date group's header (or "Pinned") when set
    chat: ChatSummary | None = None
    pinned: bool = False


class ChatListModel(QAbstractListModel):
    """Chats newest first, with a header row before each date group; more pages load as the view asks."""

    page_loaded = Signal()

    def __init__(self, now: Callable[[], float] = time.time, page_size: int = PAGE_SIZE) -> None:
        super().__init__()
        self._now = now
        self.page_size = page_size
        self.source: ChatSource | None = None
        self._rows: list[_Row] = []
        self._after: tuple[float, int] | None = None
        self._loading: asyncio.Task[Any] | None = None
        self._generation = 0
        self.total = 0  # chats in the store (in the folder shown), as of the last page
        self.folder: str | None = None  # show only the chats in this folder ("" for none); None: every chat
        self.activity: dict[int, str] = {}  # chat id -> GENERATING or APPROVAL (chats busy in the background)
        self.new_titles: dict[int, str] = {}  # chat id -> the name given, shown over pages read before it was saved

    # -- Qt model ----------------------------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's name and default
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return row.header or (row.chat.title if row.chat else "")
        if role == Qt.ItemDataRole.ToolTipRole and row.chat is not None:
            tip = _ACTIVITY_TIPS.get(self.activity.get(row.chat.id, ""))
            return f"{row.chat.title}\n{tip}" if tip else row.chat.title
        if role == ACTIVITY_ROLE:
            return self.activity.get(row.chat.id) if row.chat else None
        if role == ID_ROLE:
            return row.chat.id if row.chat else None
        if role == HEADER_ROLE:
            return bool(row.header)
        return None

    def set_activity(self, activity: dict[int, str]) -> None:
        """Mark the chats busy in the background (the others lose their mark)."""
        chats = self.activity.keys() | activity.keys()
        changed = {chat for chat in chats if self.activity.get(chat) != activity.get(chat)}
        self.activity = dict(activity)
        for chat_id in changed:
            row = self.row_of(chat_id)
            if row is not None:
                index = self.index(row)
                self.dataChanged.emit(index, index, [ACTIVITY_ROLE, Qt.ItemDataRole.ToolTipRole])

    def flags(self, index: Index) -> Qt.ItemFlag:
        if index.isValid() and self._rows[index.row()].header:
            return Qt.ItemFlag.NoItemFlags  # a header is neither selectable nor clickable
        return super().flags(index)

    def canFetchMore(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and self._after is not None and self._loading is None

    def fetchMore(self, parent: Index = QModelIndex()) -> None:  # noqa: B008
        if self.canFetchMore(parent) and loop_running():
            self._loading = spawn(self._next_page(self._generation, self._after), "load chats")

    # -- loading -------------------------------------------------------------------------------------------

    async def reload(self) -> None:
        """Read the first page anew (dropping later pages); a reload started meanwhile wins."""
        if self.source is None:
            return
        self._generation += 1
        generation = self._generation
        pinned = await self.source.conversations_page(MAX_PAGE, pinned=True, folder=self.folder)
        page = await self.source.conversations_page(self.page_size, pinned=False, folder=self.folder)
        if generation != self._generation:
            return
        self.beginResetModel()
        self._rows = [_Row(header=PINNED)] if pinned.chats else []
        self._rows += [_Row(chat=self._titled(chat), pinned=True) for chat in pinned.chats]
        self._loading = None
        self._add(page)
        self.total += pinned.total
        self.endResetModel()
        self.page_loaded.emit()

    async def _next_page(self, generation: int, after: tuple[float, int] | None) -> None:
        assert self.source is not None
        try:
            page = await self.source.conversations_page(self.page_size, after, pinned=False, folder=self.folder)
        finally:
            if generation == self._generation:
                self._loading = None
        if generation != self._generation:
            return  # a reload replaced the list meanwhile
        rows = self._grouped(page.chats)
        self._after, self.total = page.after, page.total + self.pinned_count()
        if rows:
            self.beginInsertRows(QModelIndex(), len(self._rows), len(self._rows) + len(rows) - 1)
            self._rows.extend(rows)
            self.endInsertRows()
        self.page_loaded.emit()

    def _add(self, page: ConversationPage) -> None:
        self._rows.extend(self._grouped(page.chats))
        self._after, self.total = page.after, page.total

    def _grouped(self, chats: list[ChatSummary]) -> list[_Row]:
        """Rows for ``chats`` after those loaded: a header wherever the date group changes."""
        now = self._now()
        last = next((date_group(r.chat.updated_at, now) for r in reversed(self._rows) if r.chat and not r.pinned), None)
        rows = []
        for chat in chats:
            group = date_group(chat.updated_at, now)
            if group != last:
                rows.append(_Row(header=group))
                last = group
            rows.append(_Row(chat=self._titled(chat)))
        return rows

    def _titled(self, chat: ChatSummary) -> ChatSummary:
        title = self.new_titles.get(chat.id)
        return chat if title is None else chat._replace(title=title)

    # -- lookups ---------------------------------------------------------------------------------------------

    def row_of(self, chat_id: int) -> int | None:
        return next((i for i, r in enumerate(self._rows) if r.chat is not None and r.chat.id == chat_id), None)

    def chat_count(self) -> int:
        """Chats loaded so far (headers not counted)."""
        return sum(1 for r in self._rows if r.chat is not None)

    def pinned_count(self) -> int:
        return sum(1 for r in self._rows if r.pinned)

    def is_pinned(self, chat_id: int) -> bool:
        row = self.row_of(chat_id)
        return row is not None and self._rows[row].pinned

    def has_more(self) -> bool:
        return self._after is not None

    def title_of(self, chat_id: int) -> str | None:
        row = self.row_of(chat_id)
        chat = self._rows[row].chat if row is not None else None
        return chat.title if chat is not None else None

    def set_title(self, chat_id: int, title: str) -> None:
        """Show a chat's new name at once, and over pages read until ``title_saved`` (the store is told apart)."""
        self.new_titles[chat_id] = title
        row = self.row_of(chat_id)
        chat = self._rows[row].chat if row is not None else None
        if row is None or chat is None:
            return
        self._rows[row] = _Row(chat=chat._replace(title=title), pinned=self._rows[row].pinned)
        index = self.index(row)
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole])

    def remove(self, chat_id: int) -> None:
        """Drop a deleted chat's row at once (and its header when it was the group's only chat)."""
        row = self.row_of(chat_id)
        if row is None:
            return
        first = row
        before_is_header = row > 0 and bool(self._rows[row - 1].header)
        after_is_chat = row + 1 < len(self._rows) and self._rows[row + 1].chat is not None
        if before_is_header and not after_is_chat:
            first = row - 1
        self.beginRemoveRows(QModelIndex(), first, row)
        del self._rows[first : row + 1]
        self.endRemoveRows()
        self.total = max(0, self.total - 1)


class _Delegate(QStyledItemDelegate):
    """Headers as small muted captions; chats as rounded rows, elided, with a trash icon when hovered."""

    def __init__(self, owner: ChatList) -> None:
        super().__init__(owner)
        self._owner = owner

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        return QSize(option.rect.width(), _ROW_H)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        t = tokens(self._owner.palette())  # not the view's: its style sheet makes its base transparent
        rect: QRect = option.rect
        state = option.state
        text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        if index.data(HEADER_ROLE):
            font = painter.font()
            font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
            font.setBold(True)
            painter.setFont(font)
            painter.setPen(t.muted)
            area = rect.adjusted(SPACE_S + 2, 0, -SPACE_S, -4)
            painter.drawText(area, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom, text)
            painter.restore()
            return
        selected = bool(state & QStyle.StateFlag.State_Selected)
        hovered = bool(state & QStyle.StateFlag.State_MouseOver)
        card = rect.adjusted(SPACE_XS, 1, -SPACE_XS, -1)
        if selected or hovered:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(t.accent_soft if selected else t.hover)
            painter.drawRoundedRect(card, RADIUS, RADIUS)
        activity = index.data(ACTIVITY_ROLE)
        right = SPACE_S + (_TRASH if hovered else 0) + (_DOT + SPACE_S if activity else 0)
        room = card.adjusted(SPACE_S, 0, -right, 0)
        painter.setPen(t.text)
        elided = painter.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, room.width())
        painter.drawText(room, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, elided)
        if activity:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(t.warning if activity == APPROVAL else t.accent)
            painter.drawEllipse(room.right() + SPACE_S, card.center().y() - _DOT // 2 + 1, _DOT, _DOT)
        if hovered:
            self._owner.trash_icon.paint(painter, trash_rect(rect))
        painter.restore()


class TitleEditor(QLineEdit):
    """The line edit laid over a chat's row while it is renamed. ``finished(True)`` on Enter or when the focus
    leaves it (save), ``finished(False)`` on Esc (cancel)."""

    finished = Signal(bool)

    def __init__(self, title: str, parent: QWidget) -> None:
        super().__init__(title, parent)
        self.setObjectName("chatTitleEditor")
        self.setMaxLength(MAX_TITLE)
        self.setAccessibleName("Chat name")
        self.setToolTip("Enter saves the name, Esc keeps the old one")
        self.selectAll()
        self.returnPressed.connect(lambda: self.finished.emit(True))

    def event(self, event: QEvent) -> bool:
        if _is_escape_override(event):  # Esc is the editor's (the page's would stop a reply)
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.finished.emit(False)
            return
        super().keyPressEvent(event)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        if event.reason() != Qt.FocusReason.PopupFocusReason:  # not for the line edit's own context menu
            self.finished.emit(True)


def _is_escape_override(event: QEvent) -> bool:
    """Whether ``event`` asks if a widget wants Esc before the window's shortcuts get it."""
    return (
        isinstance(event, QKeyEvent)
        and event.type() == QEvent.Type.ShortcutOverride
        and event.key() == Qt.Key.Key_Escape
    )


def trash_rect(row: QRect) -> QRect:
    """Where a row's delete icon is drawn and clicked."""
    size = 16
    return QRect(row.right() - SPACE_XS - SPACE_S - size, row.center().y() - size // 2 + 1, size, size)


class ChatList(QWidget):
    """ "New chat", the search box, the folder filter, then the chats (pinned first, then by date).

    ``chat_chosen(id)`` on a click; ``search_hit_chosen(id, message_index)`` on a search result; the context
    menu's requests are signals too (the page does the work); ``refresh()`` reloads the first page.
    """

    chat_chosen = Signal(int)
    new_chat_requested = Signal()
    delete_requested = Signal(int)
    rename_requested = Signal(int, str)  # chat id, its new name (spaces collapsed, never empty)
    search_hit_chosen = Signal(int, int)
    pin_requested = Signal(int, bool)  # chat id, pin (True) or unpin
    folder_requested = Signal(int)
    fork_requested = Signal(int, int)  # chat id, the last turns to keep (0: the whole chat)
    export_requested = Signal(int, str)  # chat id, "md" | "json" | "html"
    import_requested = Signal()

    def __init__(
        self, source: ChatSource | None = None, now: Callable[[], float] = time.time, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.model = ChatListModel(now)
        self.model.source = source
        self._current: int | None = None
        self._renaming: tuple[int, TitleEditor] | None = None  # the chat being renamed, and its editor
        self._search_generation = 0
        self.searching: asyncio.Task[Any] | None = None
        self.trash_icon = icon("trash")
        self.new_chat_button = QPushButton(icon("plus"), "New chat")
        self.new_chat_button.setObjectName("newChatButton")
        self.new_chat_button.clicked.connect(self.new_chat_requested)
        self.search_box = QLineEdit()
        self.search_box.setObjectName("chatSearch")
        self.search_box.setPlaceholderText("Search chats")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.search_box.setToolTip("Find words in every chat (their text and thinking)")
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self._start_search)
        self.search_box.textChanged.connect(self._search_text_changed)
        self.folder_filter = QComboBox()
        self.folder_filter.setObjectName("chatFolderFilter")
        self.folder_filter.setToolTip("Show the chats of one folder")
        self.folder_filter.addItem(ALL_CHATS)
        self.folder_filter.hide()
        self.folder_filter.currentIndexChanged.connect(self._folder_chosen)
        self.results = SearchResults()
        self.results.hit_chosen.connect(self.search_hit_chosen)
        self.results.hide()
        self.view = QListView()
        self.view.setObjectName("chatListView")
        self.view.setModel(self.model)
        self.view.setItemDelegate(_Delegate(self))
        self.view.setMouseTracking(True)
        self.view.setUniformItemSizes(True)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setFrameShape(QListView.Shape.NoFrame)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.view.clicked.connect(self._clicked)
        self.view.activated.connect(self._clicked)
        self.view.setStyleSheet("QListView { background: transparent; border: none; }")
        self.view.viewport().installEventFilter(self)
        self.view.installEventFilter(self)  # F2 renames, Del deletes the selected chat
        self.view.verticalScrollBar().valueChanged.connect(self._place_editor)
        self.empty = QLabel("No chats yet.")
        set_role(self.empty, "muted")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.empty.setWordWrap(True)
        self.empty.hide()
        self.model.modelReset.connect(self._after_load)
        self.model.rowsInserted.connect(self._after_load)
        self.model.rowsRemoved.connect(self._after_load)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_XS, SPACE_S, SPACE_XS, 0)
        layout.setSpacing(SPACE_S)
        layout.addWidget(self.new_chat_button)
        layout.addWidget(self.search_box)
        layout.addWidget(self.folder_filter)
        layout.addWidget(self.empty)
        layout.addWidget(self.results, 1)
        layout.addWidget(self.view, 1)
        self.setMinimumWidth(0)

    # -- public API --------------------------------------------------------------------------------------------

    def set_source(self, source: ChatSource | None) -> None:
        """The store to read chats from (it opens after the page is built)."""
        self.model.source = source

    async def refresh(self) -> None:
        """Reload the first page of chats (off the Qt thread) and keep the current chat selected; a search shown
        is run again (a chat may have changed)."""
        source = self.model.source
        if source is not None:
            self._show_folders(await source.folders())
        await self.model.reload()
        if self.search_box.text().strip():
            await self.search(self.search_box.text())

    async def search(self, text: str) -> list[SearchHit]:
        """Show the messages matching ``text`` (a search started later wins); empty text shows the chats."""
        self._search_generation += 1
        generation = self._search_generation
        source = self.model.source
        hits = await source.search(text) if source is not None and text.strip() else []
        if generation == self._search_generation:
            self._show_results(text, hits)
        return hits

    def is_searching(self) -> bool:
        """Whether search results are shown instead of the chats."""
        return self.results.isVisible() or bool(self.search_box.text().strip())

    def set_activity(self, activity: dict[int, str]) -> None:
        """Mark the chats busy in the background: GENERATING (an accent dot) or APPROVAL (an amber dot)."""
        self.model.set_activity(activity)

    def select(self, chat_id: int | None) -> None:
        """Mark ``chat_id`` as the chat shown (selected once its row is loaded); emits nothing."""
        self._current = chat_id
        self._show_current()

    def current_id(self) -> int | None:
        return self._current

    def titles(self) -> list[str]:
        """The titles of the chats loaded so far, in list order (date headers left out)."""
        model = self.model
        rows = (model.index(row) for row in range(model.rowCount()))
        return [str(index.data()) for index in rows if index.data(ID_ROLE) is not None]

    def remove(self, chat_id: int) -> None:
        """Drop a deleted chat from the list at once (before the next refresh)."""
        self.model.remove(chat_id)

    # -- rename in place -----------------------------------------------------------------------------------------

    def begin_rename(self, chat_id: int | None = None) -> bool:
        """Edit the name of ``chat_id`` (default: the selected chat) in a line edit over its row; False when it is
        not listed. Enter (or leaving the field) saves, Esc cancels; an empty name is refused."""
        if chat_id is None:
            selected = self.view.currentIndex().data(ID_ROLE)
            chat_id = int(selected) if selected is not None else self._current
        title = self.model.title_of(chat_id) if chat_id is not None else None
        if chat_id is None or title is None:
            return False
        self._finish_rename(True)  # one at a time
        editor = TitleEditor(title, self.view.viewport())
        editor.finished.connect(self._finish_rename)
        self._renaming = (chat_id, editor)
        row = self.model.row_of(chat_id)
        assert row is not None
        self.view.scrollTo(self.model.index(row))
        self._place_editor()
        editor.show()
        editor.setFocus(Qt.FocusReason.OtherFocusReason)
        return True

    def title_saved(self, chat_id: int) -> None:
        """The store has the chat's new name (or refused it): pages read from now on show what it holds."""
        self.model.new_titles.pop(chat_id, None)

    def title_editor(self) -> TitleEditor | None:
        """The line edit of the rename in progress, if any."""
        return self._renaming[1] if self._renaming else None

    def _place_editor(self, *_args: object) -> None:
        """Keep the editor over its chat's row (the list reloads and scrolls meanwhile); a chat gone ends it."""
        if self._renaming is None:
            return
        chat_id, editor = self._renaming
        row = self.model.row_of(chat_id)
        if row is None:
            self._finish_rename(False)
            return
        editor.setGeometry(self.view.visualRect(self.model.index(row)).adjusted(SPACE_XS, 1, -SPACE_XS, -1))

    def _finish_rename(self, save: bool) -> None:
        if self._renaming is None:
            return
        chat_id, editor = self._renaming
        title = " ".join(editor.text().split())
        had_focus = editor.hasFocus()
        if save and not title and had_focus:  # Enter on an empty name: refused, the field stays
            editor.setPlaceholderText("Type a name (Esc keeps the old one)")
            return
        self._renaming = None  # before hiding it: hiding moves the focus, which ends the edit again
        editor.hide()
        editor.deleteLater()
        if had_focus:
            self.view.setFocus(Qt.FocusReason.OtherFocusReason)
        if save and title and title != self.model.title_of(chat_id):
            self.model.set_title(chat_id, title)
            self.rename_requested.emit(chat_id, title)

    # -- internals ----------------------------------------------------------------------------------------------

    def _clicked(self, index: QModelIndex) -> None:
        chat_id = index.data(ID_ROLE)
        if chat_id is None:
            return
        self._current = int(chat_id)
        self.chat_chosen.emit(int(chat_id))

    def _show_current(self) -> None:
        row = self.model.row_of(self._current) if self._current is not None else None
        if row is None:
            self.view.clearSelection()
            return
        index = self.model.index(row)
        self.view.selectionModel().setCurrentIndex(index, self.view.selectionModel().SelectionFlag.ClearAndSelect)

    def _after_load(self, *_args: object) -> None:
        if not self.search_box.text().strip():
            self.empty.setText("No chats in this folder." if self.model.folder is not None else "No chats yet.")
            self.empty.setVisible(self.model.rowCount() == 0 and not self.model.has_more())
        self._show_current()
        self._place_editor()

    # -- search -------------------------------------------------------------------------------------------------

    def _search_text_changed(self, text: str) -> None:
        if text.strip():
            self._search_timer.start()
            return
        self._search_timer.stop()
        self._search_generation += 1  # a search still running is dropped
        self._show_results("", [])

    def _start_search(self) -> None:
        if loop_running():
            self.searching = spawn(self.search(self.search_box.text()), "search chats")

    def _show_results(self, text: str, hits: list[SearchHit]) -> None:
        active = bool(text.strip())
        self.results.set_hits(hits)
        self.results.setVisible(active)
        self.view.setVisible(not active)
        if active:
            self.empty.setText("No chat holds these words." if not hits else "")
            self.empty.setVisible(not hits)
        else:
            self._after_load()

    def keyPressEvent(self, event: Any) -> None:
        """Escape in the search box clears it (the chats come back)."""
        if event.key() == Qt.Key.Key_Escape and self.search_box.text():
            self.search_box.clear()
            return
        super().keyPressEvent(event)

    # -- folders ------------------------------------------------------------------------------------------------

    def _show_folders(self, folders: list[str]) -> None:
        """The folder filter lists the folders in use; hidden when there are none (and none is chosen)."""
        chosen = self.model.folder
        names = [ALL_CHATS, *folders]
        if chosen is not None and chosen not in folders:
            names.append(chosen)  # the folder shown was emptied: keep it until the person chooses another
        if [self.folder_filter.itemText(i) for i in range(self.folder_filter.count())] != names:
            self.folder_filter.blockSignals(True)
            self.folder_filter.clear()
            self.folder_filter.addItems(names)
            self.folder_filter.setCurrentIndex(names.index(chosen) if chosen is not None else 0)
            self.folder_filter.blockSignals(False)
        self.folder_filter.setVisible(len(names) > 1)

    def _folder_chosen(self, index: int) -> None:
        self.model.folder = None if index <= 0 else self.folder_filter.itemText(index)
        if loop_running():
            spawn(self.model.reload(), "load chats")

    def show_folder(self, folder: str | None) -> None:
        """Show only the chats in ``folder`` (None: every chat); applied at the next refresh."""
        self.model.folder = folder

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """A click on a row's trash icon deletes that chat; the list never sees it (nor selects or opens it). A
        double-click on a chat renames it; F2 renames and Del deletes the selected chat."""
        kind = event.type()
        if watched is self.view and kind == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            return self._key(event)
        if watched is self.view.viewport() and kind == QEvent.Type.Resize:
            self._place_editor()
        if watched is self.view.viewport() and kind in (
            QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease, QEvent.Type.MouseButtonDblClick
        ):  # fmt: skip
            assert isinstance(event, QMouseEvent)
            pos = event.position().toPoint()
            index = self.view.indexAt(pos)
            chat_id = index.data(ID_ROLE) if index.isValid() else None
            if chat_id is not None and trash_rect(self.view.visualRect(index)).contains(pos):
                if kind == QEvent.Type.MouseButtonRelease and event.button() == Qt.MouseButton.LeftButton:
                    self.delete_requested.emit(int(chat_id))
                return True
            if chat_id is not None and kind == QEvent.Type.MouseButtonDblClick:
                if event.button() == Qt.MouseButton.LeftButton:  # here, not the view's doubleClicked: the click
                    self.begin_rename(int(chat_id))  # before opened the chat, and the reload forgets the press
                return True
        return super().eventFilter(watched, event)

    def _key(self, event: QKeyEvent) -> bool:
        """F2 and Del on the list: True when handled."""
        if event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            return False
        if event.key() == Qt.Key.Key_F2:
            return self.begin_rename()
        selected = self.view.currentIndex().data(ID_ROLE)
        if event.key() == Qt.Key.Key_Delete and selected is not None:
            self.delete_requested.emit(int(selected))
            return True
        return False

    def _context_menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        chat_id = index.data(ID_ROLE) if index.isValid() else None
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        if chat_id is not None:
            self._chat_actions(menu, int(chat_id))
            menu.addSeparator()
        menu.addAction(icon("download"), "Import chats…", self.import_requested.emit)
        if chat_id is not None:
            menu.addSeparator()
            delete = menu.addAction(icon("trash"), "Delete chat", lambda: self.delete_requested.emit(int(chat_id)))
            _show_key(delete, QKeySequence(QKeySequence.StandardKey.Delete))
        menu.popup(self.view.viewport().mapToGlobal(pos))

    def _chat_actions(self, menu: QMenu, chat_id: int) -> None:
        rename = menu.addAction(icon("edit"), "Rename…", lambda: self.begin_rename(chat_id))
        _show_key(rename, QKeySequence(Qt.Key.Key_F2))
        pinned = self.model.is_pinned(chat_id)
        menu.addAction("Unpin" if pinned else "Pin to the top", lambda: self.pin_requested.emit(chat_id, not pinned))
        menu.addAction(icon("folder"), "Move to folder…", lambda: self.folder_requested.emit(chat_id))
        fork = menu.addMenu(icon("fork"), "Fork into a new chat")
        for label, turns in (("Whole chat", 0), ("Last turn only", 1), ("Last 3 turns", 3)):
            fork.addAction(label, functools.partial(self.fork_requested.emit, chat_id, turns))
        export = menu.addMenu(icon("external"), "Export")
        for label, fmt in (("Markdown (.md)…", "md"), ("JSON (.json)…", "json"), ("HTML page (.html)…", "html")):
            export.addAction(label, functools.partial(self.export_requested.emit, chat_id, fmt))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.trash_icon = icon("trash")
            self.new_chat_button.setIcon(icon("plus"))


def _show_key(action: QAction, keys: QKeySequence) -> None:
    """Show ``keys`` beside a menu's action; they work on the list itself (the menu's copy only while it is open)."""
    action.setShortcut(keys)
    action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
