"""The command line as a user runs it: real processes, real worker, exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from app import __version__


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_version():
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"llm-workstation {__version__}"


def test_chat_streams_and_prints_figures_as_last_json_line(tiny_gguf):
    result = cli("chat", str(tiny_gguf), "-p", "hello", "--max-tokens", "12", "--temperature", "0", "--json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip("\n").split("\n")
    figures = json.loads(lines[-1])
    assert figures["completion_tokens"] == 12 and figures["prompt_tokens"] > 0
    assert figures["ttft_ms"] > 0 and figures["decode_tokens_per_s"] > 0
    assert figures["text"] and figures["text"] in result.stdout
    assert "Traceback" not in result.stderr


def test_chat_without_template_says_which_format(tiny_gguf_no_template):
    result = cli("chat", str(tiny_gguf_no_template), "-p", "hi", "--max-tokens", "4")
    assert result.returncode == 0
    assert "no chat template" in result.stderr and "llama-2" in result.stderr


@pytest.mark.parametrize(
    ("fixture", "code", "expected"),
    [
        ("not_a_gguf", 2, "is not a GGUF model file"),
        ("truncated_gguf", 2, "truncated"),
        ("bad_arch_gguf", 1, "nosucharch"),
    ],
)
def test_bad_model_files_exit_with_one_line(request, fixture, code, expected):
    result = cli("chat", str(request.getfixturevalue(fixture)), "-p", "hi")
    assert result.returncode == code
    assert expected in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr


def test_prompt_longer_than_context_exits_with_one_line(tiny_gguf):
    result = cli("chat", str(tiny_gguf), "-p", "word " * 600, "--ctx", "256")
    assert result.returncode == 2  # the request must change (a shorter prompt or a larger context)
    assert "context of 256" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_missing_model_file(tmp_path):
    result = cli("chat", str(tmp_path / "missing.gguf"), "-p", "hi")
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_smoke_and_screenshot(tmp_path):
    assert cli("--smoke").returncode == 0
    shot = tmp_path / "shot.png"
    result = cli("--screenshot", str(shot))
    assert result.returncode == 0, result.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_gui_start_imports_no_engine(tmp_path):
    report = tmp_path / "startup.json"
    env_script = (
        "import os, runpy, sys; os.environ['LLMW_STARTUP_REPORT'] = sys.argv[1]; sys.argv = ['app', '--smoke'];"
        "runpy.run_module('app', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", env_script, str(report)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(report.read_text())
    assert data["heavy_modules"] == []
    assert data["window_shown_s"] > 0 and data["rss_bytes"] > 0


def test_app_closes_cleanly_on_sigterm(tmp_path):
    import os
    import signal

    report = tmp_path / "startup.json"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", LLMW_STARTUP_REPORT=str(report))
    proc = subprocess.Popen([sys.executable, "-m", "app"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not report.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert report.exists(), "the window never came up"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in proc.stderr.read()


def test_unknown_chat_format_exits_2_naming_the_valid_formats(tiny_gguf):
    result = cli("chat", str(tiny_gguf), "-p", "hi", "--chat-format", "no-such-format", "--ctx", "256")
    assert result.returncode == 2, result.stderr
    assert "Unknown chat format 'no-such-format'" in result.stderr
    assert "Valid formats:" in result.stderr and "chatml" in result.stderr and "llama-3" in result.stderr
    assert "settings" not in result.stderr and "SIGABRT" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_context_that_cannot_fit_exits_2_at_once_with_the_estimate(tiny_gguf):
    result = cli("chat", str(tiny_gguf), "-p", "hi", "--ctx", "999999999")
    assert result.returncode == 2, result.stderr
    assert "A context of 999,999,999 tokens will not fit in this machine's memory" in result.stderr
    assert "KV cache alone needs 238.4 GiB" in result.stderr and "Won't fit: needs" in result.stderr
    assert "Lower the context to" in result.stderr and "architecture" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_context_above_the_trained_size_warns_and_works(tiny_gguf):
    result = cli("chat", str(tiny_gguf), "-p", "hi", "--ctx", "4096", "--max-tokens", "3", "--json")
    assert result.returncode == 0, result.stderr
    assert "warning: The context (4,096 tokens) is larger than the 2,048 tokens" in result.stderr
    assert json.loads(result.stdout.strip().split("\n")[-1])["n_ctx"] == 4096


def test_broken_chat_template_exits_2_with_its_line(tmp_path):
    from tests.support.gguf_factory import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "broken.gguf", chat_template="{% if messages %}\n{{ x }\n{% endif %}")
    result = cli("chat", str(model), "-p", "hi", "--ctx", "256")
    assert result.returncode == 2, result.stderr
    assert "chat template has a syntax error at line 2" in result.stderr
    assert "choose another chat format" in result.stderr and "Traceback" not in result.stderr
    ok = cli("chat", str(model), "-p", "hi", "--ctx", "256", "--chat-format", "chatml", "--max-tokens", "2")
    assert ok.returncode == 0, ok.stderr
