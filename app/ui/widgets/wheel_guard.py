"""One rule for the whole app: a spin box, combo box or slider takes the mouse wheel only when it has focus (the
person clicked or tabbed into it); otherwise the wheel scrolls the page it sits in, as if the control were not
there. Scrolling down a settings form must never rewrite the settings under the pointer.

One application-wide event filter (``install_wheel_guard``, from the composition root): on a control's first polish
it trades "focus by wheel" for "focus by click or Tab", and it re-sends an unfocused control's wheel events to the
scroll area around it."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox, QComboBox, QScrollBar, QWidget

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)
_WATCHED = frozenset({QEvent.Type.Wheel, QEvent.Type.Polish})


def is_guarded(widget: QObject) -> bool:
    """A control whose value the wheel changes (a scroll bar is how a page scrolls: not one of them)."""
    return isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar)


class WheelGuard(QObject):
    """The application's event filter; it sees every event, so it returns at once for all but two kinds."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind not in _WATCHED or not is_guarded(watched):
            return False
        assert isinstance(watched, QWidget)
        if kind == QEvent.Type.Polish:
            if watched.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the wheel must not give it focus either
            return False
        if watched.hasFocus():
            return False
        assert isinstance(event, QWheelEvent)
        scroll_page(watched, event)
        return True


def scroll_page(control: QWidget, event: QWheelEvent) -> None:
    """Scroll the first scroll area around ``control`` that can scroll that way (none: the wheel does nothing)."""
    event.accept()  # handled here: Qt must not offer it to the control's parents as well
    area = scroll_area_around(control, vertical=event.angleDelta().y() != 0)
    if area is None:
        return
    viewport = area.viewport()
    position = event.globalPosition()
    forwarded = QWheelEvent(
        viewport.mapFromGlobal(position),
        position,
        event.pixelDelta(),
        event.angleDelta(),
        event.buttons(),
        event.modifiers(),
        event.phase(),
        event.inverted(),
        event.source(),
    )
    QCoreApplication.sendEvent(viewport, forwarded)


def scroll_area_around(widget: QWidget, vertical: bool = True) -> QAbstractScrollArea | None:
    """The innermost scroll area holding ``widget`` that has room to scroll (else the innermost one)."""
    first: QAbstractScrollArea | None = None
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            first = first or parent
            bar = parent.verticalScrollBar() if vertical else parent.horizontalScrollBar()
            if bar.maximum() > bar.minimum():
                return parent
        parent = parent.parentWidget()
    return first


def install_wheel_guard(app: QCoreApplication) -> WheelGuard:
    """Install the guard on ``app`` once; returns the one installed."""
    guard = app.findChild(WheelGuard)
    if guard is None:
        guard = WheelGuard(app)
        app.installEventFilter(guard)
    return guard
