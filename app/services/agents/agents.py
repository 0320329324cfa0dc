"""The coding agents the app launches, and how each is found on this machine.

An agent is found, in this order: its executable on ``PATH``; the folder its own installer writes to (Claude Code's
``~/.local/bin`` and ``~/.claude/local``, OpenCode's ``~/.opencode/bin``), which a shell started before the install
does not have on ``PATH`` yet; ``npx --offline -y PACKAGE`` when ``npx`` is on ``PATH`` and npm's npx cache already
holds the package (it runs without a download, so it works on a machine with no network). Otherwise it is not
installed, and the message names the npm command that installs it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Agent:
    """``wire``: the API it speaks to the server; ``own_dirs``: its installer's folders, relative to the home."""

    id: str
    name: str
    executable: str
    npm_package: str
    wire: str
    own_dirs: tuple[str, ...] = ()

    @property
    def install_command(self) -> str:
        return f"npm install -g {self.npm_package}"


CLAUDE = Agent("claude", "Claude Code", "claude", "@anthropic-ai/claude-code", "Anthropic Messages",
               (".local/bin", ".claude/local"))  # fmt: skip
CODEX = Agent("codex", "Codex", "codex", "@openai/codex", "OpenAI Responses")
OPENCODE = Agent("opencode", "OpenCode", "opencode", "opencode-ai", "OpenAI Chat Completions", (".opencode/bin",))
AGENTS = (CLAUDE, CODEX, OPENCODE)
AGENT_IDS = tuple(a.id for a in AGENTS)


def agent_by_id(agent_id: str) -> Agent:
    """The agent named ``agent_id`` (one of ``AGENT_IDS``); KeyError otherwise."""
    for agent in AGENTS:
        if agent.id == agent_id:
            return agent
    raise KeyError(agent_id)


@dataclass(frozen=True)
class Located:
    """``argv``: what starts the agent (its arguments follow); ``where``: how it was found, for a person."""

    argv: tuple[str, ...]
    where: str


def locate(agent: Agent, env: Mapping[str, str] | None = None) -> Located | None:
    """Where ``agent`` is installed (see the module docstring), or None; ``env`` stands for ``os.environ``."""
    env = os.environ if env is None else env
    found = shutil.which(agent.executable, path=env.get("PATH", os.defpath))
    if found:
        return Located((found,), found)
    home = env.get("HOME") or env.get("USERPROFILE") or ""
    for folder in agent.own_dirs if home else ():
        candidate = Path(home, folder, agent.executable)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Located((str(candidate),), str(candidate))
    npx = shutil.which("npx", path=env.get("PATH", os.defpath))
    if npx and _in_npx_cache(agent.npm_package, env):
        return Located((npx, "--offline", "-y", agent.npm_package), "through npx, from npm's cache")
    return None


def not_installed_message(agent: Agent, env: Mapping[str, str] | None = None) -> str:
    """What to do when ``agent`` is not installed: the install command (and Node.js first, when npm is missing)."""
    env = os.environ if env is None else env
    npm = shutil.which("npm", path=env.get("PATH", os.defpath))
    first = "" if npm else " (npm comes with Node.js: install Node.js first)"
    return (
        f"{agent.name} is not installed: no `{agent.executable}` on PATH. Install it with `{agent.install_command}`"
        f"{first}, then try again."
    )


def npm_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """npm's cache folder: ``$npm_config_cache``, else ``~/.npm`` (None without a home)."""
    env = os.environ if env is None else env
    cache = env.get("npm_config_cache") or env.get("NPM_CONFIG_CACHE")
    if cache:
        return Path(cache)
    home = env.get("HOME") or env.get("USERPROFILE")
    return Path(home, ".npm") if home else None


def _in_npx_cache(package: str, env: Mapping[str, str]) -> bool:
    cache = npm_cache_dir(env)
    npx_dir = cache / "_npx" if cache is not None else None
    if npx_dir is None or not npx_dir.is_dir():
        return False
    return any((entry / "node_modules" / package / "package.json").is_file() for entry in npx_dir.iterdir())
