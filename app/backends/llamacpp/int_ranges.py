"""GBNF for the JSON integers in a range (``minimum``/``maximum``), which llama-cpp-python's schema converter
ignores. Pure Python; a range becomes alternatives of digit patterns (the "range to regex" method: split
[lo, hi] into pieces that share a prefix and end in full ``[0-9]`` runs).

Integers have at most 16 digits, as the converter's own ``integral-part`` rule allows.
"""

from __future__ import annotations

MAX_DIGITS = 16


def integer_range_rule(lo: int | None, hi: int | None) -> str:
    """A GBNF expression matching exactly the integers in [lo, hi] (either end open when None), written as
    JSON writes them (no leading zeros, ``-0`` never)."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"the minimum ({lo}) is above the maximum ({hi}): no integer fits")
    alternatives: list[str] = []
    if lo is None or lo < 0:  # the negative part: "-" then a magnitude
        largest_negative = -1 if hi is None or hi >= 0 else hi
        magnitudes = _magnitudes(-largest_negative, None if lo is None else -lo)
        alternatives += [f'"-" {m}' for m in magnitudes]
    if hi is None or hi >= 0:
        alternatives += _magnitudes(0 if lo is None or lo < 0 else lo, hi)
    return "(" + " | ".join(f"({a})" for a in alternatives) + ")"


def _magnitudes(lo: int, hi: int | None) -> list[str]:
    """Patterns for the non-negative integers in [lo, hi] (hi None: up to MAX_DIGITS digits)."""
    if hi is not None:
        return _bounded(lo, hi)
    digits = len(str(lo))
    patterns = _bounded(lo, 10**digits - 1)
    if digits < MAX_DIGITS:
        patterns.append(f"[1-9] [0-9]{{{digits},{MAX_DIGITS - 1}}}")
    return patterns


def _bounded(lo: int, hi: int) -> list[str]:
    patterns: list[str] = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):
        first = 0 if digits == 1 else 10 ** (digits - 1)
        start, stop = max(lo, first), min(hi, 10**digits - 1)
        if start <= stop:
            patterns += [_pattern(a, b) for a, b in _pieces(start, stop)]
    return patterns


def _pieces(lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi] (same digit count) as sub-ranges each of the form prefix, one digit range, then any digits."""
    stops = {hi}
    nines = 1
    while lo <= (stop := _nines(lo, nines)) < hi:
        stops.add(stop)
        nines += 1
    zeros = 1
    while lo < (stop := _zeroed(hi + 1, zeros) - 1) <= hi:
        stops.add(stop)
        zeros += 1
    pieces, start = [], lo
    for stop in sorted(stops):
        pieces.append((start, stop))
        start = stop + 1
    return pieces


def _nines(value: int, count: int) -> int:
    text = str(value)
    return int(text[:-count] + "9" * count) if count <= len(text) else 10**count - 1


def _zeroed(value: int, count: int) -> int:
    return value - value % 10**count


def _pattern(lo: int, hi: int) -> str:
    parts: list[str] = []
    any_digits = 0
    for a, b in zip(str(lo), str(hi), strict=True):
        if a == "0" and b == "9" and parts and lo != hi:
            any_digits += 1
            continue
        parts.append(f'"{a}"' if a == b else f"[{a}-{b}]")
    if any_digits:
        parts.append("[0-9]" if any_digits == 1 else f"[0-9]{{{any_digits}}}")
    return " ".join(parts)
