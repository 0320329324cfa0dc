"""``bench serve``'s Claude Code row (app/devtools/claude_turn_bench.py): skipped, saying why and how to install it,
when Claude Code is not there; with a stand-in Claude Code on PATH (a real executable that sends one Messages
request to the server its environment names and prints stream-json as Claude Code does) against a real ``serve``
on a tiny GGUF: two turns timed, the server's requests and prompt tokens read from its /metrics, and the report's
lines say so."""

from __future__ import annotations

import sys

import pytest

from app.core.params import LoadParams
from app.devtools.claude_turn_bench import claude_lines
from app.devtools.serve_bench import bench_claude_code, report_lines
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(240)

STREAM_JSON_CLAUDE = f"""#!{sys.executable}
import json, os, sys, urllib.request
assert "-p" in sys.argv and "stream-json" in sys.argv
body = {{"model": os.environ["ANTHROPIC_MODEL"], "max_tokens": 3, "messages": [{{"role": "user", "content": "hi"}}]}}
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=json.dumps(body).encode(),
    headers={{"Authorization": "Bearer " + os.environ["ANTHROPIC_AUTH_TOKEN"], "anthropic-version": "2023-06-01",
             "Content-Type": "application/json"}})
reply = json.loads(urllib.request.urlopen(request, timeout=120).read())
print(json.dumps({{"type": "system", "subtype": "init"}}))
delta = {{"type": "content_block_delta", "index": 0, "delta": {{"type": "text_delta", "text": "four"}}}}
print(json.dumps({{"type": "stream_event", "event": delta}}), flush=True)
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": "four",
                  "usage": {{"input_tokens": reply["usage"]["input_tokens"], "output_tokens": 1}}}}))
"""


def test_without_claude_code_the_row_says_why_it_was_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("npm_config_cache", raising=False)
    row = bench_claude_code(tmp_path / "unused.gguf", LoadParams(n_ctx=512), no_repack=False)
    assert "npm install -g @anthropic-ai/claude-code" in row["skipped"]
    assert claude_lines(row)[0].endswith(f"skipped: {row['skipped']}")


def test_a_turn_is_timed_against_serve_and_the_server_counts_its_requests(tmp_path, monkeypatch):
    claude = tmp_path / "bin" / "claude"
    claude.parent.mkdir()
    claude.write_text(STREAM_JSON_CLAUDE)
    claude.chmod(0o755)
    monkeypatch.setenv("PATH", str(claude.parent))
    gguf = write_tiny_gguf(tmp_path / "turn.gguf", name="Turn Model", context_length=32768)
    row = bench_claude_code(gguf, LoadParams(n_ctx=512), no_repack=False)
    assert row["n_ctx"] == 32768 and len(row["turns"]) == 2
    for turn in row["turns"]:
        assert turn["ok"] and turn["exit_code"] == 0, turn
        assert 0 < turn["ttft_s"] <= turn["turn_s"]
        assert turn["server_requests"] == 1 and turn["server_prompt_tokens"] > 0 and turn["server_ttft_s"] > 0
    lines = claude_lines(row)
    assert len(lines) == 2 and all("1 requests" in line and "server TTFT" in line for line in lines)
    path = {"label": "x", "decode_tokens_per_s": 1.0, "ttft_ms": 1.0, "ttft_min_ms": 1.0}
    single = {"model": "m.gguf", "n_ctx": 512, "chat_format": None, "n_threads": 1, "max_tokens": 8, "runs": 1,
              "paths": {"raw": path}, "api_vs_raw_decode": 1.0, "api_vs_raw_ttft_overhead_ms": 0.0,
              "api_vs_raw_ttft_min_overhead_ms": 0.0}  # fmt: skip
    assert report_lines({"single_stream": single, "claude_code": row})[-2:] == lines
