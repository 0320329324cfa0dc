"""The main window's size, place, maximized state and panes, kept between runs apart from the settings (window
state is not a setting: Picard's split). Kept with QSettings in an INI file in the config folder; restored fitted
to the screen the window opens on, so that a size saved on a large monitor comes back whole on a small laptop, and
the first window is sized to its screen (1200×780 at most, never larger than the screen's free area)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QByteArray, QMargins, QPoint, QRect, QSettings, QSize, Qt
from PySide6.QtGui import QGuiApplication, QScreen
from PySide6.QtWidgets import QSplitter, QWidget

FILE_NAME = "window-state.ini"
DEFAULT_SIZE = QSize(1200, 780)
SCREEN_MARGIN = QMargins(24, 24, 24, 24)  # a first window leaves this much of the screen's free area around it
FRAME_GUESS = QMargins(4, 32, 4, 4)  # title bar and borders, until the window manager has framed the window


@dataclass
class WindowState:
    geometry: QRect | None = None  # the window's normal (not maximized) geometry, frame excluded; None: never saved
    maximized: bool = False
    splitters: dict[str, QByteArray] = field(default_factory=dict)  # QSplitter.saveState() by object name


def state_file(config_dir: Path) -> Path:
    return config_dir / FILE_NAME


def load(path: Path) -> WindowState:
    """What was saved at ``path``; an empty state when nothing (or nothing readable) was."""
    store = _settings(path)
    geometry = store.value("window/geometry")
    splitters = {}
    store.beginGroup("splitters")
    for name in store.childKeys():
        if isinstance(blob := store.value(name), QByteArray):
            splitters[name] = blob
    store.endGroup()
    valid = isinstance(geometry, QRect) and geometry.isValid()
    maximized = store.value("window/maximized", False, type=bool)
    return WindowState(geometry if valid else None, bool(maximized), splitters)


def save(path: Path, state: WindowState) -> None:
    store = _settings(path)
    if state.geometry is not None:
        store.setValue("window/geometry", state.geometry)
    store.setValue("window/maximized", state.maximized)
    for name, blob in state.splitters.items():
        store.setValue(f"splitters/{name}", blob)
    store.sync()


def capture(window: QWidget) -> WindowState:
    """The window's state now: its normal geometry (also when maximized) and its named splitters' states."""
    maximized = window.isMaximized()
    geometry = window.normalGeometry() if maximized or window.isFullScreen() else window.geometry()
    splitters = {s.objectName(): s.saveState() for s in window.findChildren(QSplitter) if s.objectName()}
    return WindowState(geometry if geometry.isValid() else None, maximized, splitters)


def apply(window: QWidget, state: WindowState) -> None:
    """Put the window (not yet shown) where ``state`` says, fitted to the screen; restore its named splitters (those
    built by then: the chat page's)."""
    screen = _screen_for(state.geometry)
    available = screen.availableGeometry()
    frame = frame_margins(window)
    rect = fit_rect(state.geometry, available, frame) if state.geometry else first_rect(available, frame)
    window.setGeometry(rect)
    if state.maximized:
        window.setWindowState(window.windowState() | Qt.WindowState.WindowMaximized)
    for splitter in window.findChildren(QSplitter):
        if (blob := state.splitters.get(splitter.objectName())) is not None:
            splitter.restoreState(blob)


def keep_on_screen(window: QWidget) -> None:
    """Once shown (framed by the window manager): moved and shrunk if its frame still sticks out of the screen."""
    if window.isMaximized() or window.isFullScreen():
        return
    screen = window.screen() or QGuiApplication.primaryScreen()
    fitted = fit_rect(window.geometry(), screen.availableGeometry(), frame_margins(window))
    if fitted != window.geometry():
        window.setGeometry(fitted)


def fit_rect(wanted: QRect, available: QRect, frame: QMargins) -> QRect:
    """``wanted`` (a window's geometry, frame excluded) shrunk and moved as little as needed for its frame to lie
    inside ``available``."""
    room = available.marginsRemoved(frame)
    size = wanted.size().boundedTo(room.size())
    x = min(max(wanted.x(), room.left()), room.left() + room.width() - size.width())
    y = min(max(wanted.y(), room.top()), room.top() + room.height() - size.height())
    return QRect(QPoint(x, y), size)


def first_rect(available: QRect, frame: QMargins) -> QRect:
    """A first window: ``DEFAULT_SIZE`` at most, a margin of the screen left around it, centred."""
    room = available.marginsRemoved(frame).marginsRemoved(SCREEN_MARGIN)
    rect = QRect(QPoint(0, 0), DEFAULT_SIZE.boundedTo(room.size()))
    rect.moveCenter(available.marginsRemoved(frame).center())
    return fit_rect(rect, available, frame)


def frame_margins(window: QWidget) -> QMargins:
    """The window manager's frame around the window: measured once it has one, else a typical title bar."""
    outer, inner = window.frameGeometry(), window.geometry()
    measured = QMargins(inner.left() - outer.left(), inner.top() - outer.top(), outer.right() - inner.right(),
                        outer.bottom() - inner.bottom())  # fmt: skip
    return measured if window.isVisible() and outer != inner else FRAME_GUESS


def _screen_for(geometry: QRect | None) -> QScreen:
    """The screen that holds the saved window's centre, else the primary screen."""
    screen = QGuiApplication.screenAt(geometry.center()) if geometry is not None else None
    return screen or QGuiApplication.primaryScreen()


def _settings(path: Path) -> QSettings:
    return QSettings(str(path), QSettings.Format.IniFormat)
