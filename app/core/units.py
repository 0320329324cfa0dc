"""How the app writes sizes, rates, durations and moments, in the GUI and the CLI alike.

Sizes are binary (1 KiB = 1024 bytes), labelled B, KiB, MiB, GiB, TiB, with one decimal above bytes
(``512 B``, ``1.5 KiB``, ``274.0 MiB``, ``7.2 GiB``). A figure that is not known is ``MISSING``.
"""

from __future__ import annotations

from datetime import UTC, datetime

MISSING = "—"  # a figure that is not known (no reading, no GPU, an unparsable time)

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
_UNITS = (("KiB", KiB), ("MiB", MiB), ("GiB", GiB), ("TiB", TiB))

NEVER_AFTER_S = 10 * 365 * 86_400  # a moment further ahead is a "never" sentinel (Ollama's keep_alive -1)
_SPANS = (
    ("year", 365 * 86_400),
    ("month", 30 * 86_400),
    ("week", 7 * 86_400),
    ("day", 86_400),
    ("hour", 3600),
    ("minute", 60),
)


def format_bytes(n_bytes: float | None) -> str:
    """``512 B``, ``1.5 KiB``, ``3.0 GiB``; each unit is used while its figure rounds below 1024."""
    if n_bytes is None:
        return MISSING
    sign, size = ("-" if n_bytes < 0 else ""), abs(n_bytes)
    if round(size) < KiB:
        return f"{sign}{size:.0f} B"
    for unit, scale in _UNITS:
        value = size / scale
        if round(value, 1) < 1024 or unit == "TiB":
            return f"{sign}{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover - the last unit always returns


def format_byte_rate(bytes_per_s: float | None) -> str:
    """``12.5 MiB/s``."""
    return MISSING if bytes_per_s is None else f"{format_bytes(bytes_per_s)}/s"


def format_tokens_per_s(tokens_per_s: float | None) -> str:
    """``41.7 tok/s``, ``1,234.5 tok/s``."""
    return MISSING if tokens_per_s is None else f"{tokens_per_s:,.1f} tok/s"


def format_sampling_value(value: float | None, decimals: int = 3) -> str:
    """A sampling figure (temperature, top P, min P, a penalty) as people write it, the same on every page: at
    most ``decimals`` decimals, trailing zeros dropped but one kept: ``0.95``, ``0.05``, ``1.1``, ``1.0``."""
    if value is None:
        return MISSING
    text = f"{value:.{max(decimals, 1)}f}"
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0") or "0"
    return f"{'0' if whole == '-0' and fraction == '0' else whole}.{fraction}"


def format_duration(seconds: float | None) -> str:
    """Whole seconds: ``42 s`` under a minute, then ``3:05`` and ``1:02:03``; a negative span is ``0 s``."""
    if seconds is None:
        return MISSING
    whole = max(0, int(seconds + 0.5))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs} s"


def format_span(seconds: float) -> str:
    """A length of time in the largest whole unit: ``3 days``, ``1 hour``, ``less than a minute``."""
    for unit, scale in _SPANS:
        if seconds >= scale:
            count = int(seconds // scale)
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return "less than a minute"


def seconds_from_now(when: str | datetime, now: datetime | None = None) -> float | None:
    """How far ``when`` (a datetime or an ISO 8601 text; naive means UTC) lies ahead of ``now`` (negative: past);
    None when the text is not a time."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            return None
    moment = when if when.tzinfo else when.replace(tzinfo=UTC)
    return (moment - (now or datetime.now(UTC))).total_seconds()


def relative_time(when: str | datetime | None, now: datetime | None = None) -> str:
    """``3 days ago``, ``in 4 minutes``, ``less than a minute ago``; ``never`` beyond ``NEVER_AFTER_S`` ahead;
    ``MISSING`` for no time or a text that is not one."""
    seconds = None if when is None else seconds_from_now(when, now)
    if seconds is None:
        return MISSING
    if seconds > NEVER_AFTER_S:
        return "never"
    return f"in {format_span(seconds)}" if seconds > 0 else f"{format_span(-seconds)} ago"
