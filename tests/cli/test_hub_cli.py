"""``llm-workstation hub search|files`` and ``download`` against the local Hub server, SIGKILL and resume included."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import hub as commands_hub
from tests.support.hf_server import VALID_TOKEN, FileFault, HubServer, Repo, random_bytes, use_hub

BIG = "big-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with HubServer() as server:
        use_hub(server, monkeypatch, tmp_path)
        server.add(
            Repo(
                "org/Big-GGUF",
                {BIG: random_bytes(4_000_000, 1), "big-Q8_0.gguf": random_bytes(5000, 2)},
                tags=["gguf"],
                downloads=3,
            )
        )
        server.add(Repo("org/Tiny-HF", {"config.json": b"{}", "model.safetensors": b"w" * 5000}, downloads=9))
        server.add(Repo("org/Gated-GGUF", {"m-Q4_0.gguf": b"g" * 100}, gated=True, tags=["gguf"]))
        yield server


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="llm-workstation")
    commands_hub.add_parser(parser.add_subparsers(dest="verb"))
    code = commands_hub.run(parser.parse_args(list(argv)))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_search_json_items_carry_id(capsys, hub):
    code, out, _ = cli(capsys, "hub", "search", "org", "--json")
    assert code == 0
    assert [item["id"] for item in json.loads(out)] == ["org/Tiny-HF", "org/Big-GGUF", "org/Gated-GGUF"]
    code, out, _ = cli(capsys, "hub", "search", "org", "--gguf", "--limit", "1", "--json")
    assert [item["id"] for item in json.loads(out)] == ["org/Big-GGUF"]
    code, out, _ = cli(capsys, "hub", "search", "big")
    assert code == 0 and out.startswith("org/Big-GGUF")


def test_files_lists_sizes_and_quants(capsys, hub):
    code, out, _ = cli(capsys, "hub", "files", "org/Big-GGUF")
    assert code == 0 and "3.8 MiB" in out and "GGUF Q4_K_M" in out and "GGUF Q8_0" in out
    code, out, _ = cli(capsys, "hub", "files", "org/Big-GGUF", "--json")
    data = json.loads(out)
    assert {f["path"]: f["size_bytes"] for f in data["files"]}[BIG] == 4_000_000
    assert [c["quant"] for c in data["gguf"]] == ["Q8_0", "Q4_K_M"]


def test_download_by_quant_prints_the_path(capsys, hub, tmp_path):
    code, out, err = cli(capsys, "download", "org/Big-GGUF", "--quant", "q8_0", "--dir", str(tmp_path / "m"))
    assert code == 0, err
    path = Path(out.strip())
    assert path == tmp_path / "m" / "org" / "Big-GGUF" / "big-Q8_0.gguf"
    assert path.read_bytes() == hub.repos["org/Big-GGUF"].files["big-Q8_0.gguf"]
    assert "100.0%" in err  # the progress bar on stderr


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["download", "org/Big-GGUF", "--quant", "Q2_K"], 2, "no GGUF file has quantization Q2_K (available: "),
        (["download", "org/Big-GGUF"], 2, "Choose a file or a quantization in org/Big-GGUF"),
        (["download", "org/Big-GGUF", BIG, "--quant", "Q8_0"], 2, "either FILE names or --quant"),
        (["download", "org/Nope", "x.gguf"], 2, "org/Nope was not found"),
        (["hub", "files", "org/Nope"], 2, "org/Nope was not found"),
        (["hub", "search", "x", "--limit", "0"], 2, "--limit must be at least 1"),
        (["download", "org/Gated-GGUF", "m-Q4_0.gguf"], 1, "accept its license on its Hub page"),
    ],
)
def test_failures_are_one_line_with_an_exit_code(capsys, hub, argv, code, message):
    got, _, err = cli(capsys, *argv)
    last = err.strip().splitlines()[-1]
    assert got == code and last.startswith("llm-workstation: ") and message in last
    assert "Traceback" not in err


def test_token_from_settings_opens_a_gated_repo_and_never_shows(capsys, hub, isolated_home):
    settings = isolated_home / "config" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"hf_token": VALID_TOKEN}), encoding="utf-8")
    code, out, err = cli(capsys, "download", "org/Gated-GGUF", "m-Q4_0.gguf")
    assert code == 0, err
    assert VALID_TOKEN not in out + err


def test_server_errors_are_retried_then_done(capsys, hub, tmp_path):
    hub.faults["big-Q8_0.gguf"] = FileFault(errors_5xx=1, drop_after_bytes=2000)
    code, _, err = cli(capsys, "download", "org/Big-GGUF", "big-Q8_0.gguf", "--dir", str(tmp_path))
    assert code == 0, err
    assert [(e.status, e.start) for e in hub.log if e.path == "big-Q8_0.gguf"] == [(503, 0), (200, 0), (206, 2000)]


def test_sigkill_then_the_same_command_resumes_and_fetches_only_the_rest(hub, tmp_path):
    hub.throttle_bytes_per_s = 2_000_000
    target = tmp_path / "models"
    argv = [sys.executable, "-m", "app", "download", "org/Big-GGUF", BIG, "--dir", str(target)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    partial = target / "org" / "Big-GGUF" / (BIG + ".incomplete")
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not partial.exists() or partial.stat().st_size < 1_000_000:
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.stderr else ""
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    first.stdout.close()
    first.stderr.close()
    on_disk = partial.stat().st_size
    assert 1_000_000 <= on_disk < 4_000_000
    hub.throttle_bytes_per_s = None
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    final = Path(second.stdout.strip())
    data = hub.repos["org/Big-GGUF"].files[BIG]
    assert hashlib.sha256(final.read_bytes()).digest() == hashlib.sha256(data).digest()
    gets = [e for e in hub.log if e.path == BIG and e.method == "GET"]
    assert max(e.start for e in gets) == on_disk  # the resumed run asked only for the rest
    assert sum(e.sent_bytes for e in gets if e.start == on_disk) == 4_000_000 - on_disk
    assert not partial.exists()


def test_bench_download_reports_throughput_and_the_resume_after_a_kill(capsys):
    parser = argparse.ArgumentParser(prog="llm-workstation")
    kinds = parser.add_subparsers(dest="verb").add_parser("bench").add_subparsers(dest="bench_kind")
    commands_hub.add_bench_parser(kinds)
    code = commands_hub.run_bench(parser.parse_args(["bench", "download", "--size-mb", "128", "--runs", "1", "--json"]))
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["size_bytes"] == 128_000_000 and report["app_sha256_ok"] and report["sha256_ok"]
    assert report["curl_mb_per_s"] > 0 and report["app_mb_per_s"] > 0
    assert 0 < report["killed_at_bytes"] < 128_000_000
    assert report["resumed_from_bytes"] == report["killed_at_bytes"] and report["refetched_on_disk_bytes"] == 0
    assert report["refetched_bytes"] == report["lost_in_flight_bytes"] >= 0


def test_bench_download_rejects_a_bad_size(capsys):
    code = commands_hub.run_bench(argparse.Namespace(size_mb=0, runs=1, json=False))
    assert code == 2 and "--size-mb and --runs must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["hub", "search", "qwen"], ["hub", "files", "org/Big-GGUF"]])
def test_an_unreachable_hub_fails_with_one_line(capsys, monkeypatch, tmp_path, argv):
    from tests.services.test_hub import closed_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    code, _, err = cli(capsys, *argv)
    last = err.strip().splitlines()[-1]
    assert code != 0 and last.startswith("llm-workstation: Cannot reach the Hub at http://127.0.0.1:")
    assert "Traceback" not in err
