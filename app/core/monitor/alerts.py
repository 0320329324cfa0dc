"""Monitor alerts from consecutive snapshots; pure, so the panel, the status bar and tests share them.

``AlertTracker`` follows a run of snapshots, so that an event seen in one sample (preemptions) stays raised
for a hold time instead of flickering at the sampling rate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from app.core.monitor.snapshot import MonitorSnapshot
from app.core.units import format_bytes

PREEMPTION_HOLD_S = 30.0  # a "preemptions rising" alert stays this long after the counter last grew


@dataclass(frozen=True)
class AlertThresholds:
    kv_usage_fraction: float = 0.90
    vram_used_fraction: float = 0.95
    leftover_gpu_bytes: int = 1024**3  # above a CUDA context (~0.3–0.6 GiB): flagged after unload
    leftover_rss_bytes: int = 1024 * 1024 * 1024  # the same for host memory when NVML cannot tell


@dataclass(frozen=True)
class Alert:
    key: str  # stable id, e.g. "kv:vllm"
    level: str  # "warning" | "critical"
    message: str


def _kv_alerts(snapshot: MonitorSnapshot, limits: AlertThresholds) -> list[Alert]:
    alerts = []
    for engine in snapshot.engines:
        usage = engine.kv.usage_fraction if engine.kv else None
        if usage is not None and usage >= limits.kv_usage_fraction:
            alerts.append(
                Alert(
                    f"kv:{engine.kind}",
                    "critical" if usage >= 0.99 else "warning",
                    f"{engine.label}: KV cache {usage:.0%} full (alert at {limits.kv_usage_fraction:.0%}). "
                    "New requests will wait or be preempted; lower the load or raise the KV cache size.",
                )
            )
    return alerts


class AlertTracker:
    """The alerts over a run of snapshots (times from ``taken_at_s``): those holding now, plus "preemptions
    rising" kept for ``preemption_hold_s`` after each engine's preemption counter last grew."""

    def __init__(self, thresholds: AlertThresholds | None = None, preemption_hold_s: float = PREEMPTION_HOLD_S):
        self.thresholds = thresholds
        self.preemption_hold_s = preemption_hold_s
        self._previous: MonitorSnapshot | None = None
        self._rises: dict[str, deque[tuple[float, int]]] = {}  # engine kind → (when, how many) in the hold

    def update(self, current: MonitorSnapshot) -> tuple[Alert, ...]:
        """Take the next snapshot and return the alerts in force."""
        limits = self.thresholds or AlertThresholds()
        previous, self._previous = self._previous, current
        return (
            *_kv_alerts(current, limits),
            *self._held_preemptions(previous, current),
            *_vram_alerts(current, limits),
            *_leftover_alerts(current, limits),
        )

    def _held_preemptions(self, previous: MonitorSnapshot | None, current: MonitorSnapshot) -> list[Alert]:
        now = current.taken_at_s
        before = {e.kind: e.kv.preemptions_total for e in previous.engines if e.kv} if previous else {}
        labels = {e.kind: e.label for e in current.engines}
        for engine in current.engines:
            total = engine.kv.preemptions_total if engine.kv else None
            then = before.get(engine.kind)
            if total is not None and then is not None and total > then:
                self._rises.setdefault(engine.kind, deque()).append((now, total - then))
        alerts = []
        for kind, rises in list(self._rises.items()):
            while rises and now - rises[0][0] > self.preemption_hold_s:
                rises.popleft()
            if not rises or kind not in labels:  # held out, or the engine is gone
                del self._rises[kind]
                continue
            count = sum(n for _t, n in rises)
            alerts.append(
                Alert(
                    f"preemptions:{kind}",
                    "warning",
                    f"{labels.get(kind, kind)}: {count} request(s) preempted in the last "
                    f"{self.preemption_hold_s:.0f} s (the KV cache ran out; work is being recomputed).",
                )
            )
        return alerts


def _vram_alerts(snapshot: MonitorSnapshot, limits: AlertThresholds) -> list[Alert]:
    alerts = []
    for gpu in snapshot.gpus:
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        if used is None or not total:
            continue
        if used / total >= limits.vram_used_fraction:
            alerts.append(
                Alert(
                    f"vram:{gpu.index}",
                    "critical",
                    f"GPU {gpu.index} ({gpu.name}): VRAM nearly full, {format_bytes(used)} of "
                    f"{format_bytes(total)} used. Loading more layers or a longer context will fail.",
                )
            )
    return alerts


def _leftover_alerts(snapshot: MonitorSnapshot, limits: AlertThresholds) -> list[Alert]:
    alerts = []
    for engine in snapshot.engines:
        if engine.loaded or not engine.pids:
            continue
        gpu = engine.gpu_bytes or 0
        rss = engine.rss_bytes or 0
        if gpu > limits.leftover_gpu_bytes or (engine.gpu_bytes is None and rss > limits.leftover_rss_bytes):
            held = format_bytes(gpu) + " of VRAM" if gpu else format_bytes(rss) + " of RAM"
            alerts.append(
                Alert(
                    f"leftover:{engine.kind}",
                    "warning",
                    f"{engine.label}: no model is loaded but its process (pid {engine.pids[0]}) still holds "
                    f"{held}. Stop the engine to free it.",
                )
            )
    return alerts
