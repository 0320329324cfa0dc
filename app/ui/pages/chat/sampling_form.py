"""Sampling controls for the chat panel: temperature, top_p, top_k, min_p, repeat penalty, max tokens, seed."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QFormLayout, QLabel, QLineEdit, QSpinBox, QWidget

from app.core.params import SamplingParams

STOP_SEPARATOR = " | "
_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ("\t", "\\t"))  # a stop sequence may be a line break


def stop_text(stops: tuple[str, ...]) -> str:
    """Stop sequences as one line: separated by " | ", line breaks and tabs written as \\n and \\t."""
    return STOP_SEPARATOR.join(_escape(stop) for stop in stops)


def parse_stops(text: str) -> tuple[str, ...]:
    return tuple(_unescape(part) for part in text.split(STOP_SEPARATOR) if part)


def _escape(text: str) -> str:
    for raw, written in _ESCAPES:
        text = text.replace(raw, written)
    return text


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        pair = text[i : i + 2]
        found = next((raw for raw, written in _ESCAPES if pair == written), None)
        out.append(found if found is not None else text[i])
        i += 2 if found is not None else 1
    return "".join(out)


def _double(low: float, high: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    return box


class SamplingForm(QWidget):
    changed = Signal()

    def __init__(self, params: SamplingParams, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.temperature = _double(0.0, 2.0, 0.05)
        self.top_p = _double(0.0, 1.0, 0.01)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.min_p = _double(0.0, 1.0, 0.01)
        self.repeat_penalty = _double(0.5, 2.0, 0.01)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 1_000_000)
        self.max_tokens.setSpecialValueText("no limit")
        self.max_tokens.setToolTip("The longest reply, in tokens (no limit: until the context is full).")
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.stop = QLineEdit()
        self.stop.setPlaceholderText("none")
        self.stop.setToolTip(
            "Stop sequences, separated by ' | ' (\\n is a line break). The reply ends before any of them."
        )
        self.extras = QLabel()
        self.extras.setWordWrap(True)
        self._base = params
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top P", self.top_p)
        form.addRow("Top K", self.top_k)
        form.addRow("Min P", self.min_p)
        form.addRow("Repeat penalty", self.repeat_penalty)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        form.addRow("Stop", self.stop)
        form.addRow(self.extras)
        self.temperature.setToolTip("0 always picks the most likely token; higher values vary more.")
        self.seed.setToolTip("The same seed and settings give the same reply.")
        self.set_params(params)
        for box in (self.temperature, self.top_p, self.min_p, self.repeat_penalty):
            box.valueChanged.connect(self.changed)
        for spin in (self.top_k, self.max_tokens, self.seed):
            spin.valueChanged.connect(self.changed)
        self.stop.textChanged.connect(self.changed)

    def set_params(self, params: SamplingParams) -> None:
        self._base = params  # keeps the options without a widget here (penalties, typical_p)
        self.stop.setText(stop_text(params.stop))
        hidden = SamplingParams()
        extras = [
            f"{name} {getattr(params, name):g}"
            for name in ("presence_penalty", "frequency_penalty", "typical_p")
            if getattr(params, name) != getattr(hidden, name)
        ]
        self.extras.setText(("Also set: " + ", ".join(extras)) if extras else "")
        self.extras.setVisible(bool(extras))
        self.temperature.setValue(params.temperature)
        self.top_p.setValue(params.top_p)
        self.top_k.setValue(params.top_k)
        self.min_p.setValue(params.min_p)
        self.repeat_penalty.setValue(params.repeat_penalty)
        self.max_tokens.setValue(params.max_tokens or 0)
        self.seed.setValue(-1 if params.seed is None else params.seed)

    def params(self) -> SamplingParams:
        stops = parse_stops(self.stop.text())
        return replace(
            self._base,
            stop=stops,
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            top_k=self.top_k.value(),
            min_p=self.min_p.value(),
            repeat_penalty=self.repeat_penalty.value(),
            max_tokens=self.max_tokens.value() or None,
            seed=None if self.seed.value() < 0 else self.seed.value(),
        )
