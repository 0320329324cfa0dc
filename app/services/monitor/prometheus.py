"""An opt-in Prometheus endpoint with the app's own metrics (never the global registry), on 127.0.0.1.

A custom collector turns the latest monitor snapshot into metric families when Prometheus scrapes, so the
sampler only hands over a reference. Units are in the names (``_bytes``, ``_milliwatts``, ``_ratio``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.core.errors import AppError, ErrorKind
from app.core.monitor.alerts import Alert
from app.core.monitor.snapshot import MonitorSnapshot

log = logging.getLogger(__name__)

PREFIX = "llmws_"
DEFAULT_PORT = 9464


class PrometheusExportError(AppError):
    """The endpoint could not start (``setting`` "port"); the message says what to do."""

    kind = ErrorKind.UNAVAILABLE
    setting = "port"


class SnapshotCollector(Collector):
    def __init__(self) -> None:
        self.snapshot: MonitorSnapshot | None = None
        self.alerts: tuple[Alert, ...] = ()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self.snapshot
        if snapshot is None:
            return
        yield from _gpu_families(snapshot)
        yield _gauge("ram_used_bytes", "System RAM in use.", [([], snapshot.ram.used_bytes)])
        yield _gauge("ram_total_bytes", "System RAM installed.", [([], snapshot.ram.total_bytes)])
        if snapshot.cpu_percent is not None:
            yield _gauge("cpu_utilization_percent", "CPU use over all cores.", [([], snapshot.cpu_percent)])
        yield from _engine_families(snapshot)
        yield _gauge("alerts_active", "Monitor alerts in force now.", [([], len(self.alerts))])


def _gauge(
    name: str, doc: str, samples: list[tuple[list[str], float | int | None]], labels: list[str] | None = None
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, doc, labels=labels or [])
    for label_values, value in samples:
        if value is not None:
            family.add_metric(label_values, float(value))
    return family


def _gpu_families(snapshot: MonitorSnapshot) -> Iterator[GaugeMetricFamily]:
    labels = ["gpu", "name"]
    fields = (
        ("gpu_memory_used_bytes", "GPU memory in use.", "memory_used_bytes"),
        ("gpu_memory_total_bytes", "GPU memory installed.", "memory_total_bytes"),
        ("gpu_utilization_percent", "GPU busy time over the last sample period.", "utilization_percent"),
        ("gpu_temperature_celsius", "GPU core temperature.", "temperature_c"),
        ("gpu_power_milliwatts", "GPU power draw.", "power_mw"),
        ("gpu_power_limit_milliwatts", "GPU enforced power limit.", "power_limit_mw"),
    )
    for name, doc, attr in fields:
        samples = [([str(g.index), g.name], getattr(g, attr)) for g in snapshot.gpus]
        yield _gauge(name, doc, samples, labels)


def _engine_families(snapshot: MonitorSnapshot) -> Iterator[GaugeMetricFamily]:
    engines = snapshot.engines
    labels = ["engine"]

    def kv(attr: str) -> list[tuple[list[str], Any]]:
        return [([e.kind], getattr(e.kv, attr) if e.kv else None) for e in engines]

    yield _gauge(
        "engine_resident_memory_bytes", "Engine processes' RSS.", [([e.kind], e.rss_bytes) for e in engines], labels
    )
    yield _gauge(
        "engine_gpu_memory_bytes", "Engine processes' GPU memory.", [([e.kind], e.gpu_bytes) for e in engines], labels
    )
    yield _gauge("kv_cache_usage_ratio", "KV cache in use (0-1).", kv("usage_fraction"), labels)
    yield _gauge("kv_cache_capacity_tokens", "KV cache size in tokens.", kv("total_cells"), labels)
    yield _gauge("requests_running", "Requests being generated.", kv("requests_running"), labels)
    yield _gauge("requests_waiting", "Requests queued.", kv("requests_waiting"), labels)
    yield _gauge("generation_tokens_per_second", "Generated tokens per second.", kv("generation_tokens_per_s"), labels)
    yield _gauge("spec_acceptance_ratio", "Drafted tokens accepted (0-1).", kv("spec_acceptance_rate"), labels)
    yield _gauge("host_kv_capacity_bytes", "Host KV tier size (KV offloading).", kv("host_tier_capacity_bytes"), labels)
    yield _gauge(
        "host_swap_bytes_lower_bound",
        "KV bytes moved to and from host memory.",
        kv("host_swap_bytes_lower_bound"),
        labels,
    )


class PrometheusExporter:
    """Serves ``/metrics`` on ``host:port`` from its own registry until :meth:`stop`."""

    def __init__(self, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.collector = SnapshotCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Bind and serve; raises PrometheusExportError (in words) when the port cannot be used."""
        if self._server is not None:
            return
        if not 1 <= self.port <= 65535:
            raise PrometheusExportError(
                f"Port {self.port} is not a valid port; choose one from 1024 to 65535.", kind=ErrorKind.INVALID_INPUT
            )
        try:
            self._server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise PrometheusExportError(
                f"The Prometheus endpoint could not listen on {self.host}:{self.port} ({exc.strerror or exc}). "
                "Choose another port."
            ) from None
        log.info("Prometheus metrics at %s", self.url)

    def update(self, snapshot: MonitorSnapshot, alerts: tuple[Alert, ...] = ()) -> None:
        self.collector.snapshot = snapshot
        self.collector.alerts = alerts

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
