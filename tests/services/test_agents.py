"""The coding-agent service (app/services/agents): how each agent is found (PATH, its installer's folder, npx with
the package in npm's cache) and what it is told when it is not; the environment and arguments that aim each agent
at a server, valid for any model name and key (TOML for Codex, JSON for OpenCode); the shell snippet, pasted into
bash, runs the agent exactly as ``launch`` does; the model chosen when none is named; the terminal emulator found
and the command run in it as argv."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from app.core.errors import NotFoundError, UnavailableError
from app.services.agents.agents import AGENT_IDS, AGENTS, CLAUDE, CODEX, OPENCODE, locate, not_installed_message
from app.services.agents.launch import choose_model, context_of, launch_plan
from app.services.agents.setup import PLACEHOLDER_KEY, Target, agent_setup, shell_snippet, toml_string
from app.services.agents.terminal import NO_TERMINAL, find_terminal, open_in_terminal
from tests.support.fake_agents import install_fake_agent, install_fake_terminal, read_record
from tests.support.waiting import until

ODD_MODEL = 'Gemma 3 "270M" it\'s $HOME \\ café \x7f 🙂'
ODD_KEY = "sk-it's$key"


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


# --- finding the agents ---------------------------------------------------------------------------------------
def test_an_agent_on_path_is_found_there(tmp_path):
    found = _executable(tmp_path / "bin" / "codex")
    located = locate(CODEX, {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)})
    assert located is not None and located.argv == (str(found),)


def test_claude_is_found_in_its_installers_folder_off_path(tmp_path):
    found = _executable(tmp_path / "home" / ".local" / "bin" / "claude")
    located = locate(CLAUDE, {"PATH": str(tmp_path / "empty"), "HOME": str(tmp_path / "home")})
    assert located is not None and located.argv == (str(found),)
    assert locate(CODEX, {"PATH": str(tmp_path / "empty"), "HOME": str(tmp_path / "home")}) is None


def test_an_agent_in_npms_npx_cache_runs_through_npx_offline(tmp_path):
    npx = _executable(tmp_path / "bin" / "npx")
    package = tmp_path / "cache" / "_npx" / "0123abcd" / "node_modules" / "@openai" / "codex"
    package.mkdir(parents=True)
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path / "home"), "npm_config_cache": str(tmp_path / "cache")}
    assert locate(CODEX, env) is None  # a folder is not a package
    (package / "package.json").write_text("{}")
    located = locate(CODEX, env)
    assert located is not None and located.argv == (str(npx), "--offline", "-y", "@openai/codex")
    assert locate(CLAUDE, env) is None  # only the package that is there


def test_the_not_installed_message_names_the_install_command_and_node_when_npm_is_missing(tmp_path):
    for agent in AGENTS:
        message = not_installed_message(agent, {"PATH": str(tmp_path)})
        assert agent.install_command in message and "Node.js" in message and agent.name in message
    _executable(tmp_path / "npm")
    assert "Node.js" not in not_installed_message(CLAUDE, {"PATH": str(tmp_path)})
    assert [a.install_command for a in AGENTS] == [
        "npm install -g @anthropic-ai/claude-code", "npm install -g @openai/codex", "npm install -g opencode-ai",
    ]  # fmt: skip


def test_the_cli_offers_the_agents_of_the_table():
    from app.cli.launch import AGENT_CHOICES

    assert AGENT_CHOICES == AGENT_IDS == ("claude", "codex", "opencode")


# --- aiming them at a server ----------------------------------------------------------------------------------
def test_claude_is_told_the_base_url_the_token_and_the_model_for_every_tier():
    env = agent_setup(CLAUDE, Target("http://127.0.0.1:8417/", ODD_MODEL, None)).env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8417" and env["ANTHROPIC_AUTH_TOKEN"] == PLACEHOLDER_KEY
    assert env["ANTHROPIC_API_KEY"] == ""  # a real Anthropic key in the shell is neither sent nor offered
    assert {env[k] for k in env if k.endswith("_MODEL")} == {ODD_MODEL}
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0" and env["DISABLE_NON_ESSENTIAL_MODEL_CALLS"] == "1"
    assert agent_setup(CLAUDE, Target("http://h:1", "m", ODD_KEY)).env["ANTHROPIC_AUTH_TOKEN"] == ODD_KEY


def test_codex_overrides_are_toml_for_any_model_name_and_point_at_v1():
    setup = agent_setup(CODEX, Target("http://127.0.0.1:8417", ODD_MODEL, ODD_KEY))
    args = list(setup.args)
    values = {}
    for flag, item in itertools.pairwise(args):
        if flag == "-c":
            key, _, raw = item.partition("=")
            values[key] = tomllib.loads(f"v = {raw}")["v"]
    assert values["model_provider"] == "llmw" and values["model_providers.llmw.wire_api"] == "responses"
    assert values["model_providers.llmw.base_url"] == "http://127.0.0.1:8417/v1"
    assert setup.env[values["model_providers.llmw.env_key"]] == ODD_KEY
    assert args[-2:] == ["-m", ODD_MODEL]
    assert tomllib.loads(f"v = {toml_string(ODD_MODEL)}")["v"] == ODD_MODEL
    assert "model_context_window" not in values  # unknown: Codex's own default


def test_codex_is_told_the_models_context_window_the_server_lists():
    listed = [{"id": "m", "max_context_length": 32768}, {"id": "other"}]
    assert context_of(listed, "m") == 32768 and context_of(listed, "other") is None and context_of([], "m") is None
    args = agent_setup(CODEX, Target("http://127.0.0.1:8417", "m", None, context_of(listed, "m"))).args
    assert "model_context_window=32768" in args


def test_opencode_config_is_json_with_an_openai_compatible_provider():
    env = agent_setup(OPENCODE, Target("http://127.0.0.1:8417", ODD_MODEL, None)).env
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["llmw"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["options"] == {
        "baseURL": "http://127.0.0.1:8417/v1", "apiKey": PLACEHOLDER_KEY,
    }  # fmt: skip
    assert list(provider["models"]) == [ODD_MODEL] and config["model"] == config["small_model"] == f"llmw/{ODD_MODEL}"


@pytest.mark.parametrize("agent", AGENTS, ids=lambda a: a.id)
def test_the_snippet_pasted_into_bash_runs_the_agent_as_launch_does(tmp_path, agent):
    bin_dir = tmp_path / "bin"
    install_fake_agent(bin_dir, agent.executable)
    target = Target("http://127.0.0.1:9", ODD_MODEL, ODD_KEY)  # nothing listens there: only what it was told counts
    record = tmp_path / "record.json"
    base = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "FAKE_AGENT_RECORD": str(record)}
    subprocess.run(["bash", "-c", shell_snippet(agent, target)], env=base, check=True, timeout=60)
    pasted = read_record(record)
    plan = launch_plan(agent, locate(agent, base), target, base_env=base)
    record.unlink()
    subprocess.run(plan.argv, env=dict(plan.env), check=True, timeout=60)
    launched = read_record(record)
    assert pasted["argv"] == launched["argv"] and pasted["env"] == launched["env"]
    assert set(agent_setup(agent, target).env) <= set(pasted["env"])


# --- the model ------------------------------------------------------------------------------------------------
def test_the_model_is_the_one_named_else_the_loaded_one_else_the_newest():
    listed = [{"id": "old", "created": 1, "state": "not-loaded"}, {"id": "loaded", "created": 2, "state": "loaded"},
              {"id": "new", "created": 3, "state": "not-loaded"}]  # fmt: skip
    url = "http://127.0.0.1:8417"
    assert choose_model(listed, "asked", url) == "asked"
    assert choose_model(listed, None, url) == "loaded"
    assert choose_model([m for m in listed if m["id"] != "loaded"], None, url) == "new"
    with pytest.raises(NotFoundError) as raised:
        choose_model([], None, url)
    assert raised.value.setting == "model" and "no model to offer" in str(raised.value)


# --- the terminal ---------------------------------------------------------------------------------------------
def test_the_terminal_is_terminal_else_the_first_emulator_on_path(tmp_path):
    bin_dir = tmp_path / "bin"
    for name in ("xterm", "gnome-terminal", "my-term"):
        _executable(bin_dir / name)
    env = {"PATH": str(bin_dir)}
    assert find_terminal(env).argv(["claude", "-p"]) == [str(bin_dir / "gnome-terminal"), "--", "claude", "-p"]
    assert find_terminal({**env, "TERMINAL": "xterm"}).argv(["a"]) == [str(bin_dir / "xterm"), "-e", "a"]
    assert find_terminal({**env, "TERMINAL": "my-term"}).argv(["a"]) == [str(bin_dir / "my-term"), "-e", "a"]
    assert find_terminal({"PATH": str(tmp_path / "empty")}) is None


def test_open_in_terminal_runs_the_command_as_argv_or_says_to_copy_it(qloop_free_loop, tmp_path):
    bin_dir = tmp_path / "bin"
    install_fake_terminal(bin_dir)
    done = tmp_path / "ran"
    env = {"PATH": str(bin_dir), "FAKE_TERMINAL_RECORD": str(tmp_path / "terminal.json")}
    command = ["/bin/sh", "-c", 'printf "%s" "$1" > "$2"', "sh", "it's $HOME", str(done)]
    argv = open_in_terminal(command, env)
    assert argv == [str(bin_dir / "x-terminal-emulator"), "-e", *command]
    qloop_free_loop.run_until_complete(until(lambda: done.exists() and done.read_text() == "it's $HOME", 30))
    with pytest.raises(UnavailableError) as raised:
        open_in_terminal(["true"], {"PATH": str(tmp_path / "empty")})
    assert str(raised.value) == NO_TERMINAL and "copy the command" in NO_TERMINAL


@pytest.fixture
def qloop_free_loop():
    import asyncio

    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
