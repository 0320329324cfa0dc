"""``bench serve``'s vLLM part against a stand-in vLLM (tests/support/fake_openai.py): both paths answer every
request, the figures add up, and the API server's own CPU per request is measured and reported."""

from __future__ import annotations

import pytest

from app.devtools.serve_bench import bench_vllm, report_lines
from tests.support.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.timeout(180)


def test_the_vllm_throughput_bench_compares_both_paths_and_reports_the_servers_cpu():
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        result = bench_vllm(fake.base_url, requests=40, max_tokens=6, rounds=2)
    assert result["served_model"] == "tiny-llama" and len(result["direct"]) == len(result["through_api"]) == 2
    for run in result["direct"] + result["through_api"]:
        assert run["failures"] == 0 and run["tokens"] > 0 and run["tokens_per_s"] > 0
    assert [r["tokens"] for r in result["direct"]] == [r["tokens"] for r in result["through_api"]]
    assert 0 < result["api_cpu_ms_per_request"] < 1000 and result["ratio"] > 0 and result["pair_ratio_median"] > 0
    report = {"single_stream": _single(), "vllm": result}
    lines = report_lines(report)
    assert any(line.startswith("API server CPU per request") for line in lines)
    assert any("round by round" in line for line in lines)


def _single():
    path = {"label": "x", "decode_tokens_per_s": 1.0, "ttft_ms": 1.0, "ttft_min_ms": 1.0}
    return {"model": "m.gguf", "n_ctx": 512, "chat_format": None, "n_threads": 1, "max_tokens": 8, "runs": 1,
            "paths": {"raw": path}, "api_vs_raw_decode": 1.0, "api_vs_raw_ttft_overhead_ms": 0.0,
            "api_vs_raw_ttft_min_overhead_ms": 0.0}  # fmt: skip
