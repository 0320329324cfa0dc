"""The chat's own setting in the drawer: what happens when its history fills the model's context."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QVBoxLayout, QWidget

from app.core.chat.conversation import OverflowPolicy
from app.core.chat.overflow import POLICY_LABELS, when_full
from app.ui.style.theme import set_role
from app.ui.widgets.factories import wrapped_label


class OverflowPicker(QWidget):
    """A labelled choice of ``OverflowPolicy``; emits ``chosen`` when the person picks one."""

    chosen = Signal(str)  # the OverflowPolicy's value

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setObjectName("overflow_policy")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(12)
        self.combo.setAccessibleName("When the context is full")
        for policy, label in POLICY_LABELS.items():
            default = " (default)" if policy is OverflowPolicy.DROP_OLDEST else ""
            self.combo.addItem(label + default, str(policy))
        self.note = wrapped_label(when_full(OverflowPolicy.DROP_OLDEST))
        set_role(self.note, "muted")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(wrapped_label("When the context is full"))
        layout.addWidget(self.combo)
        layout.addWidget(self.note)
        self.combo.activated.connect(self._activated)

    def show_policy(self, policy: OverflowPolicy) -> None:
        """The chat's policy, without emitting ``chosen``."""
        self.combo.blockSignals(True)
        self.combo.setCurrentIndex(max(self.combo.findData(str(policy)), 0))
        self.combo.blockSignals(False)
        self.note.setText(when_full(policy))
        self.combo.setToolTip(when_full(policy))

    def policy(self) -> OverflowPolicy:
        return OverflowPolicy(self.combo.currentData())

    def _activated(self, _index: int) -> None:
        self.show_policy(self.policy())
        self.chosen.emit(str(self.policy()))
