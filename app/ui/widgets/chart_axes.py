"""Axis ticks for the app's charts (no Qt here): round value steps in the figure's own unit, and clock-aligned
time steps labelled as times of day. The charts draw what these return; the tests check them directly."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from app.core.units import GiB, KiB, MiB, TiB, format_bytes

_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
# Time steps (s) the x axis may use: each a divisor of a minute, an hour or a day, so ticks fall on round times.
TIME_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
_BYTE_UNITS = (TiB, GiB, MiB, KiB)


def nice_step(span: float, max_ticks: int = 4, *, whole: bool = False) -> float:
    """The smallest round step (1, 2, 2.5 or 5 times a power of ten) that covers ``span`` in ``max_ticks`` steps;
    ``whole`` keeps it a whole number (counts)."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(1, max_ticks)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next((s * power for s in _STEPS if s * power >= raw * (1 - 1e-9)), 10 * power)
    return max(1.0, math.ceil(step)) if whole else step


def value_ticks(largest: float, max_ticks: int = 4, *, whole: bool = False, unit: float = 1.0) -> list[float]:
    """Ticks from 0 up to the first round value at or above ``largest``; steps are round in ``unit`` (a GiB,
    say), so a byte axis reads 0, 2, 4, 6 GiB rather than 0, 2147483648 …"""
    largest = max(0.0, largest)
    step = nice_step(largest / unit, max_ticks, whole=whole) * unit if largest > 0 else unit
    count = max(1, math.ceil(largest / step - 1e-9))
    return [round(i * step, 12) for i in range(count + 1)]


def byte_unit(largest: float) -> float:
    """The binary unit a byte axis counts in: the largest of TiB, GiB, MiB, KiB not above ``largest``."""
    return next((unit for unit in _BYTE_UNITS if largest >= unit), 1.0)


def byte_ticks(largest: float, max_ticks: int = 4) -> list[float]:
    return value_ticks(largest, max_ticks, unit=byte_unit(largest))


def fraction_ticks(_largest: float = 1.0, _max_ticks: int = 4) -> list[float]:
    return [0.0, 0.25, 0.5, 0.75, 1.0]


def time_step(span_s: float, max_ticks: int) -> int:
    """The smallest step in ``TIME_STEPS_S`` that puts at most ``max_ticks`` ticks over ``span_s``."""
    wanted = span_s / max(1, max_ticks)
    return next((step for step in TIME_STEPS_S if step >= wanted), TIME_STEPS_S[-1])


def time_ticks(start_s: float, end_s: float, max_ticks: int = 5) -> tuple[list[float], int]:
    """Tick times (wall-clock seconds) between ``start_s`` and ``end_s`` on multiples of a round step, and the step.
    Steps of an hour or more are aligned to the local clock (so a 6-hour tick is 00:00, 06:00 …)."""
    step = time_step(end_s - start_s, max_ticks)
    offset = _utc_offset_s(end_s) if step >= 3600 else 0
    first = math.ceil((start_s + offset) / step) * step - offset
    ticks = []
    t = first
    while t <= end_s + 1e-6:
        ticks.append(float(t))
        t += step
    return ticks, step


def time_label(t_s: float, step_s: int = 1) -> str:
    """``14:05:30`` on a step under a minute, else ``14:05``."""
    moment = time.localtime(t_s)
    return time.strftime("%H:%M:%S" if step_s < 60 else "%H:%M", moment)


def _utc_offset_s(t_s: float) -> int:
    return time.localtime(t_s).tm_gmtoff or 0


def percent_label(value: float) -> str:
    return f"{value:.0%}"


def count_label(value: float) -> str:
    return f"{value:,.0f}"


def number_label(value: float) -> str:
    """Whole numbers with thousands separators; small steps keep the decimals they need."""
    if value == 0 or abs(value) >= 10 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2g}"


Ticks = Callable[[float, int], list[float]]


# The y axes the app draws: how to place the ticks and how to write them.
AXES: dict[str, tuple[Ticks, Callable[[float], str]]] = {
    "bytes": (byte_ticks, format_bytes),
    "fraction": (fraction_ticks, percent_label),
    "count": (lambda largest, n: value_ticks(largest, n, whole=True), count_label),
    "number": (value_ticks, number_label),
}
