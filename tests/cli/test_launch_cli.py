"""``llm-workstation launch`` as a real process, with stand-in agents (tests/support/fake_agents.py: real
executables on PATH that make the request the real agent makes) against the real server on a tiny GGUF: each
agent gets the environment and arguments that aim it at the server and its request is answered; the agent's own
arguments go after ``--``; its exit code comes back; a missing agent exits 2 with its install command; a running
server is reused (and keeps running), else one is started on the settings' port and stopped with the agent; a key
the server refuses, and no model to offer, exit 2 with the reason; Ctrl-C is the agent's, SIGTERM ends it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from app.core.settings import Settings, save_settings
from app.services.paths import app_paths
from tests.support.fake_agents import install_fake_agent, read_record
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(180)

MODEL = "Tiny Launch Model"


@pytest.fixture
def models(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_gguf(folder / "tiny.gguf", name=MODEL)
    return folder


@pytest.fixture
def bin_dir(tmp_path):
    return tmp_path / "bin"


def _env(tmp_path, bin_dir, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMW_API_KEY", "npm_config_cache", "NPM_CONFIG_CACHE")}
    env.update(PATH=str(bin_dir), HOME=str(tmp_path / "home"), FAKE_AGENT_RECORD=str(tmp_path / "record.json"),
               HF_HUB_CACHE=str(tmp_path / "hub"), OLLAMA_MODELS=str(tmp_path / "ollama"),
               OLLAMA_HOST="127.0.0.1:9")  # fmt: skip
    env.update(extra)
    return env


def _launch(*args: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "app", "launch", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=150, **kwargs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_claude_is_aimed_at_a_server_started_for_it_and_its_exit_code_comes_back(tmp_path, bin_dir, models):
    install_fake_agent(bin_dir, "claude")
    env = _env(tmp_path, bin_dir, FAKE_AGENT_EXIT="7", LLMW_API_KEY="k-launch-secret")
    done = _launch("claude", "--port", "0", "--models-dir", str(models), "--", "-p", "hi there", "--max-turns", "1",
                   env=env)  # fmt: skip
    assert done.returncode == 7, done.stderr
    record = read_record(tmp_path / "record.json")
    assert record["argv"] == ["-p", "hi there", "--max-turns", "1"]  # each one argv item, as given
    seen = record["env"]
    assert seen["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:") and not seen["ANTHROPIC_BASE_URL"].endswith("/")
    assert seen["ANTHROPIC_AUTH_TOKEN"] == "k-launch-secret" and seen["ANTHROPIC_API_KEY"] == ""
    for name in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "CLAUDE_CODE_SUBAGENT_MODEL",
    ):
        assert seen[name] == MODEL, name  # fmt: skip
    assert seen["DISABLE_TELEMETRY"] == seen["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert record["status"] == 200, record  # the server it started answered its Messages request, key and all
    assert record["reply"]["type"] == "message" and record["reply"]["model"] == MODEL
    assert "serving for it here" in done.stderr and "k-launch-secret" not in done.stderr + done.stdout


def test_codex_gets_a_responses_provider_through_c_overrides(tmp_path, bin_dir, models):
    import tomllib

    install_fake_agent(bin_dir, "codex")
    done = _launch("codex", "--port", "0", "--models-dir", str(models), "--model", MODEL, "--", "exec", "hi",
                   env=_env(tmp_path, bin_dir, LLMW_API_KEY="k-codex"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = read_record(tmp_path / "record.json")
    args = record["argv"]
    assert args[-2:] == ["exec", "hi"] and args[args.index("-m") + 1] == MODEL
    config = record["reply"]["config"]
    assert config["model_provider"] == "llmw" and config["model_providers.llmw.wire_api"] == "responses"
    assert config["model_providers.llmw.base_url"].endswith("/v1")
    assert record["env"][config["model_providers.llmw.env_key"]] == "k-codex"
    assert record["status"] == 200  # the provider's base URL and key reach the server
    assert [m["id"] for m in record["reply"]["listed"]["data"]] == [MODEL]
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "-c"]
    assert all(tomllib.loads("v = " + o.partition("=")[2]) for o in overrides)  # every value is valid TOML


def test_opencode_gets_an_openai_compatible_provider_in_its_inline_config(tmp_path, bin_dir, models):
    import json

    install_fake_agent(bin_dir, "opencode")
    done = _launch("opencode", "--port", "0", "--models-dir", str(models), env=_env(tmp_path, bin_dir))
    assert done.returncode == 0, done.stderr
    record = read_record(tmp_path / "record.json")
    config = json.loads(record["env"]["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["llmw"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["options"]["baseURL"].endswith("/v1")
    assert config["model"] == f"llmw/{MODEL}" and MODEL in provider["models"] and record["argv"] == []
    assert record["status"] == 200 and record["reply"]["object"] == "chat.completion"


@pytest.mark.parametrize(
    ("agent", "install"),
    [("claude", "npm install -g @anthropic-ai/claude-code"), ("codex", "npm install -g @openai/codex"),
     ("opencode", "npm install -g opencode-ai")],
)  # fmt: skip
def test_an_agent_that_is_not_installed_exits_2_with_its_install_command(tmp_path, bin_dir, agent, install):
    bin_dir.mkdir()  # no agent, no npx, no npm on this PATH
    port = _free_port()
    done = _launch(agent, "--port", str(port), env=_env(tmp_path, bin_dir))
    assert done.returncode == 2
    assert install in done.stderr and "not installed" in done.stderr and "Node.js" in done.stderr
    with pytest.raises(httpx.ConnectError):  # it failed before starting a server
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_a_running_server_is_reused_and_keeps_running(tmp_path, bin_dir, models):
    install_fake_agent(bin_dir, "claude")
    env = _env(tmp_path, bin_dir, LLMW_API_KEY="k-shared")
    serve = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", "0", "--models-dir", str(models)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = serve.stdout.readline().strip()
        port = url.rsplit(":", 1)[1]
        done = _launch("claude", "--port", port, env=env)
        assert done.returncode == 0, done.stderr
        assert "already running" in done.stderr
        record = read_record(tmp_path / "record.json")
        assert record["env"]["ANTHROPIC_BASE_URL"] == url and record["status"] == 200
        assert httpx.get(url + "/health", timeout=10).status_code == 200  # still serving after the agent left
        refused = _launch("claude", "--port", port, env={**env, "LLMW_API_KEY": "k-wrong"})
        assert refused.returncode == 2 and "API key" in refused.stderr, refused.stderr
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=60)


def test_a_server_started_on_the_settings_port_stops_with_the_agent(tmp_path, bin_dir, models):
    install_fake_agent(bin_dir, "claude")
    port = _free_port()
    save_settings(Settings(api_port=port), app_paths().ensure().settings_file)
    done = _launch("claude", "--models-dir", str(models), env=_env(tmp_path, bin_dir))
    assert done.returncode == 0, done.stderr
    assert read_record(tmp_path / "record.json")["env"]["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_a_port_another_program_holds_exits_2_naming_the_option(tmp_path, bin_dir):
    install_fake_agent(bin_dir, "claude")
    taken = socket.create_server(("127.0.0.1", 0))  # listens, never answers HTTP
    try:
        done = _launch("claude", "--port", str(taken.getsockname()[1]), env=_env(tmp_path, bin_dir))
    finally:
        taken.close()
    assert done.returncode == 2 and "already in use" in done.stderr and "(--port)" in done.stderr, done.stderr
    assert not (tmp_path / "record.json").exists()


def test_no_model_to_offer_exits_2_with_the_reason(tmp_path, bin_dir):
    install_fake_agent(bin_dir, "claude")
    done = _launch("claude", "--port", "0", env=_env(tmp_path, bin_dir))
    assert done.returncode == 2 and "no model to offer" in done.stderr, done.stderr
    assert not (tmp_path / "record.json").exists()  # the agent never started


def test_a_folder_that_does_not_exist_exits_2(tmp_path, bin_dir):
    install_fake_agent(bin_dir, "claude")
    done = _launch("claude", "--models-dir", str(tmp_path / "nowhere"), env=_env(tmp_path, bin_dir))
    assert done.returncode == 2 and "is not a folder" in done.stderr


def test_ctrl_c_is_the_agents_and_sigterm_ends_it(tmp_path, bin_dir, models):
    install_fake_agent(bin_dir, "claude")
    env = _env(tmp_path, bin_dir, FAKE_AGENT_SLEEP="120")
    command = [sys.executable, "-m", "app", "launch", "claude", "--port", "0", "--models-dir", str(models)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until_sync(lambda: (tmp_path / "record.json").exists(), 90)
        proc.send_signal(signal.SIGINT)  # the terminal's Ctrl-C goes to the agent; launch itself carries on
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err  # the agent was ended by SIGTERM, its code passed on


def until_sync(condition, timeout_s: float) -> None:
    import asyncio

    asyncio.run(until(condition, timeout_s))


def test_the_verb_is_listed_with_its_agents():
    done = subprocess.run([sys.executable, "-m", "app", "launch", "--help"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and all(name in done.stdout for name in ("claude", "codex", "opencode", "-- ARGS"))


@pytest.mark.parametrize(
    ("argv", "model", "agent_args"),
    [
        (["launch", "claude"], None, []),
        (["launch", "claude", "--model", "M x", "--", "-p", "hi", "--max-turns", "1"], "M x",
         ["-p", "hi", "--max-turns", "1"]),
        (["launch", "claude", "--", "-p", "hi"], None, ["-p", "hi"]),
        (["launch", "--model", "M", "codex", "--", "exec", "--", "x"], "M", ["exec", "--", "x"]),
        (["launch", "claude", "--", "-p", "--", "x"], None, ["-p", "--", "x"]),
        (["launch", "opencode", "--model", "M"], "M", []),
    ],
)  # fmt: skip
def test_this_commands_options_and_the_agents_arguments_are_told_apart(argv, model, agent_args):
    from app.cli import build_parser
    from app.cli.launch import split_arguments

    options, extra = split_arguments(build_parser().parse_args(argv))
    assert (options.model, extra) == (model, agent_args)
