"""One notice system for every page: dismissible, coloured banners (info / success / warning / error), one per key,
the newest on top, at most two at once: a newer one pushes out the oldest that is not an error. Info and success
notices go by themselves after a few seconds (one offering an action waits for it); warnings and errors stay until
dismissed or until the page hides them (the problem was fixed). Texts are short: what happened and what to do
(details go to the log)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import tokens

log = logging.getLogger("app.ui.notices")
LEVELS = ("info", "warning", "error", "success")
MAX_SHOWN = 2
AUTO_DISMISS_MS = {"info": 8_000, "success": 5_000}  # levels that go by themselves, after this long


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
    """Where a page's notices appear. ``show_notice`` replaces a notice with the same key.

    ``expired(key)`` when a notice went by itself; ``gone(key)`` whenever a notice leaves without its action taken
    (it expired, was dismissed, or was pushed out by newer ones), e.g. to make final what an Undo could take back.
    """

    expired = Signal(str)
    gone = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notices")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._notices: list[Notice] = []
        self._banners: list[_Banner] = []
        self._timers: dict[str, QTimer] = {}
        self.hide()

    def show_notice(
        self,
        text: str,
        level: str = "info",
        key: str | None = None,
        action: tuple[str, Callable[[], object]] | None = None,
        timeout_ms: int | None = None,
    ) -> str:
        """Show ``text``; returns its key (``key`` or the text itself). ``timeout_ms`` dismisses it by itself after
        that long (0: never); by default info and success notices go after ``AUTO_DISMISS_MS``, others stay."""
        key = key or text
        self._notices = [n for n in self._notices if n.key != key]
        action_text, callback = action if action else ("", None)
        self._notices.insert(0, Notice(key, level, text, action_text, callback))
        log.info("notice (%s): %s", level, text)
        self._start_timer(key, AUTO_DISMISS_MS.get(level, 0) if timeout_ms is None and not action else timeout_ms)
        pushed_out = self._make_room()
        self._rebuild()
        for old in pushed_out:
            self.gone.emit(old)
        return key

    def dismiss(self, key: str) -> None:
        if self._remove(key):
            self._rebuild()
            self.gone.emit(key)

    def clear(self, level: str | None = None) -> None:
        """Dismiss every notice (of ``level``, when given)."""
        keys = [n.key for n in self._notices if level is None or n.level == level]
        for key in keys:
            self._remove(key)
        self._rebuild()
        for key in keys:
            self.gone.emit(key)

    def notices(self) -> list[Notice]:
        return list(self._notices)

    def time_left_ms(self, key: str) -> int | None:
        """How long until the notice goes by itself; None when it waits (for the person, or its page)."""
        timer = self._timers.get(key)
        return timer.remainingTime() if timer is not None and timer.isActive() else None

    def text(self) -> str:
        """Every notice shown, newest first (for tests and accessibility)."""
        return "\n".join(n.text for n in self._notices[:MAX_SHOWN])

    def run_action(self, key: str) -> None:
        """The notice's button: it goes (without ``gone``) and its action runs."""
        notice = next((n for n in self._notices if n.key == key), None)
        if notice is not None and notice.action is not None:
            self._remove(key)
            self._rebuild()
            notice.action()

    def _remove(self, key: str) -> bool:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()
        before = len(self._notices)
        self._notices = [n for n in self._notices if n.key != key]
        return len(self._notices) != before

    def _start_timer(self, key: str, timeout_ms: int | None) -> None:
        """(Re)start the notice's own timer: a notice replaced under its key gets the new one's time."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.stop()
            old.deleteLater()
        if timeout_ms:
            timer = QTimer(self)  # dies with the area: never fires after it is gone
            timer.setSingleShot(True)
            timer.setTimerType(Qt.TimerType.PreciseTimer)  # a coarse one may run 5 % long
            timer.timeout.connect(lambda: self._expire(key))
            timer.start(timeout_ms)
            self._timers[key] = timer

    def _expire(self, key: str) -> None:
        if self._remove(key):
            self._rebuild()
            self.expired.emit(key)
            self.gone.emit(key)

    def _make_room(self) -> list[str]:
        """Beyond ``MAX_SHOWN``, the oldest notices that are not errors go (never the newest); returns their keys.
        Errors are never pushed out: when only errors are older, the oldest wait, unseen, for a free place."""
        pushed_out = []
        while len(self._notices) > MAX_SHOWN:
            older = [n for n in self._notices[1:] if n.level != "error"]
            if not older:
                break
            pushed_out.append(older[-1].key)
            self._remove(older[-1].key)
        return pushed_out

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
