"""Small pieces the Models pages share: an empty state with actions, a disclosure, a badge, a facts grid and a fits
line. Styled through roles in the app's style sheet (``app.ui.style.theme``), so they follow the palette."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.memory.fit import FITS, TIGHT, WONT_FIT, FitVerdict
from app.core.units import GiB, KiB, MiB, format_bytes
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import SPACE_L, SPACE_M, SPACE_S, set_role, tokens

Action = tuple[str, Callable[[], object]]


def shrinking_label(text: str = "", name: str = "", role: str | None = None) -> QLabel:
    """A word-wrapped label that never widens its window (a long path or name is clipped, not forced)."""
    label = QLabel(text)
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    if role:
        set_role(label, role)
    return label


def icon_button(text: str, icon_name: str, slot: Callable[[], object], *, accent: bool = False) -> QPushButton:
    button = QPushButton(text)
    button.setProperty("icon_name", icon_name)
    button.setIcon(icon(icon_name, _on_accent(button) if accent else None))
    button.clicked.connect(lambda _checked=False: slot())
    if accent:
        set_role(button, "accent")
    return button


def _on_accent(widget: QWidget) -> QColor:
    return tokens(widget.palette()).on_accent


def refresh_icons(root: QWidget) -> None:
    """Redraw the icons of ``icon_button``s under ``root`` in the current palette (after a palette change)."""
    for button in root.findChildren(QPushButton):
        name = button.property("icon_name")
        if isinstance(name, str) and name:
            accent = button.property("role") == "accent"
            button.setIcon(icon(name, _on_accent(button) if accent else None))


class EmptyState(QFrame):
    """A page with nothing to show yet: an icon, a short title, one sentence and the buttons for the next step
    (the first one in the accent colour)."""

    def __init__(self, name: str, icon_name: str, title: str, text: str, actions: list[Action]) -> None:
        super().__init__()
        self.setObjectName(name)
        self.icon_name = icon_name
        self.icon_label = QLabel()
        self.icon_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title = shrinking_label(title, f"{name}_title", "empty-title")
        self.text = shrinking_label(text, f"{name}_text", "muted")
        for label in (self.title, self.text):
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.buttons: list[QPushButton] = []
        row = QHBoxLayout()
        row.addStretch(1)
        for index, (caption, slot) in enumerate(actions):
            button = QPushButton(caption)
            button.clicked.connect(lambda _checked=False, s=slot: s())
            if index == 0:
                set_role(button, "accent")
            self.buttons.append(button)
            row.addWidget(button)
        row.addStretch(1)
        inner = QVBoxLayout()
        inner.setSpacing(SPACE_S)
        inner.addWidget(self.icon_label)
        inner.addWidget(self.title)
        inner.addWidget(self.text)
        inner.addSpacing(SPACE_S)
        inner.addLayout(row)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE_L, SPACE_L, SPACE_L, SPACE_L)
        layout.addStretch(1)
        layout.addLayout(inner)
        layout.addStretch(2)
        self._restyle()

    def button(self, text: str) -> QPushButton:
        return next(b for b in self.buttons if b.text() == text)

    def set_text(self, title: str, text: str) -> None:
        self.title.setText(title)
        self.text.setText(text)

    def _restyle(self) -> None:
        self.icon_label.setPixmap(
            icon(self.icon_name, self.palette().color(self.foregroundRole())).pixmap(icon_size(40))
        )

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._restyle()


class Disclosure(QWidget):
    """A titled section that opens and closes (a chevron button); the body is hidden while closed."""

    toggled = Signal(bool)

    def __init__(self, title: str, body: QWidget, name: str, expanded: bool = False) -> None:
        super().__init__()
        self.setObjectName(name)
        self.button = QToolButton()
        self.button.setObjectName(f"{name}_toggle")
        self.button.setText(title)
        self.button.setCheckable(True)
        self.button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.button.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        set_role(self.button, "disclosure")
        self.body = body
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(SPACE_S // 2)
        layout.addWidget(self.button)
        layout.addWidget(body)
        self.button.toggled.connect(self.set_expanded)
        self.set_expanded(expanded)

    def expanded(self) -> bool:
        return self.button.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        if self.button.isChecked() != expanded:
            self.button.setChecked(expanded)  # emits toggled again, which lands here once more
            return
        self.button.setIcon(icon("chevron-down" if expanded else "chevron-right"))
        self.body.setVisible(expanded)
        self.toggled.emit(expanded)


def badge(text: str, name: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName(name)
    set_role(label, "badge")
    label.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
    return label


class FactsGrid(QFrame):
    """Label / value rows in a card: the human summary of a model."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.setObjectName(name)
        set_role(self, "card")
        self.form = QFormLayout(self)
        self.form.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_S)
        self.form.setHorizontalSpacing(SPACE_L)
        self.form.setVerticalSpacing(SPACE_S // 2)
        self.form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        self.values: dict[str, QLabel] = {}

    def set_facts(self, facts: list[tuple[str, str]]) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        self.values = {}
        for label, value in facts:
            key = QLabel(label)
            set_role(key, "muted")
            shown = shrinking_label(value, f"fact_{label.lower().replace(' ', '_')}")
            shown.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.values[label] = shown
            self.form.addRow(key, shown)

    def value(self, label: str) -> str:
        return self.values[label].text() if label in self.values else ""


def fit_role(verdict: FitVerdict | None) -> str:
    if verdict is None:
        return "muted"
    return {FITS: "fits", TIGHT: "tight"}.get(verdict.state, "wont-fit")


def uses_of(needed: int, available: int) -> str:
    """``0.8 of 22.0 GiB``: both figures in the unit of the larger one, one decimal."""
    scale, unit = next(((s, u) for s, u in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")) if available >= s), (1, "B"))
    if unit == "B" or needed < 0.05 * scale:  # "0.0 of 20.5 GiB" says nothing: each in its own unit
        return f"{format_bytes(needed)} of {format_bytes(available)}"
    return f"{needed / scale:.1f} of {available / scale:.1f} {unit}"


def compact_verdict(verdict: FitVerdict) -> str:
    """``Fits · 1.1 GiB`` for a narrow column (the sentence is the tooltip)."""
    word = {FITS: "Fits", TIGHT: "Tight fit"}.get(verdict.state, "Won't fit")
    return f"{word} · {format_bytes(verdict.needed_bytes)}"


def short_verdict(verdict: FitVerdict) -> str:
    """``Fits: uses 0.8 of 22.0 GiB RAM``: the one verdict line (the estimator adds only what it leaves out)."""
    word = {FITS: "Fits", TIGHT: "Tight fit"}.get(verdict.state, "Won't fit")
    verb = "needs" if verdict.state == WONT_FIT else "uses"
    return f"{word}: {verb} {uses_of(verdict.needed_bytes, verdict.available_bytes)} {_judged_on(verdict)}"


def _judged_on(verdict: FitVerdict) -> str:
    return "VRAM" if "VRAM" in verdict.summary else "RAM"


def verdict_details(verdict: FitVerdict, gpu_bytes: int, has_gpu: bool) -> str:
    """What the verdict line does not say: the GPU's share when RAM is what limits, or that there is no GPU."""
    if not has_gpu:
        return "No GPU here: everything runs from RAM."
    if gpu_bytes and _judged_on(verdict) == "RAM":
        return f"The GPU takes {format_bytes(gpu_bytes)} of the load; RAM is what limits it."
    return ""
