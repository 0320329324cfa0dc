"""Bench rows from samples (nearest-rank percentiles), sustained concurrency, Markdown/CSV, run comparison."""

from __future__ import annotations

import csv
import io

import pytest

from app.core.bench.stats import (
    BenchRow,
    RequestSample,
    compare_rows,
    csv_text,
    markdown_table,
    summarize,
    sustained,
    text_table,
    with_sustained,
)


def _samples(latencies, tokens=10):
    return [RequestSample(True, tokens, ttft_ms=lat / 10, latency_ms=lat) for lat in latencies]


def test_summarize_uses_nearest_rank_over_successes_only():
    samples = _samples([float(v) for v in range(1, 11)])
    samples.append(RequestSample(False, 0, latency_ms=9999.0, error="HTTP 500: boom"))
    row = summarize("vllm", 8, samples, wall_s=2.0)
    assert (row.requests, row.errors, row.output_tokens) == (11, 1, 100)
    assert row.output_tokens_per_s == pytest.approx(50.0)
    assert row.latency_p50_ms == 5.0 and row.latency_p90_ms == 9.0  # nearest rank: ceil(0.5*10)=5th, 9th
    assert row.ttft_p50_ms == pytest.approx(0.5) and row.ttft_p90_ms == pytest.approx(0.9)
    assert row.first_error == "HTTP 500: boom"


def test_summarize_with_no_success_has_no_percentiles():
    row = summarize("ollama", 1, [RequestSample(False, error="gone")], wall_s=0.5)
    assert row.errors == 1 and row.output_tokens_per_s == 0.0
    assert row.latency_p50_ms is None and row.ttft_p90_ms is None


def test_sustained_is_the_highest_error_free_level_capped_by_what_the_engine_ran_at_once():
    rows = [
        BenchRow("vllm", 1, requests=4, peak_running_requests=1),
        BenchRow("vllm", 8, requests=4, peak_running_requests=8),
        BenchRow("vllm", 16, requests=4, peak_running_requests=12),  # vLLM's scheduler queued the other 4
        BenchRow("vllm", 32, requests=4, errors=2, peak_running_requests=32),
        BenchRow("llamacpp", 1, requests=4, parallel_streams=1),
        BenchRow("llamacpp", 8, requests=4, parallel_streams=1),
        BenchRow("ollama", 1, requests=4),
        BenchRow("ollama", 8, requests=4),  # Ollama does not say how many it ran at once
        BenchRow("ollama", 16, skipped="not running"),
        BenchRow("remote-vllm", 8, requests=4),  # /metrics never read: unknown, not the concurrency
    ]
    by_backend = {(r.backend, r.concurrency): r.max_concurrency_sustained for r in with_sustained(rows)}
    assert by_backend[("vllm", 1)] == by_backend[("vllm", 32)] == 12
    assert by_backend[("llamacpp", 8)] == 1  # a queue in front of one stream is not concurrency
    assert by_backend[("ollama", 1)] is None and by_backend[("ollama", 16)] is None
    assert by_backend[("remote-vllm", 8)] is None
    assert sustained(BenchRow("vllm", 4, requests=4, peak_running_requests=9)) == 4  # never above the clients


def _row(**kw):
    base = dict(backend="vllm", concurrency=8, requests=16, output_tokens=2048, output_tokens_per_s=1234.5,
                ttft_p50_ms=12.5, ttft_p90_ms=40.0, latency_p50_ms=900.0, latency_p90_ms=1500.0,
                peak_memory_bytes=3 * 2**30, memory_source="rss", peak_kv_usage=0.25, preemptions=0)  # fmt: skip
    return BenchRow(**{**base, **kw})


def test_markdown_table_has_a_header_and_one_line_per_row():
    text = markdown_table([_row(), _row(concurrency=32, note="a|b"), _row(concurrency=64, skipped="down")])
    lines = text.strip().splitlines()
    assert lines[0].startswith("| Engine | Concurrency | Output tok/s | TTFT p50 ms")
    assert lines[1].startswith("| --- | ---: |")
    assert len(lines) == 5
    assert "| vllm | 8 | 1,234.5 | 12.5 | 40.0 | 900 | 1,500 | 3.0 GiB (rss) | 25.0 % | 0 |" in lines[2]
    assert "a/b" in lines[3]  # a pipe inside a cell cannot break the table
    assert "skipped: down" in lines[4] and "| 64 | — |" in lines[4]
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_csv_has_raw_figures_and_every_field():
    rows = [_row(), _row(concurrency=1, ttft_p50_ms=None)]
    parsed = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert len(parsed) == 2
    assert parsed[0]["peak_memory_bytes"] == str(3 * 2**30)
    assert float(parsed[0]["output_tokens_per_s"]) == 1234.5
    assert parsed[1]["ttft_p50_ms"] == ""
    assert set(parsed[0]) == set(BenchRow.__dataclass_fields__)


def test_text_table_aligns_columns():
    lines = text_table([_row(), _row(concurrency=128)]).splitlines()
    assert len(lines) == 3
    assert lines[1].index("8") == lines[2].index("128") == lines[0].index("Concurrency")


def test_compare_gives_ratios_for_shared_configurations():
    before = [_row(concurrency=1, output_tokens_per_s=100.0, latency_p90_ms=200.0), _row(concurrency=8)]
    after = [_row(concurrency=1, output_tokens_per_s=150.0, latency_p90_ms=100.0), _row(concurrency=64)]
    ratios = compare_rows(before, after)
    assert len(ratios) == 1
    assert ratios[0]["concurrency"] == 1
    assert ratios[0]["output_tokens_per_s_ratio"] == pytest.approx(1.5)
    assert ratios[0]["latency_p90_ms_ratio"] == pytest.approx(0.5)
    assert ratios[0]["peak_memory_bytes_ratio"] == pytest.approx(1.0)


def test_row_round_trips_and_ignores_unknown_keys():
    row = _row()
    assert BenchRow.from_dict({**row.to_dict(), "future_field": 1}) == row
