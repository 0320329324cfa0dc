"""Bounded time series for the monitor's charts: fixed-size ring buffers, so a long run uses fixed memory."""

from __future__ import annotations

import csv
import io
from collections import deque
from collections.abc import Iterable

from app.core.monitor.snapshot import MonitorSnapshot

# Series the monitor charts, with their units in the names.
SERIES = (
    "gpu_used_bytes",
    "ram_used_bytes",
    "engine_rss_bytes",
    "kv_usage_fraction",
    "generation_tokens_per_s",
    "requests_running",
    "requests_waiting",
)


class RingSeries:
    """(time, value) points, the oldest dropped past ``capacity``; None values are gaps."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._points: deque[tuple[float, float | None]] = deque(maxlen=capacity)

    def append(self, t_s: float, value: float | None) -> None:
        self._points.append((t_s, value))

    def __len__(self) -> int:
        return len(self._points)

    def points(self, since_s: float | None = None) -> list[tuple[float, float | None]]:
        """The points, oldest first; with ``since_s`` only those at or after it."""
        if since_s is None:
            return list(self._points)
        return [p for p in self._points if p[0] >= since_s]

    def latest(self) -> float | None:
        return self._points[-1][1] if self._points else None


class MonitorHistory:
    """One ring series per charted figure, fed from snapshots."""

    def __init__(self, capacity: int = 3600) -> None:
        self.capacity = capacity
        self.series = {name: RingSeries(capacity) for name in SERIES}

    def add(self, snapshot: MonitorSnapshot) -> None:
        t = snapshot.taken_at_s
        for name, value in snapshot_values(snapshot).items():
            self.series[name].append(t, value)

    def __len__(self) -> int:
        return len(self.series[SERIES[0]])

    def to_csv(self) -> str:
        """Every sample as CSV: a ``time_s`` column then one column per series (empty for a gap)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["time_s", *SERIES])
        columns = [self.series[name].points() for name in SERIES]
        for row in zip(*columns, strict=True):
            writer.writerow([f"{row[0][0]:.3f}", *(_cell(value) for _t, value in row)])
        return out.getvalue()


def snapshot_values(snapshot: MonitorSnapshot) -> dict[str, float | None]:
    """The charted figures of one snapshot (summed over engines; KV usage is the fullest engine's)."""
    kvs = [e.kv for e in snapshot.engines if e.kv is not None]
    return {
        "gpu_used_bytes": _num(snapshot.gpu_used_bytes),
        "ram_used_bytes": float(snapshot.ram.used_bytes),
        "engine_rss_bytes": _total(e.rss_bytes for e in snapshot.engines),
        "kv_usage_fraction": _max(k.usage_fraction for k in kvs),
        "generation_tokens_per_s": _total(k.generation_tokens_per_s for k in kvs),
        "requests_running": _total(k.requests_running for k in kvs),
        "requests_waiting": _total(k.requests_waiting for k in kvs),
    }


def _num(value: float | None) -> float | None:
    return None if value is None else float(value)


def _total(values: Iterable[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return sum(present) if present else None


def _max(values: Iterable[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return max(present) if present else None


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"
