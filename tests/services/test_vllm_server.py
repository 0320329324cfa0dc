"""VllmServer: start, phases, readiness, crashes, stop — on a fake vLLM (fast) and on the real CPU server.

The real-server tests share ONE session server (the ``vllm_server`` fixture) except the few whose point is a
start of their own (a crash at start, stop-and-restart on the same port plus an engine kill). Those come first in
this file so that, run alone, no two vLLM servers are up at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time

import httpx
import psutil
import pytest

from app.core.vllm.log import CrashCause, Phase
from app.core.vllm.options import SECRET_MASK, VllmServerOptions
from app.services.vllm.server import (
    VllmServer,
    VllmServerError,
    default_cpu_kv_cache_gib,
    free_port,
)
from tests.support.vllm_support import SESSION_API_KEY, SESSION_ENV, write_fake_vllm

STARTUP_ORDER = [Phase.STARTING, Phase.LOADING_WEIGHTS, Phase.KV_CACHE, Phase.READY]


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def tree(server: VllmServer) -> list[psutil.Process]:
    """The server process, its descendants and everything else in its session."""
    assert server.pid is not None
    root = psutil.Process(server.pid)
    procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(proc.pid) == server.pid:
                procs[proc.pid] = proc
    return list(procs.values())


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
    return left


def engine_core(procs: list[psutil.Process]) -> psutil.Process:
    return next(p for p in procs if "VLLM::EngineCore" in " ".join(p.cmdline()))


def health(base_url: str) -> int:
    return httpx.get(f"{base_url}/health", timeout=5, trust_env=False).status_code


# --- a fake vLLM: the lifecycle logic in seconds ------------------------------------------------------------------


@pytest.fixture
def fake(tmp_path):
    """(make_server, env): servers that run tests/support/vllm_support.py's fake api_server module."""
    env = write_fake_vllm(tmp_path / "fake")
    servers: list[VllmServer] = []

    def make(mode: str = "ok", **options) -> VllmServer:
        server = VllmServer(
            sys.executable,
            VllmServerOptions(model=str(tmp_path / "model"), **options),
            {**env, "FAKE_VLLM_MODE": mode},
            cpu_build=True,
            ready_timeout_s=30,
        )
        servers.append(server)
        return server

    yield make
    for server in servers:  # whatever a failing test left running
        if server.pid is not None:
            run(server.stop(timeout=2))


def test_fake_start_phases_health_and_stop(fake):
    server = fake(served_model_name="tiny")
    lines, phases = [], []

    async def scenario() -> list[psutil.Process]:
        await server.start(lines.append, phases.append)
        assert await asyncio.to_thread(health, server.base_url) == 200
        procs = tree(server)
        await server.stop()
        return procs

    procs = run(scenario())
    assert [event.phase for event in phases] == STARTUP_ORDER
    assert [event.phase for event in server.phases] == STARTUP_ORDER
    assert server.facts.kv_cache_tokens == 1_048_576
    assert server.elapsed is not None and server.elapsed > 0
    assert any("Application startup complete" in line for line in lines) and server.log_tail == lines
    assert len(procs) >= 3  # API server, engine core, worker
    assert alive(procs) == []
    assert server.base_url.startswith("http://127.0.0.1:") and server.served_model_name == "tiny"


def test_fake_crash_at_start_is_classified(fake):
    server = fake("crash")
    with pytest.raises(VllmServerError) as caught:
        run(server.start())
    error = caught.value
    assert error.cause is CrashCause.MODEL_NOT_FOUND
    assert str(error).startswith("vLLM stopped while starting. vLLM found no model there")
    assert error.exit_code == 1
    assert any("Invalid repository ID" in line for line in error.log_tail)


def test_fake_engine_death_is_reported_and_orphans_are_killed(fake):
    server = fake()
    crashes: list[VllmServerError] = []

    async def scenario() -> list[psutil.Process]:
        await server.start(on_crash=crashes.append)
        procs = tree(server)
        engine_core(procs).kill()
        with pytest.raises(VllmServerError) as caught:
            await asyncio.wait_for(server.wait(), 20)
        assert caught.value is crashes[0]
        return procs

    procs = run(scenario())
    assert crashes[0].cause is CrashCause.ENGINE_DIED
    assert str(crashes[0]).startswith("vLLM stopped while running. vLLM's engine process stopped unexpectedly")
    assert alive(procs) == []  # the orphaned VLLM::Worker too


def test_fake_that_ignores_sigterm_is_killed(fake):
    server = fake("ignore_term")

    async def scenario() -> tuple[list[psutil.Process], float]:
        await server.start()
        procs = tree(server)
        started = time.monotonic()
        await server.stop(timeout=1.0)
        return procs, time.monotonic() - started

    procs, took_s = run(scenario())
    assert alive(procs) == []
    assert took_s >= 1.0  # it waited its timeout for the process to leave, then killed it


def test_fake_that_never_listens_times_out_and_is_stopped(fake):
    server = fake("never_ready")
    server.ready_timeout_s = 2.0
    with pytest.raises(VllmServerError, match=r"did not become ready within 2 s \(last phase: sizing the KV cache\)"):
        run(server.start())
    assert not server.running


def test_cancelling_start_stops_the_server(fake):
    server = fake("never_ready")

    async def scenario() -> list[psutil.Process]:
        task = asyncio.create_task(server.start())
        while server.pid is None or not server.phases:
            await asyncio.sleep(0.05)
        procs = tree(server)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return procs

    assert alive(run(scenario())) == []


def test_a_busy_port_is_refused_before_starting(fake):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = fake(port=busy.getsockname()[1])
        with pytest.raises(VllmServerError, match="already in use by another program") as caught:
            run(server.start())
    assert caught.value.cause is CrashCause.PORT_IN_USE and server.pid is None


def test_bad_options_are_refused_before_starting(fake):
    server = fake(gpu_memory_utilization=3.0)
    with pytest.raises(VllmServerError, match="between 0 and 1"):
        run(server.start())
    assert server.pid is None


def test_environment_and_commands(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    options = VllmServerOptions(model="/m", api_key="secret-key-42", port=8555)
    cpu = VllmServer("/venv/bin/python", options, cpu_build=True)
    line = cpu.launch_command()
    assert "secret-key-42" not in line and f"VLLM_API_KEY={SECRET_MASK}" in line.replace("'", "")
    assert "VLLM_CPU_KVCACHE_SPACE=" in line and "/venv/bin/python -m vllm.entrypoints.openai.api_server" in line
    assert "secret-key-42" in cpu.launch_command(reveal_secrets=True)
    assert "VLLM_CPU_KVCACHE_SPACE" not in VllmServer("python", options, cpu_build=False).launch_command()
    overridden = VllmServer("python", options, {"VLLM_CPU_KVCACHE_SPACE": "2"}, cpu_build=True)
    assert "VLLM_CPU_KVCACHE_SPACE=2" in overridden.launch_command()
    assert "-p 127.0.0.1:8555:8000" in cpu.docker_command("v0.32.0") and "vllm-openai:v0.32.0" in cpu.docker_command(
        "v0.32.0"
    )
    assert cpu.base_url == "http://127.0.0.1:8555"
    with pytest.raises(RuntimeError, match="start it first"):
        _ = VllmServer("python", VllmServerOptions(model="/m")).base_url


def test_a_vllm_api_key_in_the_apps_environment_does_not_reach_the_server(fake, monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_API_KEY", "leaked-from-the-shell")
    server = fake()

    async def scenario() -> dict[str, str]:
        await server.start()
        environ = psutil.Process(server.pid).environ()
        await server.stop()
        return environ

    environ = run(scenario())
    assert "VLLM_API_KEY" not in environ and environ["VLLM_CPU_KVCACHE_SPACE"]


def test_default_cpu_kv_cache():
    assert default_cpu_kv_cache_gib(4 * 2**30) == 1
    assert default_cpu_kv_cache_gib(24 * 2**30) == 3
    assert default_cpu_kv_cache_gib(512 * 2**30) == 8


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


# --- the real server: starts of their own (few, --enforce-eager) --------------------------------------------------


def real_server(python, model_dir, **options) -> VllmServer:
    opts = VllmServerOptions(model=str(model_dir), max_model_len=512, enforce_eager=True, **options)
    return VllmServer(python, opts, SESSION_ENV, cpu_build=True, ready_timeout_s=600)


@pytest.mark.slow
def test_real_crash_at_start_without_config_json(vllm_python_path, tiny_llama_dir, tmp_path):
    broken = tmp_path / "no-config"
    broken.mkdir()
    for item in tiny_llama_dir.iterdir():
        if item.name != "config.json":
            (broken / item.name).symlink_to(item)
    server = real_server(vllm_python_path, broken)
    with pytest.raises(VllmServerError) as caught:
        run(server.start(), 300)
    error = caught.value
    assert error.cause is CrashCause.MODEL_NOT_FOUND
    assert "Invalid repository ID or local directory" in str(error)
    assert any("config.json" in line for line in error.log_tail)
    assert error.exit_code not in (0, None) and not server.running


@pytest.mark.slow
def test_real_stop_restart_on_the_same_port_and_engine_kill(vllm_python_path, tiny_llama_dir):
    port = free_port()

    async def first_start() -> list[psutil.Process]:
        server = real_server(vllm_python_path, tiny_llama_dir, port=port)
        await server.start()
        assert await asyncio.to_thread(health, server.base_url) == 200
        procs = tree(server)
        assert any("VLLM::EngineCore" in " ".join(p.cmdline()) for p in procs)
        await server.stop()
        return procs

    procs = run(first_start(), 600)
    assert alive(procs) == [], "stop() left vLLM processes behind"

    server = real_server(vllm_python_path, tiny_llama_dir, port=port)
    crashes: list[VllmServerError] = []

    async def second_start_then_kill_the_engine() -> list[psutil.Process]:
        await server.start(on_crash=crashes.append)
        assert server.base_url == f"http://127.0.0.1:{port}"
        assert await asyncio.to_thread(health, server.base_url) == 200
        procs = tree(server)
        os.kill(engine_core(procs).pid, signal.SIGKILL)
        with pytest.raises(VllmServerError):
            await asyncio.wait_for(server.wait(), 60)
        await server.stop()
        return procs

    procs = run(second_start_then_kill_the_engine(), 600)
    assert [crash.cause for crash in crashes] == [CrashCause.ENGINE_DIED]
    assert str(crashes[0]).startswith("vLLM stopped while running.")
    assert any("engine core exited unexpectedly" in line or "EngineDead" in line for line in crashes[0].log_tail)
    assert alive(procs) == [], "the engine kill left vLLM processes behind"


# --- the real server: the session one -----------------------------------------------------------------------------


@pytest.mark.slow
def test_real_server_started_through_the_phases(vllm_server):
    phases = [event.phase for event in vllm_server.phases]
    assert phases == STARTUP_ORDER, phases
    times = [event.at_s for event in vllm_server.phases]
    assert times == sorted(times)
    elapsed = vllm_server.server.elapsed
    assert elapsed is not None and times[-1] <= elapsed + 1
    assert vllm_server.server.facts.kv_cache_tokens and vllm_server.server.facts.version
    summary = ", ".join(f"{event.phase.value} {event.at_s:.1f} s" for event in vllm_server.phases)
    print(f"\nvLLM start-up to /health 200: {elapsed:.1f} s ({summary})")


@pytest.mark.slow
def test_real_server_answers_health_and_lists_the_served_name(vllm_server):
    assert health(vllm_server.base_url) == 200
    models = httpx.get(f"{vllm_server.base_url}/v1/models", headers=vllm_server.headers, timeout=10, trust_env=False)
    assert models.status_code == 200
    assert [entry["id"] for entry in models.json()["data"]] == [vllm_server.served_model_name]
    refused = httpx.get(f"{vllm_server.base_url}/v1/models", timeout=10, trust_env=False)
    assert refused.status_code == 401  # the key travelled in VLLM_API_KEY


@pytest.mark.slow
def test_real_server_generates(vllm_server):
    reply = httpx.post(
        f"{vllm_server.base_url}/v1/chat/completions",
        headers=vllm_server.headers,
        json={
            "model": vllm_server.served_model_name,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4,
            "temperature": 0,
            "ignore_eos": True,  # random weights may pick EOS early; the test is about the server answering
        },
        timeout=60,
        trust_env=False,
    )
    assert reply.status_code == 200
    assert reply.json()["usage"]["completion_tokens"] == 4


@pytest.mark.slow
def test_real_server_keeps_the_key_out_of_its_command_and_log(vllm_server):
    server = vllm_server.server
    assert server.ready and server.pid
    assert SESSION_API_KEY not in " ".join(psutil.Process(server.pid).cmdline())
    assert SESSION_API_KEY not in server.launch_command()
    assert not any(SESSION_API_KEY in line for line in vllm_server.lines)
    assert any("Application startup complete" in line for line in server.log_tail)
