"""``bench startup``: process start to main window shown, and idle memory, against a bare Qt window."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.core import safe_json

# A bare PySide6 window measured the same way, in its own process: the floor any Qt app pays on this machine.
_BASELINE = """
import json, os, sys, time
started = time.time()
import psutil; from PySide6.QtWidgets import QApplication, QMainWindow, QTextBrowser  # run in a child process
app = QApplication([])
window = QMainWindow()
window.setCentralWidget(QTextBrowser())
window.resize(1200, 780)
window.show()
app.processEvents()
shown = time.time()
with open(os.environ["LLMW_STARTUP_REPORT"], "w") as out:
    json.dump({"window_shown_at": shown, "rss_bytes": psutil.Process().memory_info().rss}, out)
"""


def _measure(argv: list[str], home: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ, LLMW_STARTUP_REPORT=str(report), LLMW_HOME=str(home), QT_QPA_PLATFORM="offscreen")
        started = time.time()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        data = safe_json.loads_object(report.read_bytes(), what="the start-up report")
    data["shown_s"] = data["window_shown_at"] - started
    return data


def bench_startup(runs: int) -> dict[str, Any]:
    """Alternate bare-Qt and app launches; report medians (process start to window shown, RSS)."""
    app_runs, base_runs = [], []
    with tempfile.TemporaryDirectory() as home:
        for _ in range(runs):
            base_runs.append(_measure([sys.executable, "-c", _BASELINE], Path(home)))
            app_runs.append(_measure([sys.executable, "-m", "app", "--smoke"], Path(home)))
    shown = statistics.median(r["shown_s"] for r in app_runs)
    baseline = statistics.median(r["shown_s"] for r in base_runs)
    return {
        "runs": runs,
        "window_shown_s": shown,
        "baseline_window_shown_s": baseline,
        "ratio": shown / baseline,
        "idle_rss_mb": statistics.median(r["rss_bytes"] for r in app_runs) / 2**20,
        "baseline_rss_mb": statistics.median(r["rss_bytes"] for r in base_runs) / 2**20,
        "heavy_modules": sorted({m for r in app_runs for m in r.get("heavy_modules", [])}),
    }
