"""The mouse wheel over a spin box, combo box or slider that has no focus scrolls the page, and leaves the value as it
was (it once switched the chat's preset and the Library's V cache type under the pointer); with focus, the wheel
still changes it. Every such control on every page, in the real window."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

from tests.support.waiting import until

UP, DOWN = 120, -120


def wheel(widget: QWidget, delta: int) -> None:
    """A wheel notch over the middle of ``widget``, as the mouse sends it."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(centre)),
        QPoint(),
        QPoint(0, delta),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def value(control: QWidget) -> object:
    if isinstance(control, QAbstractSpinBox):
        return control.text()
    if isinstance(control, QComboBox):
        return control.currentIndex(), control.currentText()
    assert isinstance(control, QAbstractSlider)
    return control.value()


def controls(root: QWidget) -> list[QWidget]:
    """The visible spin boxes, combo boxes and sliders under ``root`` (scroll bars are how pages scroll)."""
    found = [*root.findChildren(QAbstractSpinBox), *root.findChildren(QComboBox), *root.findChildren(QAbstractSlider)]
    return [w for w in found if w.isVisible() and not isinstance(w, QScrollBar)]


def scrollable_area(widget: QWidget) -> QScrollBar | None:
    """The vertical bar of the innermost scroll area around ``widget`` that has room to scroll."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            bar = parent.verticalScrollBar()
            if bar.maximum() > bar.minimum():
                return bar
        parent = parent.parentWidget()
    return None


def check_unfocused(window, where: str, seen: dict[str, int], scrolled: list[str]) -> None:
    """Each control here: wheel up and down without focus; its value stays, the page around it scrolls."""
    window.nav.setFocus()
    for control in controls(window):
        name = f"{where}: {type(control).__name__} {control.objectName() or control.toolTip()[:30]!r}"
        if name in seen:
            continue
        seen[name] = 1
        assert not control.hasFocus(), name
        assert control.focusPolicy() != Qt.FocusPolicy.WheelFocus, f"{name}: the wheel would give it focus"
        before = value(control)
        for delta in (UP, DOWN):
            bar = scrollable_area(control)
            if bar is not None:
                bar.setValue((bar.minimum() + bar.maximum()) // 2)
                middle = bar.value()
            wheel(control, delta)
            assert value(control) == before, f"{name}: the wheel changed it without focus"
            if bar is not None:
                assert bar.value() != middle, f"{name}: the page did not scroll"
                scrolled.append(name)


async def show_everything(window, model_folder) -> list[tuple[str, object]]:
    """(name, a step that shows it) for every page and state the controls live in."""
    window.workstation.settings.model_folders = [str(model_folder)]
    library = window.models_panel

    async def chat() -> None:
        window.open_path("chat")
        window.chat_panel.set_drawer_open(True)

    async def library_detail() -> None:
        window.open_path("models/library")
        await until(lambda: library.last_scan is not None and library.proxy.rowCount() > 0)
        library.table.selectRow(0)
        await until(lambda: library.details is not None)
        for section in (library.defaults_section, library.estimate_section, library.advanced_section):
            section.set_expanded(True)  # every control of the detail pane in view

    steps: list[tuple[str, object]] = [("chat", chat), ("models/library", library_detail)]
    for path in ("models/discover", "models/downloads", "models/ollama", "modelfiles", "vllm", "batch", "bench",
                 "monitor", "server"):  # fmt: skip
        steps.append((path, lambda path=path: _open(window, path)))
    for section in window.settings_page.sections:
        steps.append((f"settings/{section.name}", lambda name=section.name: _settings(window, name)))
    return steps


async def _open(window, path: str) -> None:
    window.open_path(path)


async def _settings(window, name: str) -> None:
    window.open_path("settings").show_section(name)


def test_unfocused_controls_leave_the_wheel_to_the_page(qloop, make_window, model_folder):
    async def scenario():
        window = await make_window()
        window.resize(1024, 700)
        seen: dict[str, int] = {}
        scrolled: list[str] = []
        for where, step in await show_everything(window, model_folder):
            await step()
            await until(lambda: window.pages.currentWidget().isVisible())
            await asyncio.sleep(0)  # the layouts the step asked for are done
            check_unfocused(window, where, seen, scrolled)
        kinds = {name.split(": ")[1].split(" ")[0] for name in seen}
        assert len(seen) >= 30 and {"QComboBox", "QSpinBox", "QDoubleSpinBox"} <= kinds, sorted(seen)
        drawer = [name for name in scrolled if name.startswith("chat:")]
        assert drawer, "the chat's settings drawer should scroll under the wheel"
        assert any(name.startswith("models/library") for name in scrolled)  # the detail pane

    qloop.run_until_complete(scenario())


def test_a_focused_control_still_takes_the_wheel(qtbot, qloop, make_window):
    async def scenario():
        window = await make_window()
        window.open_path("chat")
        window.chat_panel.set_drawer_open(True)
        window.activateWindow()
        spin = next(c for c in controls(window) if isinstance(c, QAbstractSpinBox) and c.isEnabled())
        combo = next(c for c in controls(window) if isinstance(c, QComboBox) and c.isEnabled() and c.count() > 1)
        for control in (spin, combo):
            control.setFocus(Qt.FocusReason.MouseFocusReason)
            await until(control.hasFocus)
            before = value(control)
            wheel(control, DOWN if isinstance(control, QComboBox) else UP)
            if value(control) == before:  # at its end that way: the other way
                wheel(control, UP if isinstance(control, QComboBox) else DOWN)
            assert value(control) != before, type(control).__name__

    qloop.run_until_complete(scenario())
