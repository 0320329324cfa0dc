"""``chat --docs``: a collection or a path through the real CLI, the real index and the tiny GGUF."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.documents import page_text, write_pdf


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _figures(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.rstrip("\n").split("\n")[-1])


def test_chat_docs_answers_from_a_collection_or_a_path(tmp_path, tiny_gguf):
    short = write_pdf(tmp_path / "brief.pdf", [page_text("alpha", 60), page_text("walrus", 60)])
    topics = ["alpha", "bison", "gamma", "delta", "heron", "falcon", "goose", "ibis", "jackal", "koala", "lemur"]
    long = write_pdf(tmp_path / "manual.pdf", [page_text(topic, 240) for topic in topics])
    assert cli("docs", "add", str(short), "--collection", "notes").returncode == 0
    ask = ("chat", str(tiny_gguf), "--temperature", "0", "--max-tokens", "8", "--ctx", "2048", "--json")
    whole = _figures(cli(*ask, "-p", "What does the walrus section say?", "--docs", "notes"))
    assert whole["documents_mode"] == "whole" and whole["documents_caption"] == "full text of 1 document"
    assert [(s["number"], s["path"], s["page"]) for s in whole["sources"]] == [(1, str(short), None)]
    assert whole["prompt_tokens"] > 300
    passages = cli(*ask, "-p", "Which item does the heron procedure explain?", "--docs", str(long))
    figures = _figures(passages)
    assert "indexing" in passages.stderr
    assert figures["documents_mode"] == "passages" and figures["sources"][0]["page"] == 5
    assert "heron" in figures["sources"][0]["text"]
    assert f"[1] manual.pdf, p. 5 — {long}" in passages.stdout


def test_an_unknown_collection_exits_2_saying_what_to_do(tiny_gguf):
    result = cli("chat", str(tiny_gguf), "-p", "hi", "--docs", "no-such-collection")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "no-such-collection" in line and "llm-workstation docs add PATH --collection" in line
    assert "Traceback" not in result.stderr
