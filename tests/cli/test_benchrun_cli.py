"""``llm-workstation bench run`` / ``bench runs``: the JSON shape, the table, saving and comparing, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.cli import build_parser, main
from tests.support.fake_ollama import FakeOllama

ROW_KEYS = {
    "backend", "concurrency", "output_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "latency_p50_ms",
    "latency_p90_ms", "peak_memory_bytes", "peak_kv_usage", "preemptions", "requests", "errors", "output_tokens",
    "max_concurrency_sustained",
}  # fmt: skip
SMALL = ["--concurrency", "1,2", "--requests", "3", "--max-tokens", "8", "--warmup", "1", "--prompt-words", "5,12"]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bench_help_lists_every_kind():
    help_text = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for kind in ("chat", "startup", "batch", "run", "runs"):
        assert kind in help_text


def test_json_shape_for_llamacpp(capsys, long_context_gguf):
    code, out, err = _run(capsys, "bench", "run", "--backend", "llamacpp", "--model", str(long_context_gguf),
                          *SMALL, "--ctx", "512", "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert set(result) >= {"rows", "machine", "workload", "target"}
    assert len(result["rows"]) == 2
    for row in result["rows"]:
        assert set(row) >= ROW_KEYS
        assert row["errors"] == 0 and row["output_tokens"] == 3 * 8
    assert result["workload"]["concurrencies"] == [1, 2] and result["workload"]["prompt_words"] == [5, 12]
    machine = result["machine"]
    assert machine["cpu_threads"] >= 1 and machine["ram_total_bytes"] > 0
    assert machine["llama_cpp_python"]  # the engine's version is recorded
    assert machine["gpus"] == [] and machine["gpu_unavailable_reason"]  # no GPU on this machine: said so


def test_table_save_list_and_compare(capsys, long_context_gguf):
    args = ["bench", "run", "--backend", "llamacpp", "--model", str(long_context_gguf), *SMALL, "--ctx", "512"]
    code, out, err = _run(capsys, *args, "--save")
    assert code == 0, err
    assert "Output tok/s" in out and "llamacpp" in out and "saved as " in out
    first = out.rsplit("saved as ", 1)[1].strip()
    code, out, _ = _run(capsys, *args, "--save", "--json")
    second = json.loads(out)["id"]
    code, out, _ = _run(capsys, "bench", "runs")
    assert code == 0 and first in out and second in out
    code, out, _ = _run(capsys, "bench", "runs", "--json")
    assert {r["id"] for r in json.loads(out)} == {first, second}
    code, out, _ = _run(capsys, "bench", "runs", "--compare", first, second, "--json")
    ratios = json.loads(out)["rows"]
    assert code == 0 and [r["concurrency"] for r in ratios] == [1, 2]
    assert all(r["output_tokens_per_s_ratio"] > 0 for r in ratios)
    code, out, _ = _run(capsys, "bench", "runs", "--compare", first, second)
    assert code == 0 and "tok/s" in out and "x" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--backend", "llamacpp"], "--model must name a .gguf"),
        (["--backend", "llamacpp", "--model", "/nonexistent/m.gguf"], "m.gguf"),
        (["--backend", "vllm", "--concurrency", "1,zero"], "concurrency must be a list"),
        (["--backend", "vllm", "--max-tokens", "0"], "Max tokens"),
        (["--backend", "vllm", "--prompt-words", "0"], "prompt length (--prompt-words) must be between 1"),
        (["--backend", "ollama"], "--model must name an Ollama model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    code, _out, err = _run(capsys, "bench", "run", *argv)
    assert code == 2
    assert err.startswith("llm-workstation: ") and words in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_not_a_gguf_is_bad_input(capsys, not_a_gguf):
    code, _out, err = _run(capsys, "bench", "run", "--backend", "llamacpp", "--model", str(not_a_gguf))
    assert code == 2 and "not a GGUF" in err


def test_unreachable_ollama_prints_skipped_rows_and_fails(capsys):
    code, out, err = _run(capsys, "bench", "run", "--backend", "ollama", "--model", "llama3.2",
                          "--endpoint", FakeOllama.unused_host(), *SMALL, "--json")  # fmt: skip
    assert code == 1
    assert "Ollama is not running" in err
    rows = json.loads(out)["rows"]
    assert len(rows) == 2 and all("Ollama is not running" in r["skipped"] for r in rows)


def test_unknown_saved_run(capsys):
    code, _out, err = _run(capsys, "bench", "runs", "--compare", "a", "b")
    assert code == 2 and "no saved bench run 'a' (`llm-workstation bench runs` lists them)" in err


def test_parser_has_the_documented_options():
    args = build_parser().parse_args(
        [
            "bench",
            "run",
            "--backend",
            "vllm",
            "--model",
            "m",
            "--endpoint",
            "http://h:1",
            "--api-key",
            "k",
            "--concurrency",
            "1,8,32",
            "--requests",
            "9",
            "--max-tokens",
            "7",
            "--warmup",
            "0",
            "--seed",
            "3",
            "--ctx",
            "2048",
            "--save",
            "--json",
        ]
    )
    assert (args.backend, args.requests, args.max_tokens, args.warmup, args.seed) == ("vllm", 9, 7, 0, 3)
    assert args.save and args.json and args.api_key == "k"


def test_api_key_comes_from_the_environment_not_only_the_command_line(monkeypatch):
    monkeypatch.setenv("LLMW_API_KEY", "from-env")
    args = build_parser().parse_args(["bench", "run", "--backend", "vllm", "--model", "m"])
    assert args.api_key == "from-env"
    args = build_parser().parse_args(["bench", "run", "--backend", "vllm", "--model", "m", "--api-key", "given"])
    assert args.api_key == "given"


def test_parallel_llamacpp_json_rows(capsys, long_context_gguf):
    code, out, err = _run(capsys, "bench", "run", "--backend", "llamacpp", "--parallel", "--model",
                          str(long_context_gguf), *SMALL, "--ctx", "256", "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["target"]["parallel"] is True
    rows = result["rows"]
    assert [r["concurrency"] for r in rows] == [1, 2]
    for row in rows:
        assert set(row) >= ROW_KEYS and row["backend"] == "llamacpp-parallel"
        assert row["errors"] == 0 and row["output_tokens"] == 3 * 8
        assert row["ttft_p50_ms"] <= row["ttft_p90_ms"] and row["latency_p50_ms"] <= row["latency_p90_ms"]
    assert [r["parallel_streams"] for r in rows] == [1, 2]
    assert [r["max_concurrency_sustained"] for r in rows] == [2, 2]


def test_parallel_is_only_for_llamacpp(capsys):
    code, _out, err = _run(capsys, "bench", "run", "--backend", "vllm", "--parallel")
    assert code == 2 and err.startswith("llm-workstation: ") and "--parallel is for --backend llamacpp" in err
    assert build_parser().parse_args(["bench", "run", "--backend", "llamacpp"]).parallel is False
    with pytest.raises(SystemExit):
        main(["bench", "run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--parallel" in help_text and "parallel sequences in one context" in help_text
