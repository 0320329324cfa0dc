"""``GET /metrics``: the API server's own Prometheus metrics, in its own registry (never the global one), fed by
the request log. Labels are resolved model ids and engines only — never a name a client made up."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app.services.api.records import RequestRecord, RequestState

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
