"""``GET /metrics``: the API server's own Prometheus metrics, in its own registry (never the global one), fed by
the request log. Labels are resolved model ids and engines only — never a name a client made up."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app.services.api.records import RequestRecord, RequestState
from app.services.engines.events import ParallelSnapshot

PREFIX = "llmws_api_"
CONTENT_TYPE = CONTENT_TYPE_LATEST
TTFT_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            PREFIX + "requests", "API requests answered.", ["endpoint", "model", "engine", "status"], registry=r
        )
        self.prompt_tokens = Counter(
            PREFIX + "prompt_tokens", "Prompt tokens processed.", ["model", "engine"], registry=r
        )
        self.completion_tokens = Counter(
            PREFIX + "completion_tokens", "Tokens generated.", ["model", "engine"], registry=r
        )
        self.ttft = Histogram(
            PREFIX + "time_to_first_token_seconds", "From a request's arrival to its first token (waiting included).",
            ["model", "engine"], buckets=TTFT_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            PREFIX + "request_duration_seconds", "From a request's arrival to its last byte.",
            ["endpoint", "model", "engine"], buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.queue_wait = Histogram(
            PREFIX + "queue_wait_seconds", "Time a request waited for its engine (and its model's load).",
            ["model", "engine"], buckets=TTFT_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(PREFIX + "requests_in_flight", "Requests being answered now.", registry=r)

    def watch_parallel(self, snapshot: Callable[[], ParallelSnapshot]) -> None:
        """Report the parallel llama.cpp engine's slots and queue as ``snapshot`` reads them at each scrape."""
        self.registry.register(_ParallelSlotsCollector(snapshot))

    def started(self) -> None:
        self.in_flight.inc()

    def observe(self, record: RequestRecord) -> None:
        """Count a finished request (called once per request, when its record says it ended)."""
        if record.state not in (RequestState.DONE, RequestState.FAILED):
            return
        self.in_flight.dec()
        model, engine = record.model, record.engine
        self.requests.labels(record.endpoint, model, engine, str(record.status or 0)).inc()
        if record.duration_ms is not None:
            self.latency.labels(record.endpoint, model, engine).observe(record.duration_ms / 1000)
        if not model:
            return
        if record.prompt_tokens:
            self.prompt_tokens.labels(model, engine).inc(record.prompt_tokens)
        if record.completion_tokens:
            self.completion_tokens.labels(model, engine).inc(record.completion_tokens)
        if record.ttft_ms is not None:
            self.ttft.labels(model, engine).observe(record.ttft_ms / 1000)
        if record.wait_ms is not None:
            self.queue_wait.labels(model, engine).observe(record.wait_ms / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ParallelSlotsCollector:
    """The parallel llama.cpp engine now: its slots (0 while it is not running), those holding a request, the
    requests waiting for one, and each slot's KV cells in use."""

    def __init__(self, snapshot: Callable[[], ParallelSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only

    def collect(self) -> Iterator[Metric]:
        now = self._snapshot()
        busy = sum(1 for s in now.slots if s.request is not None)
        yield GaugeMetricFamily(PREFIX + "parallel_slots", "Sequences the parallel llama.cpp engine runs at once "
                                "(0: not running).", value=len(now.slots))  # fmt: skip
        yield GaugeMetricFamily(PREFIX + "parallel_slots_busy", "Parallel slots holding a request.", value=busy)
        yield GaugeMetricFamily(PREFIX + "parallel_queue", "Requests waiting for a free parallel slot.",
                                value=now.waiting)  # fmt: skip
        cells = GaugeMetricFamily(PREFIX + "parallel_slot_cells", "KV cells in use in each parallel slot's context.",
                                  labels=["slot"])  # fmt: skip
        for slot in now.slots:
            cells.add_metric([str(slot.slot)], slot.cells)
        yield cells
