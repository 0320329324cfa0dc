"""Bench results: per-request samples → one row per configuration, and the row tables as text, Markdown, CSV.

Percentiles are nearest-rank (``app.core.batch.input.percentile``, the batch runner's too), over the requests
that succeeded. Throughput is output tokens (the engine's own counts) over the wall time of the measured set.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from app.core.batch.input import percentile
from app.core.units import MISSING, format_bytes


@dataclass(frozen=True)
class RequestSample:
    """One measured request. Times run from when its client sent it (queueing included) to first text / end."""

    ok: bool
    output_tokens: int = 0
    ttft_ms: float | None = None
    latency_ms: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class BenchRow:
    """One configuration's figures. ``skipped`` (a reason) marks a configuration that could not run."""

    backend: str
    concurrency: int
    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    output_tokens_per_s: float = 0.0
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    latency_p50_ms: float | None = None
    latency_p90_ms: float | None = None
    peak_memory_bytes: int | None = None
    memory_source: str | None = None  # "gpu" (NVML, per process) or "rss" (the engine's process tree)
    peak_kv_usage: float | None = None  # 0–1
    preemptions: int | None = None
    server_generated_tokens: int | None = None  # vLLM's own counter over the measured set, when it has one
    max_concurrency_sustained: int | None = None
    parallel_streams: int | None = None  # a fixed limit of replies the engine generates at once (llama.cpp: 1)
    peak_running_requests: int | None = None  # vLLM's num_requests_running, highest reading
    spec_acceptance: float | None = None  # 0–1: vLLM's accepted / drafted tokens over the measured set
    first_error: str | None = None
    note: str = ""
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchRow:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def summarize(
    backend: str, concurrency: int, samples: Sequence[RequestSample], wall_s: float, **extra: Any
) -> BenchRow:
    """The row for ``samples`` measured over ``wall_s`` seconds; ``extra`` fills memory, KV and notes."""
    good = [s for s in samples if s.ok]
    failed = [s for s in samples if not s.ok]
    tokens = sum(s.output_tokens for s in good)
    ttfts = [s.ttft_ms for s in good if s.ttft_ms is not None]
    latencies = [s.latency_ms for s in good if s.latency_ms is not None]
    return BenchRow(
        backend=backend,
        concurrency=concurrency,
        requests=len(samples),
        errors=len(failed),
        output_tokens=tokens,
        wall_s=wall_s,
        output_tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p90_ms=percentile(ttfts, 90),
        latency_p50_ms=percentile(latencies, 50),
        latency_p90_ms=percentile(latencies, 90),
        first_error=next((s.error for s in failed if s.error), None),
        **extra,
    )


def sustained(row: BenchRow) -> int | None:
    """The replies ``row``'s engine generated at once, as far as it is known (a queue is not concurrency):
    its fixed ``parallel_streams`` (llama.cpp: 1), else the peak ``num_requests_running`` read from vLLM's
    ``/metrics``, each capped at the concurrency; None when the engine says neither (Ollama queues requests
    beyond OLLAMA_NUM_PARALLEL and does not report it; a vLLM whose /metrics could not be read)."""
    if row.skipped or row.errors or not row.requests:
        return None
    limit = row.parallel_streams or row.peak_running_requests
    return min(row.concurrency, limit) if limit else None


def with_sustained(rows: Iterable[BenchRow]) -> list[BenchRow]:
    """Set ``max_concurrency_sustained`` on every row: per backend, the most of ``sustained`` over the rows
    that ran with no errors and were not skipped; None when none of them is known."""
    from dataclasses import replace

    rows = list(rows)
    best: dict[str, int] = {}
    for row in rows:
        value = sustained(row)
        if value is not None:
            best[row.backend] = max(best.get(row.backend, 0), value)
    return [replace(row, max_concurrency_sustained=best.get(row.backend)) for row in rows]


# --- rendering ---------------------------------------------------------------------------------------------
COLUMNS = (
    ("backend", "Engine"),
    ("concurrency", "Concurrency"),
    ("output_tokens_per_s", "Output tok/s"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p90_ms", "TTFT p90 ms"),
    ("latency_p50_ms", "Latency p50 ms"),
    ("latency_p90_ms", "Latency p90 ms"),
    ("peak_memory_bytes", "Peak memory"),
    ("peak_kv_usage", "Peak KV"),
    ("preemptions", "Preemptions"),
    ("spec_acceptance", "Spec. accepted"),
    ("requests", "Requests"),
    ("errors", "Errors"),
    ("output_tokens", "Output tokens"),
    ("max_concurrency_sustained", "Max sustained"),
    ("note", "Note"),
)


def cell(row: BenchRow, key: str) -> str:
    """One figure as the tables show it (``MISSING`` for none)."""
    value = getattr(row, key)
    if key == "note":
        return f"skipped: {row.skipped}" if row.skipped else value or ""
    if value is None or (row.skipped and key not in ("backend", "concurrency")):
        return MISSING
    if key == "peak_memory_bytes":
        return format_bytes(value) + (f" ({row.memory_source})" if row.memory_source else "")
    if key in ("peak_kv_usage", "spec_acceptance"):
        return f"{value * 100:.1f} %"
    if key == "output_tokens_per_s":
        return f"{value:,.1f}"
    if isinstance(value, float):
        return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    return str(value)


def markdown_table(rows: Sequence[BenchRow]) -> str:
    header = "| " + " | ".join(title for _key, title in COLUMNS) + " |"
    align = "| " + " | ".join("---" if key in ("backend", "note") else "---:" for key, _ in COLUMNS) + " |"
    body = ["| " + " | ".join(cell(r, k).replace("|", "/") for k, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([header, align, *body]) + "\n"


def csv_text(rows: Sequence[BenchRow]) -> str:
    """Raw figures (bytes, ms, fractions), one row per configuration, every field of ``BenchRow``."""
    names = [f.name for f in fields(BenchRow)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.to_dict().items()})
    return out.getvalue()


def text_table(rows: Sequence[BenchRow]) -> str:
    """Aligned columns for a terminal."""
    grid = [[title for _k, title in COLUMNS]] + [[cell(r, k) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in grid)


# --- comparing two runs ------------------------------------------------------------------------------------
COMPARED = ("output_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "latency_p50_ms", "latency_p90_ms",
            "peak_memory_bytes")  # fmt: skip


def compare_rows(before: Sequence[BenchRow], after: Sequence[BenchRow]) -> list[dict[str, Any]]:
    """For each (backend, concurrency) in both runs: after/before ratios of the main figures (None if missing)."""
    old = {(r.backend, r.concurrency): r for r in before if not r.skipped}
    result = []
    for row in after:
        previous = old.get((row.backend, row.concurrency))
        if previous is None or row.skipped:
            continue
        ratios: dict[str, Any] = {"backend": row.backend, "concurrency": row.concurrency}
        for key in COMPARED:
            a, b = getattr(previous, key), getattr(row, key)
            ratios[f"{key}_ratio"] = b / a if a and b is not None else None
        result.append(ratios)
    return result
