"""``llm-workstation bench docs`` on a small corpus (a real subprocess): indexing rows with pages/s and MB/s, search
latency rows, recall@5 on the question set's PDFs (skipped, saying why, on a machine without them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.services.bench.docs import QUESTIONS, load_questions

pytestmark = pytest.mark.slow


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "app", "bench", "docs", "--pdfs", "2", "--pages", "2", "--texts", "2"]
    argv += ["--chunks", "300", "--queries", "20", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)


def test_bench_docs_reports_indexing_search_and_quality(tmp_path: Path) -> None:
    pdfs = tmp_path / "real"
    pdfs.mkdir()
    from tests.support.documents import page_text, write_pdf

    write_pdf(pdfs / "one.pdf", [page_text("alpha"), page_text("beta")])
    done = bench("--pdf", str(pdfs), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    generated, generated_hybrid, real, _real_hybrid = result["indexing"]
    assert (generated["corpus"], generated["mode"], generated["files"]) == ("generated", "keyword", 4)
    assert generated["pages"] == 2 * 2 + 2 and generated["pages_per_s"] > 0 and generated["mb_per_s"] > 0
    assert generated_hybrid["skipped"] == "no embedding model given"
    assert real["files"] == 1 and real["pages"] == 2
    keyword = next(r for r in result["search"] if r["mode"] == "keyword")
    assert keyword["chunks"] == 300 and 0 < keyword["p50_ms"] <= keyword["p95_ms"]
    assert {r["mode"] for r in result["search"]} == {"keyword", "hybrid"}
    quality = {r["mode"]: r for r in result["quality"]}
    questions, _missing = load_questions(QUESTIONS)
    if not questions:
        assert "missing" in quality["keyword"]["skipped"]
    else:
        assert quality["keyword"]["questions"] == len(questions) >= 20
        assert quality["keyword"]["recall_at_5"] >= 0.5
        assert quality["hybrid"]["skipped"] == "no embedding model given"
    table = bench()
    assert table.returncode == 0, table.stderr[-3000:]
    assert "pages/s" in table.stdout and "p95 ms" in table.stdout and "recall@5" in table.stdout


def test_bench_docs_refuses_bad_options_with_one_line(tmp_path: Path) -> None:
    done = bench("--pdf", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"llm-workstation: --pdf {tmp_path / 'nowhere'}: not a folder"]
    assert bench("--chunks", "ten").returncode == 2
