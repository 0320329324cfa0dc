"""``llm-workstation bench render`` in a real subprocess, offscreen by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def test_bench_render_reports_flush_costs_and_the_huge_table() -> None:
    result = cli("bench", "render", "--json", "--samples", "3")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    flush = report["flush_ms"]
    assert list(flush) == ["20", "100", "400"] and all(v > 0 for v in flush.values())
    assert report["ratio_last_first"] == flush["400"] / flush["20"]
    assert report["target_ratio"] == 2.0 and report["target_met"] == (report["ratio_last_first"] <= 2.0)
    assert report["big_table"]["rows"] == 5000 and report["big_table"]["columns"] == 50
    assert 0 < report["big_table"]["shown_ms"] < 5000
    assert report["live_flush_ms"] > 0 and report["table_complete_ms"] > 0


def test_bench_render_text_and_bad_samples() -> None:
    result = cli("bench", "render", "--samples", "2")
    assert result.returncode == 0, result.stderr
    assert "ratio 400/20 rows" in result.stdout and "5000×50 table shown once" in result.stdout
    bad = cli("bench", "render", "--samples", "0")
    assert bad.returncode == 2 and "--samples must be between 1 and 1000 (got 0)" in bad.stderr
