"""What the monitor service tells its listeners (on its loop). Frozen: listeners may keep them."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.monitor.alerts import Alert
from app.core.monitor.snapshot import MonitorSnapshot


@dataclass(frozen=True)
class SampleTaken:
    sample: MonitorSnapshot


@dataclass(frozen=True)
class AlertsChanged:
    """The alerts in force now (empty: none)."""

    alerts: tuple[Alert, ...]

    @property
    def messages(self) -> list[str]:
        return [alert.message for alert in self.alerts]


@dataclass(frozen=True)
class SamplingChanged:
    """Sampling began or its interval changed (``interval_s``), or it stopped (None)."""

    interval_s: float | None


@dataclass(frozen=True)
class ExporterState:
    """The opt-in Prometheus endpoint: serving at ``url``, or not, with ``problem`` saying why it could not start."""

    url: str | None = None
    problem: str | None = None

    @property
    def running(self) -> bool:
        return self.url is not None


@dataclass(frozen=True)
class ExporterChanged:
    state: ExporterState


MonitorEvent = SampleTaken | AlertsChanged | SamplingChanged | ExporterChanged
