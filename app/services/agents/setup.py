"""What points each agent at a server: environment variables and leading arguments, never a shell string.

- Claude Code reads ``ANTHROPIC_BASE_URL`` (the server's root: it adds ``/v1/messages``), a token sent as
  ``Authorization: Bearer`` (``ANTHROPIC_AUTH_TOKEN``; ``ANTHROPIC_API_KEY`` is emptied, so a real Anthropic key in
  the user's shell is neither sent here nor offered for approval), the model for every tier it uses (main, Opus,
  Sonnet, Haiku, sub-agents, and 1.x's small/fast model), no non-essential model calls (a local engine answers one
  request at a time: a side call would hold up the turn), no attribution line at the head of the system prompt
  (the rest of the prompt is the same turn after turn; that line can change and spoil its reuse), and the
  opt-outs of telemetry, error reports and other traffic to Anthropic's services.
- Codex speaks the Responses API only: a model provider given with ``-c`` overrides (``base_url`` ending in /v1,
  ``wire_api = "responses"``, ``env_key`` naming the variable that holds the key), selected with
  ``-c model_provider=…``, and the model with ``-m``. Nothing is written to ``~/.codex``.
- OpenCode merges ``OPENCODE_CONFIG_CONTENT`` (JSON) over its config files: a provider through
  ``@ai-sdk/openai-compatible`` with ``options.baseURL`` (…/v1), ``options.apiKey`` and the model under
  ``models``; ``model`` and ``small_model`` select it.

A server without a key takes any token: ``PLACEHOLDER_KEY`` is sent then."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from app.services.agents.agents import CLAUDE, CODEX, OPENCODE, Agent

PLACEHOLDER_KEY = "llm-workstation"
PROVIDER_ID = "llmw"
PROVIDER_NAME = "LLM Workstation"
CODEX_KEY_ENV = "LLMW_AGENT_KEY"


@dataclass(frozen=True)
class Target:
    """The server an agent talks to: ``url`` is its root (``http://127.0.0.1:8417``), ``key`` the one it asks
    for (None: none)."""

    url: str
    model: str
    key: str | None = None
    context: int | None = None  # the most context the model can have (its trained context), when known

    @property
    def token(self) -> str:
        return self.key or PLACEHOLDER_KEY

    @property
    def openai_base(self) -> str:
        return self.url.rstrip("/") + "/v1"


@dataclass(frozen=True)
class AgentSetup:
    """``env``: variables set for the agent (over the inherited ones); ``args``: before the user's arguments."""

    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()


def claude_setup(target: Target) -> AgentSetup:
    model = target.model
    env = {
        "ANTHROPIC_BASE_URL": target.url.rstrip("/"),
        "ANTHROPIC_AUTH_TOKEN": target.token,
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",  # no side requests (titles, flavour text) queued before the turn
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",  # no billing line heading the system prompt: its prefix stays reusable
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return AgentSetup(env)


def codex_setup(target: Target) -> AgentSetup:
    provider = f"model_providers.{PROVIDER_ID}"
    overrides = {
        "model_provider": PROVIDER_ID,
        f"{provider}.name": PROVIDER_NAME,
        f"{provider}.base_url": target.openai_base,
        f"{provider}.wire_api": "responses",
        f"{provider}.env_key": CODEX_KEY_ENV,
    }
    args: list[str] = []
    for key, value in overrides.items():
        args += ["-c", f"{key}={toml_string(value)}"]
    if target.context:  # else Codex assumes 272,000 tokens for a model it does not know, and never compacts in time
        args += ["-c", f"model_context_window={int(target.context)}"]
    return AgentSetup({CODEX_KEY_ENV: target.token}, (*args, "-m", target.model))


def opencode_setup(target: Target) -> AgentSetup:
    selected = f"{PROVIDER_ID}/{target.model}"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER_NAME,
                "options": {"baseURL": target.openai_base, "apiKey": target.token},
                "models": {target.model: {"name": target.model}},
            }
        },
        "model": selected,
        "small_model": selected,
    }
    return AgentSetup({"OPENCODE_CONFIG_CONTENT": json.dumps(config, ensure_ascii=False)})


SETUPS: Mapping[str, Callable[[Target], AgentSetup]] = {
    CLAUDE.id: claude_setup,
    CODEX.id: codex_setup,
    OPENCODE.id: opencode_setup,
}


def agent_setup(agent: Agent, target: Target) -> AgentSetup:
    return SETUPS[agent.id](target)


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (a JSON string is one, once DEL is escaped too)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def shell_snippet(agent: Agent, target: Target) -> str:
    """The agent on ``target`` as lines that paste into bash or zsh: each variable set for that one command
    (``NAME=value … command``, nothing exported into the shell), every value quoted."""
    setup = agent_setup(agent, target)
    lines = [f"{name}={shlex.quote(value)}" for name, value in setup.env.items()]
    command = [agent.executable]
    args = list(setup.args)
    while args:  # one option (with its value) per line
        take = 2 if args[0].startswith("-") and len(args) > 1 else 1
        command.append("  " + " ".join(shlex.quote(a) for a in args[:take]))
        args = args[take:]
    return " \\\n".join([*lines, *command]) + "\n"
