"""``llm-workstation monitor`` and ``bench monitor`` in a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

METRICS = (Path(__file__).parents[1] / "data" / "vllm_metrics_real.txt").read_bytes()


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def metrics_server():
    """Serves a /metrics page recorded from vLLM 0.32 under load (tests/data/vllm_metrics_real.txt)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = METRICS if self.path == "/metrics" else b"not found"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_once_json_prints_exactly_one_snapshot() -> None:
    result = cli("monitor", "--once", "--json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert isinstance(data["gpus"], list) and isinstance(data["backends"], list)
    assert data["ram"]["total_bytes"] > data["ram"]["used_bytes"] > 0
    if not data["gpus"]:  # this machine: no NVIDIA driver
        assert data["gpu_unavailable_reason"].startswith("No NVIDIA")
    else:
        assert data["gpu_unavailable_reason"] is None


def test_once_json_with_an_endpoint_includes_its_kv(metrics_server) -> None:
    result = cli("monitor", "--once", "--json", "--endpoint", metrics_server)
    assert result.returncode == 0, result.stderr
    (backend,) = json.loads(result.stdout)["backends"]
    assert backend["kind"] == "vllm" and backend["problem"] is None
    kv = backend["kv"]
    assert (kv["num_blocks"], kv["block_size_tokens"], kv["requests_running"]) == (8192, 128, 32)
    assert 0 < kv["usage_fraction"] < 1


def test_lines_until_count() -> None:
    result = cli("monitor", "--count", "3", "--interval", "0.1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and all("RAM " in line for line in lines)


def test_unreachable_endpoint_says_so_and_exits_1() -> None:
    result = cli("monitor", "--once", "--endpoint", "http://127.0.0.1:9")
    assert result.returncode == 1
    assert result.stderr.startswith("llm-workstation: vLLM's /metrics at http://127.0.0.1:9 could not be read")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--interval", "0"), "--interval must be between"),
        (("--count", "0"), "--count must be 1 or more"),
        (("--endpoint", "localhost:8000"), "--endpoint must be an http:// or https:// URL"),
    ],
)
def test_bad_input_exits_2(args: tuple[str, ...], message: str) -> None:
    result = cli("monitor", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("llm-workstation: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_monitor_reports_cost_against_idle() -> None:
    result = cli("bench", "monitor", "--seconds", "1", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["samples"] >= 2
    assert data["idle_cpu_percent_of_one_core"] >= 0
    assert data["monitor_cost_percent_of_one_core"] == pytest.approx(
        data["monitor_cpu_percent_of_one_core"] - data["idle_cpu_percent_of_one_core"], abs=0.01
    )
