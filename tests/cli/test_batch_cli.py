"""``llm-workstation batch`` and ``bench batch`` against the fake vLLM server: exit codes, messages, files."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from app.cli import batch as commands_batch
from tests.support import fake_http
from tests.support.fake_openai import FakeOpenAIServer


def _wired() -> bool:
    """Whether ``app.cli`` already routes ``batch`` (then the tests run ``python -m app`` in a subprocess)."""
    from app.cli import build_parser

    with contextlib.redirect_stderr(io.StringIO()):
        try:
            build_parser().parse_args(["batch", "in.jsonl", "--endpoint", "http://h:1", "--output", "o.jsonl"])
        except SystemExit:
            return False
    return True


WIRED = _wired()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-workstation")
    verbs = parser.add_subparsers(dest="verb")
    commands_batch.add_parser(verbs)
    kinds = verbs.add_parser("bench").add_subparsers(dest="bench_kind")
    commands_batch.add_bench_parser(kinds)
    return parser


def _main(argv: list[str]) -> int:
    """The verbs through this module's own parser (used until ``app.cli`` routes them)."""
    parsed = _parser().parse_args(argv)
    return commands_batch.run(parsed) if parsed.verb == "batch" else commands_batch.run_bench(parsed)


def command(*args: str) -> list[str]:
    """The argv of a separate process running the CLI."""
    if WIRED:
        return [sys.executable, "-m", "app", *args]
    return [
        sys.executable,
        "-c",
        "import sys; from tests.cli.test_batch_cli import _main; sys.exit(_main(sys.argv[1:]))",
        *args,
    ]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    if WIRED:
        return subprocess.run(command(*args), capture_output=True, text=True, timeout=120, check=False)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = _main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(fake_http.FakeHttpServer, "request_queue_size", 128)  # see tests/services/test_batch.py
    with FakeOpenAIServer(models=("tiny",)) as server:
        yield server


def write_jsonl(path, *items) -> str:
    path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n" for i in items))
    return str(path)


def results(path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_bad_lines_are_listed_and_the_rest_runs_with_exit_0(fake, tmp_path):
    source = write_jsonl(
        tmp_path / "in.jsonl",
        {"id": "a", "prompt": "hello", "max_tokens": 4, "ignore_eos": True, "seed": 3},
        "{oops",
        {"id": "b", "messages": [{"role": "user", "content": "hi"}]},
        {"id": "c", "prompt": "x", "max_tokens": "many"},
    )
    out = tmp_path / "out.jsonl"
    result = cli("batch", source, "--endpoint", fake.base_url, "--concurrency", "2", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert f"{source}: line 2: bad JSON" in result.stderr
    assert f'{source}: line 4: max_tokens must be an integer, not "many"' in result.stderr
    assert "2 bad input lines are skipped; the others run" in result.stderr
    assert "Traceback" not in result.stderr
    assert "model tiny: 2 requests, 2 done, 0 failed" in result.stdout
    assert "2 bad input lines were skipped" in result.stdout
    assert set(results(out)) == {"a", "b"}
    body = fake.requests_to("/v1/completions")[0].json
    assert body["ignore_eos"] is True and body["seed"] == 3


def test_csv_input_and_a_json_summary_and_a_rerun_that_has_nothing_left(fake, tmp_path):
    source = tmp_path / "in.csv"
    source.write_text('id,prompt,max_tokens\nq1,"first\nquestion",3\nq2,second,3\n')
    out = tmp_path / "out.jsonl"
    args = ("batch", str(source), "--endpoint", fake.base_url, "--chat", "--output", str(out), "--json")
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["count"], summary["done"], summary["failed"], summary["bad_input_lines"]) == (2, 2, 0, 0)
    assert set(summary["latency_ms"]) == {"p50", "p90", "p99"} and summary["output_tokens"] == 6
    assert results(out)["q1"]["output"] == "You said: first"
    assert len(fake.requests_to("/v1/chat/completions")) == 2
    again = cli(*args)
    assert again.returncode == 0 and json.loads(again.stdout)["skipped"] == 2
    assert "nothing to do: all 2 requests already finished" in again.stderr


def test_shortest_first_and_priority_flags_reach_the_server(fake, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", {"prompt": "a long prompt here"}, {"prompt": "short"})
    out = tmp_path / "out.jsonl"
    args = ("--endpoint", fake.base_url, "-c", "1", "-o", str(out), "--shortest-first", "--priority")
    assert cli("batch", source, *args).returncode == 0
    sent = [(r.json["prompt"], r.json["priority"]) for r in fake.requests_to("/v1/completions")]
    assert sent == [("short", 0), ("a long prompt here", 1)]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda tmp: str(tmp / "missing.jsonl"), "cannot read"),
        (lambda tmp: write_jsonl(tmp / "bad.jsonl", "{nope", "[]"), "no request in"),
        (lambda tmp: str((tmp / "x.csv").write_text("a,b\n1,2\n") and tmp / "x.csv"), 'no "prompt" column'),
    ],
)
def test_unreadable_input_exits_2_with_one_line(fake, tmp_path, setup, message):
    result = cli("batch", setup(tmp_path), "--endpoint", fake.base_url, "--output", str(tmp_path / "o.jsonl"))
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("llm-workstation: ") and message in last
    assert "Traceback" not in result.stderr and not fake.requests


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
@pytest.mark.parametrize("which", ["input", "output"])
def test_a_fifo_as_input_or_output_is_refused_at_once_with_exit_2(fake, tmp_path, which):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    source = str(fifo) if which == "input" else write_jsonl(tmp_path / "in.jsonl", {"prompt": "x"})
    out = str(tmp_path / "o.jsonl") if which == "input" else str(fifo)
    result = subprocess.run(
        command("batch", source, "--endpoint", fake.base_url, "--output", out),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("llm-workstation: ") and "is not a regular file (a pipe or a device)" in last
    assert "Traceback" not in result.stderr and not fake.requests


def test_a_csv_with_a_huge_field_and_an_open_quote_runs_its_good_rows(fake, tmp_path):
    source = tmp_path / "in.csv"
    huge = "x" * (16 * 1024 * 1024 + 1)
    source.write_text(f'id,prompt\na,first\nb,{huge}\nc,third\nd,"never closed\ne,swallowed\n')
    out = tmp_path / "out.jsonl"
    result = cli("batch", str(source), "--endpoint", fake.base_url, "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert f"{source}: line 3: a field is longer than 16,777,216 characters" in result.stderr
    assert f"{source}: line 5: unterminated quote: the quoted field that opens here is never closed" in result.stderr
    assert set(results(out)) == {"a", "c"}


def test_bad_options_exit_2(fake, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", {"prompt": "x"})
    out = str(tmp_path / "o.jsonl")
    assert cli("batch", source, "--endpoint", "ftp://x", "-o", out).returncode == 2
    assert cli("batch", source, "--endpoint", fake.base_url, "-o", out, "-c", "0").returncode == 2
    (tmp_path / "notes.txt").write_text("not results\n")
    refused = cli("batch", source, "--endpoint", fake.base_url, "-o", str(tmp_path / "notes.txt"))
    assert refused.returncode == 2 and "is not a batch result" in refused.stderr


def test_a_server_that_is_down_exits_1_with_one_line(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", {"prompt": "x"})
    url = FakeOpenAIServer.unused_url()
    result = cli("batch", source, "--endpoint", url, "--output", str(tmp_path / "o.jsonl"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"llm-workstation: cannot reach the server at {url}")
    assert "Traceback" not in result.stderr


def test_every_request_failing_exits_1_and_names_the_first_error(fake, tmp_path):
    for _ in range(2):
        fake.fail("/v1/completions", status=400, error="prompt too long")
    source = write_jsonl(tmp_path / "in.jsonl", {"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"})
    result = cli("batch", source, "--endpoint", fake.base_url, "-c", "1", "--output", str(tmp_path / "o.jsonl"))
    assert result.returncode == 1
    assert "every request failed; the first: a: HTTP 400: prompt too long" in result.stderr


def test_the_api_key_comes_from_the_environment_and_never_shows(fake, tmp_path, monkeypatch):
    fake.api_key = "right-key"
    source = write_jsonl(tmp_path / "in.jsonl", {"prompt": "x"})
    out = str(tmp_path / "o.jsonl")
    wrong = cli("batch", source, "--endpoint", fake.base_url, "--api-key", "wrong-key", "-o", out)
    assert wrong.returncode == 1 and "refused the API key" in wrong.stderr and "wrong-key" not in wrong.stderr
    monkeypatch.setenv("LLMW_API_KEY", "right-key")
    assert cli("batch", source, "--endpoint", fake.base_url, "-o", out).returncode == 0


def test_bench_batch_reports_both_paths_at_each_concurrency(fake, tmp_path):
    fake.token_delay_s = 0.001
    args = ("--endpoint", fake.base_url, "--prompts", "6", "--max-tokens", "4", "--concurrency", "1,3", "--rounds", "1")
    result = cli("bench", "batch", *args, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model"] == "tiny" and report["max_tokens"] == 4 and report["target_ratio"] == 0.95
    assert [level["concurrency"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        assert level["runner_tokens_per_s"] > 0 and level["baseline_tokens_per_s"] > 0
        assert level["ratio"] == pytest.approx(level["runner_tokens_per_s"] / level["baseline_tokens_per_s"])
        assert level["runner_cpu_ms_per_1k_tokens"] > 0 and level["baseline_cpu_ms_per_1k_tokens"] > 0
        for sample in level["samples"]["runner"] + level["samples"]["baseline"]:
            assert sample["output_tokens"] == 6 * 4 and sample["failed"] == 0  # ignore_eos: exactly max_tokens
    assert report["batched_vs_single"] == pytest.approx(
        report["levels"][1]["runner_tokens_per_s"] / report["levels"][0]["runner_tokens_per_s"]
    )
    bodies = [r.json for r in fake.requests_to("/v1/completions")]
    assert all(b["ignore_eos"] is True and b["stream"] is True for b in bodies)
    text = cli("bench", "batch", *args)
    assert text.returncode == 0 and "batched (concurrency 3) vs single" in text.stdout


def test_bench_batch_bad_levels_exit_2(fake):
    result = cli("bench", "batch", "--endpoint", fake.base_url, "--concurrency", "1,x")
    assert result.returncode == 2 and "--concurrency takes a list such as 1,8,32" in result.stderr


def test_ctrl_c_cancels_keeps_whole_lines_and_exits_130(fake, tmp_path):
    fake.token_delay_s = 0.02
    # 120 prompts of ~0.2 s, 4 at a time: still running when the signal comes, however loaded the machine
    source = write_jsonl(tmp_path / "in.jsonl", *({"id": f"r{i}", "prompt": "x", "max_tokens": 10} for i in range(120)))
    out = tmp_path / "out.jsonl"
    argv = command("batch", source, "--endpoint", fake.base_url, "-c", "4", "--output", str(out))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while (not out.exists() or len(out.read_text().splitlines()) < 4) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "cancelling" in stderr and "cancelled; finished results are in" in stderr and "Traceback" not in stderr
    finished = results(out)
    assert 4 <= len(finished) < 120 and all(r["error"] is None for r in finished.values())
    assert f"{len(finished)} done" in stdout
    assert fake.wait_idle()


def test_a_sigkilled_batch_loses_nothing_and_a_rerun_does_only_the_rest(fake, tmp_path):
    fake.token_delay_s = 0.02
    source = write_jsonl(tmp_path / "in.jsonl", *({"id": f"r{i}", "prompt": "x", "max_tokens": 10} for i in range(120)))
    out = tmp_path / "out.jsonl"
    argv = command("batch", source, "--endpoint", fake.base_url, "-c", "4", "--output", str(out))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while (not out.exists() or len(out.read_text().splitlines()) < 6) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    before = out.read_text()
    complete = before.splitlines() if before.endswith("\n") else before.splitlines()[:-1]
    done_before = {json.loads(line)["id"] for line in complete}  # every complete line is whole JSON
    assert 6 <= len(done_before) < 120
    fake.wait_idle()
    sent_before = len(fake.requests_to("/v1/completions"))
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert rerun.returncode == 0, rerun.stderr
    finished = results(out)
    assert set(finished) == {f"r{i}" for i in range(120)} and all(r["error"] is None for r in finished.values())
    assert len(fake.requests_to("/v1/completions")) - sent_before == 120 - len(done_before)  # only the rest
