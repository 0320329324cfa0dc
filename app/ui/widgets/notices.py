"""One notice system for every page: dismissible, coloured banners (info / warning / error), one per key, the
newest on top, at most three at once. Texts are short: what happened and what to do (details go to the log)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import tokens

log = logging.getLogger("app.ui.notices")
LEVELS = ("info", "warning", "error", "success")
MAX_SHOWN = 3


@dataclass
class Notice:
    key: str
    level: str
    text: str
    action_text: str = ""
    action: Callable[[], object] | None = None


class _Banner(QFrame):
    def __init__(self, notice: Notice, area: NoticeArea) -> None:
        super().__init__(area)
        self.notice = notice
        self.setObjectName(f"notice_{notice.level}")
        self.icon = QLabel()
        self.label = QLabel(notice.text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setObjectName("notice_text")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.setSpacing(8)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.label, 1)
        if notice.action is not None:
            button = QPushButton(notice.action_text)
            button.clicked.connect(lambda: area.run_action(notice.key))
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        close = QToolButton()
        close.setIcon(icon("close"))
        close.setIconSize(icon_size(14))
        close.setToolTip("Dismiss")
        close.clicked.connect(lambda: area.dismiss(notice.key))
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.restyle()

    def restyle(self) -> None:
        t = tokens(self.palette())
        level = self.notice.level if self.notice.level in LEVELS else "info"
        fg, bg = getattr(t, level), getattr(t, f"{level}_bg")
        self.setStyleSheet(
            f"QFrame#{self.objectName()} {{ background: {bg.name()}; border: 1px solid {fg.name()};"
            f" border-radius: 8px; }} QLabel#notice_text {{ color: {t.text.name()}; }}"
        )
        kind = {"success": "check"}.get(level, level)
        self.icon.setPixmap(icon(kind, fg).pixmap(icon_size(18)))


class NoticeArea(QWidget):
    """Where a page's notices appear. ``show_notice`` replaces a notice with the same key."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notices")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._notices: list[Notice] = []
        self._banners: list[_Banner] = []
        self.hide()

    def show_notice(
        self,
        text: str,
        level: str = "info",
        key: str | None = None,
        action: tuple[str, Callable[[], object]] | None = None,
        timeout_ms: int | None = None,
    ) -> str:
        """Show ``text``; returns its key (``key`` or the text itself). ``timeout_ms`` dismisses it by itself."""
        key = key or text
        self._notices = [n for n in self._notices if n.key != key]
        action_text, callback = action if action else ("", None)
        self._notices.insert(0, Notice(key, level, text, action_text, callback))
        log.info("notice (%s): %s", level, text)
        self._rebuild()
        if timeout_ms:
            QTimer.singleShot(timeout_ms, self, lambda: self.dismiss(key))  # not after the area is gone
        return key

    def dismiss(self, key: str) -> None:
        before = len(self._notices)
        self._notices = [n for n in self._notices if n.key != key]
        if len(self._notices) != before:
            self._rebuild()

    def clear(self, level: str | None = None) -> None:
        self._notices = [n for n in self._notices if level is not None and n.level != level]
        self._rebuild()

    def notices(self) -> list[Notice]:
        return list(self._notices)

    def text(self) -> str:
        """Every notice shown, newest first (for tests and accessibility)."""
        return "\n".join(n.text for n in self._notices[:MAX_SHOWN])

    def run_action(self, key: str) -> None:
        notice = next((n for n in self._notices if n.key == key), None)
        if notice is not None and notice.action is not None:
            self.dismiss(key)
            notice.action()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            for banner in self._banners:
                banner.restyle()

    def _rebuild(self) -> None:
        for banner in self._banners:
            banner.setParent(None)
            banner.deleteLater()
        self._banners = [_Banner(notice, self) for notice in self._notices[:MAX_SHOWN]]
        for banner in self._banners:
            self._layout.addWidget(banner)
        self.setVisible(bool(self._banners))
