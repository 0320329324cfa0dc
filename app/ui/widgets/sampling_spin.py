"""A spin box for sampling figures (temperature, top P, min P, penalties) that writes them as every page does:
``0.95``, not ``0.950`` (``app.core.units.format_sampling_value``). Settings, the chat's sampling drawer and the
Modelfile parameter editor share it."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QWidget

from app.core.units import format_sampling_value

SAMPLING_DECIMALS = 3  # the precision a spin box keeps; the text drops trailing zeros


class SamplingSpinBox(QDoubleSpinBox):
    """A QDoubleSpinBox whose text is ``format_sampling_value`` (decimal point from the locale)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDecimals(SAMPLING_DECIMALS)

    def textFromValue(self, value: float) -> str:
        text = format_sampling_value(value, self.decimals())
        point = self.locale().decimalPoint()
        return text if point == "." else text.replace(".", point)


def sampling_spin(minimum: float, maximum: float, step: float, tip: str = "") -> SamplingSpinBox:
    """A :class:`SamplingSpinBox` over ``minimum``..``maximum`` that steps by ``step``."""
    box = SamplingSpinBox()
    box.setRange(minimum, maximum)
    box.setSingleStep(step)
    box.setToolTip(tip)
    return box
