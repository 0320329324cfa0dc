"""Where a message is written: a multi-line input that grows with its text, one Send button that becomes Stop while
a reply is generated, a hint and the chat's context meter ("1,234 / 4,096 tokens", coloured near the limit)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.units import MISSING
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import set_role, tokens
from app.ui.widgets.elided_label import ElidedLabel

MIN_LINES, MAX_LINES = 2, 8
WARN_FRACTION = 0.85  # the meter turns to the warning colour from here


class Composer(QFrame):
    """``send_requested`` on the button or Ctrl+Enter, ``stop_requested`` on the button (as Stop) or Esc."""

    send_requested = Signal()
    stop_requested = Signal()

    generating = False
    _ready = False  # set once built: Qt sends change events while the style is applied

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        set_role(self, "card")
        self.input = QPlainTextEdit()
        self.input.setObjectName("message_input")
        self.input.setPlaceholderText("Write a message…")
        self.input.setFrameShape(QFrame.Shape.NoFrame)
        self.input.setStyleSheet("QPlainTextEdit { border: none; background: transparent; }")
        self.input.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.input.document().contentsChanged.connect(self._fit_height)
        self.input.installEventFilter(self)
        self.send_button = QToolButton()
        self.send_button.setObjectName("send_button")
        self.send_button.setIconSize(icon_size(20))
        self.send_button.setAutoRaise(False)
        self.hint = QLabel("Ctrl+Enter to send")
        set_role(self.hint, "muted")
        self.meter = ElidedLabel(mode=Qt.TextElideMode.ElideLeft)
        self.meter.setObjectName("context_meter")
        self.meter.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.meter.setToolTip("Tokens this chat fills in the model's context / the context size")
        self._meter_level = "muted"
        self._build()
        self.send_button.clicked.connect(self._clicked)
        self.set_generating(False)
        self._fit_height()
        self.show_context(None, None)
        self._ready = True

    def _build(self) -> None:
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.input, 1)
        top.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        bottom = QHBoxLayout()
        bottom.setContentsMargins(4, 0, 4, 0)
        bottom.addWidget(self.hint)
        bottom.addWidget(self.meter, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addLayout(bottom)

    # --- state ------------------------------------------------------------------------------------------------
    def set_generating(self, generating: bool) -> None:
        """Send becomes Stop while a reply is generated (and back)."""
        self.generating = generating
        self.send_button.setIcon(icon("stop" if generating else "send", tokens(self.palette()).on_accent))
        self.send_button.setToolTip("Stop the reply (Esc)" if generating else "Send (Ctrl+Enter)")
        self.send_button.setAccessibleName("Stop" if generating else "Send")
        self.hint.setText("Esc stops the reply" if generating else "Ctrl+Enter to send")
        self._style_button()

    def set_sending_enabled(self, enabled: bool) -> None:
        self.send_button.setEnabled(enabled or self.generating)

    def show_context(self, used: int | None, total: int | None, estimated: bool = False) -> None:
        """The chat's context use: ``used`` tokens of ``total`` (None: unknown); ``estimated`` marks a guess."""
        if total is None:
            self.meter.set_full_text("")
            return
        shown = MISSING if used is None else f"{'~' if estimated else ''}{used:,}"
        self.meter.set_full_text(f"{shown} / {total:,} tokens")
        fraction = (used or 0) / total if total else 0.0
        self._meter_level = "error" if fraction >= 1 else "warning" if fraction >= WARN_FRACTION else "muted"
        self._style_meter()

    def meter_level(self) -> str:
        return self._meter_level

    # --- looks ------------------------------------------------------------------------------------------------
    def _style_button(self) -> None:
        t = tokens(self.palette())
        background = t.error if self.generating else t.accent
        self.send_button.setStyleSheet(
            f"QToolButton#send_button {{ background: {background.name()}; border-radius: 16px; padding: 6px; }}"
            f"QToolButton#send_button:disabled {{ background: {t.border.name()}; }}"
        )

    def _style_meter(self) -> None:
        t = tokens(self.palette())
        colour = {"error": t.error, "warning": t.warning}.get(self._meter_level, t.muted)
        self.meter.setStyleSheet(f"color: {colour.name()};")

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if self._ready and event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.set_generating(self.generating)
            self._style_meter()

    def _fit_height(self) -> None:
        """Between MIN_LINES and MAX_LINES lines tall, following the text."""
        line = self.input.fontMetrics().lineSpacing()
        lines = max(MIN_LINES, min(MAX_LINES, int(self.input.document().size().height())))
        margins = self.input.contentsMargins()
        frame = 2 * self.input.frameWidth() + margins.top() + margins.bottom()
        self.input.setFixedHeight(lines * line + frame + 8)

    # --- input --------------------------------------------------------------------------------------------------
    def _clicked(self) -> None:
        (self.stop_requested if self.generating else self.send_requested).emit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Ctrl+Enter sends and Esc stops while typing (plain Enter makes a new line)."""
        if watched is self.input and event.type() == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            ctrl = bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)
            if ctrl and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                self.send_requested.emit()
                return True
            if event.key() == Qt.Key.Key_Escape and self.generating:
                self.stop_requested.emit()
                return True
        return super().eventFilter(watched, event)
