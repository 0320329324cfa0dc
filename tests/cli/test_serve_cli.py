"""``llm-workstation serve`` as a real process: it prints its base URL alone on a line once it accepts connections,
serves the models of ``--models-dir`` with its own engine host, imports no Qt, and exits 0 on SIGTERM; an
address other machines reach without a key, and a port in use, exit 2 with the reason."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(120)


def _serve(*args: str, env: dict[str, str] | None = None, importtime: bool = False) -> subprocess.Popen[str]:
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "app", "serve", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})  # fmt: skip


def test_serve_prints_its_url_serves_and_stops_on_sigterm(tmp_path):
    write_tiny_gguf(tmp_path / "served.gguf", name="served-model")
    proc = _serve("--port", "0", "--models-dir", str(tmp_path), importtime=True, env={"LLMW_API_KEY": "k-123"})
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.split(":")[-1].isdigit()
        headers = {"Authorization": "Bearer k-123"}
        assert httpx.get(url + "/v1/models").status_code == 401  # the key from LLMW_API_KEY is required
        models = httpx.get(url + "/v1/models", headers=headers).json()["data"]
        assert [m["id"] for m in models] == ["served-model"]
        reply = httpx.post(url + "/v1/chat/completions", headers=headers, timeout=60, json={
            "model": "served-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        }).json()  # fmt: skip
        assert reply["usage"]["completion_tokens"] == 3
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    imported = [line.split("|")[-1].strip() for line in err.splitlines() if line.startswith("import time:")]
    assert "uvicorn" in imported and not any(name.split(".")[0] in ("PySide6", "shiboken6") for name in imported)
    assert "k-123" not in err and "hi" not in [line.strip() for line in err.splitlines()]


def test_sigterm_during_a_stream_ends_it_and_exits_0(tmp_path):
    write_tiny_gguf(tmp_path / "endless.gguf", name="endless", context_length=8192, never_eos=True)
    proc = _serve("--port", "0", "--models-dir", str(tmp_path))
    try:
        url = proc.stdout.readline().strip()
        body = {"model": "endless", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7000,
                "stream": True}  # fmt: skip
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            proc.send_signal(signal.SIGTERM)
            rest = list(lines)  # the stream ends (the reply is stopped) instead of running to 7000 tokens
        assert sum(line.startswith("data: ") for line in rest) < 3000
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]


def test_a_port_in_use_exits_2():
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        proc = _serve("--port", str(taken.getsockname()[1]))
        out, err = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert proc.returncode == 2 and out == ""
    assert "already in use" in err and "--port" in err


def test_listening_beyond_this_machine_needs_a_key():
    proc = _serve("--host", "0.0.0.0", "--port", "0", env={"LLMW_API_KEY": ""})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert "needs an API key" in err and "LLMW_API_KEY" in err


def test_a_models_dir_that_does_not_exist_exits_2(tmp_path):
    proc = _serve("--models-dir", str(tmp_path / "missing"))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "not a folder" in err


def _one_request(proc: subprocess.Popen[str], model: str) -> tuple[int, str]:
    """One chat request to a started ``serve``, then SIGTERM; its exit code and stderr."""
    try:
        url = proc.stdout.readline().strip()
        reply = httpx.post(url + "/v1/chat/completions", timeout=60, json={
            "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        })  # fmt: skip
        assert reply.status_code == 200, reply.text
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


def test_serve_loads_a_model_with_its_saved_context_and_ctx_overrides_it(tmp_path):
    from app.core.params import LoadParams
    from app.services.model_settings import FILE_NAME, ModelSettings, ModelSettingsStore
    from app.services.paths import app_paths

    model = write_tiny_gguf(tmp_path / "served.gguf", name="served-model", context_length=8192)
    ModelSettingsStore(app_paths().data_dir / FILE_NAME).set(str(model), ModelSettings(load=LoadParams(n_ctx=1024)))

    code, err = _one_request(_serve("--port", "0", "--models-dir", str(tmp_path)), "served-model")
    assert code == 0, err[-3000:]
    assert "each model loads with its own setting (default 4,096 tokens" in err  # the banner says the rule
    # as many requests at once as fit (the default), each sequence with the model's saved context
    loaded = r"loaded served-model \(llamacpp\) for [1-4] parallel API requests, context 1,024 tokens each"
    assert re.search(loaded, err), err[-3000:]

    code, err = _one_request(_serve("--port", "0", "--models-dir", str(tmp_path), "--ctx", "1536"), "served-model")
    assert code == 0, err[-3000:]
    assert "every model loads with 1,536 tokens (--ctx)" in err
    assert "parallel API requests, context 1,536 tokens each" in err  # --ctx over the model's own


@pytest.mark.parametrize(
    ("value", "said"),
    [("abc", "the context size is a whole number of tokens"), ("8", "context size must be from 16"),
     ("0", "context size must be from 16"), ("99999999999", "context size must be from 16")],
)  # fmt: skip
def test_a_bad_ctx_exits_2_saying_what_it_must_be(value, said):
    proc = _serve("--port", "0", "--ctx", value)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert said in err and "--ctx" in err


def test_serve_parallel_runs_llama_cpp_requests_side_by_side(tmp_path):
    write_tiny_gguf(tmp_path / "served.gguf", name="served-model", context_length=8192)
    code, err = _one_request(_serve("--port", "0", "--models-dir", str(tmp_path), "--parallel", "2", "--ctx", "1024",
                                    "--log-level", "INFO"), "served-model")  # fmt: skip
    assert code == 0, err[-3000:]
    assert "up to 2 requests at once per model, each with its full context (--parallel)" in err  # the banner
    assert "loaded for 2 sequences × 1,024 tokens" in err  # the parallel engine, each sequence its full context


@pytest.mark.parametrize(("value", "said"), [("0", "at least 1 request"), ("many", "a number of requests")])
def test_a_bad_parallel_exits_2_saying_what_it_must_be(value, said):
    proc = _serve("--port", "0", "--parallel", value)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert said in err and "--parallel" in err
