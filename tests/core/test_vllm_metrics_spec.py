"""Speculative decoding, KV offload and prefix-hits-by-source figures from a recorded vLLM ``/metrics`` text."""

from __future__ import annotations

import pytest

from app.core.vllm.metrics import figures_from_page, parse_metrics

PAGE = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
# TYPE vllm:kv_offload_store_bytes counter
vllm:kv_offload_store_bytes_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:kv_offload_load_bytes counter
vllm:kv_offload_load_bytes_total{engine="0",model_name="m"} 500.0
# TYPE vllm:prompt_tokens_cached_by_source counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 70.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 20.0
"""


def test_spec_offload_and_sources_are_read() -> None:
    m = parse_metrics(PAGE)
    assert m.spec_acceptance_rate == pytest.approx(0.75)
    assert m.spec_mean_accepted_length == pytest.approx(4.0)
    assert m.host_swap_bytes_lower_bound == pytest.approx(1500.0)
    assert m.prompt_tokens_cached_by_source == {"device": 70.0, "host": 20.0}


def test_figures_from_page_keeps_the_new_lines() -> None:
    m = figures_from_page(PAGE, "http://127.0.0.1:8000/metrics")
    assert m.spec_drafts_total == 10.0
    assert m.kv_offload_load_bytes_total == 500.0
    assert m.prompt_tokens_cached_by_source["host"] == 20.0


def test_absent_series_read_as_none() -> None:
    m = parse_metrics('vllm:num_requests_running{model_name="m"} 1.0\n')
    assert m.spec_acceptance_rate is None
    assert m.spec_mean_accepted_length is None
    assert m.host_swap_bytes_lower_bound is None
    assert m.prompt_tokens_cached_by_source == {}
