"""Running an agent against a server: is one answering, which model to give the agent, the agent's process.

    if await server_answers(url):                      # GET /health: reuse it
        ...
    model = choose_model(await served_models(url, key), wanted)
    plan = launch_plan(agent, located, Target(url, model, key), extra_args)
    code = await AgentProcess(plan).run()              # the agent's exit code (128 + N after signal N)

The model, when none is asked for: the one the server has loaded (an entry of ``GET /v1/models`` marked loaded),
else the most recently added one (the largest ``created``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidInputError, NotFoundError, UnavailableError
from app.services.agents.agents import Agent, Located
from app.services.agents.setup import Target, agent_setup

HEALTH_TIMEOUT_S = 2.0
MODELS_TIMEOUT_S = 30.0
TERMINATE_GRACE_S = 10.0


async def server_answers(url: str) -> bool:
    """True when something at ``url`` answers ``GET /health`` with 200."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S) as client:
            return (await client.get(url.rstrip("/") + "/health")).status_code == 200
    except httpx.HTTPError:
        return False


async def served_models(url: str, key: str | None) -> list[dict[str, Any]]:
    """The entries of the server's ``GET /v1/models``. InvalidInputError when it refuses the key (setting
    ``api_key``), UnavailableError when it cannot be read."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=MODELS_TIMEOUT_S) as client:
            response = await client.get(url.rstrip("/") + "/v1/models", headers=headers)
    except httpx.HTTPError as exc:
        raise UnavailableError(f"The server at {url} did not list its models: {exc}") from None
    if response.status_code in (401, 403):
        raise InvalidInputError(
            f"The server at {url} refused the API key{'' if key else ' (none was sent)'}: give the key it asks for.",
            setting="api_key",
        )
    try:
        response.raise_for_status()
        data = response.json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise UnavailableError(f"The server at {url} gave no model list ({exc}).") from None
    return [entry for entry in data if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def choose_model(models: Sequence[Mapping[str, Any]], wanted: str | None, url: str) -> str:
    """``wanted`` when given; else the loaded model, else the most recently added (see the module docstring)."""
    if wanted:
        return wanted
    if not models:
        raise NotFoundError(
            f"The server at {url} has no model to offer: add a GGUF to the library (or download the starter "
            "model), or name a model.",
            setting="model",
        )
    loaded = [m for m in models if _is_loaded(m)]
    if loaded:
        return str(loaded[0]["id"])
    return str(max(models, key=lambda m: m.get("created") or 0)["id"])


def context_of(models: Sequence[Mapping[str, Any]], model: str) -> int | None:
    """The model's ``max_context_length`` as the server lists it (LM Studio's field), when it says."""
    found = next((m for m in models if m.get("id") == model), None)
    value = found.get("max_context_length") if found else None
    return value if isinstance(value, int) and value > 0 else None


def _is_loaded(entry: Mapping[str, Any]) -> bool:
    return entry.get("loaded") is True or entry.get("state") == "loaded" or entry.get("status") == "loaded"


@dataclass(frozen=True)
class LaunchPlan:
    """``argv`` starts the agent; ``env`` is its whole environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    target: Target


def launch_plan(
    agent: Agent, located: Located, target: Target, extra: Sequence[str] = (), base_env: Mapping[str, str] | None = None
) -> LaunchPlan:
    """The agent at ``located`` aimed at ``target``, with the user's ``extra`` arguments last (each one argv item)."""
    setup = agent_setup(agent, target)
    env = {**(os.environ if base_env is None else base_env), **setup.env}
    return LaunchPlan((*located.argv, *setup.args, *extra), env, target)


class AgentProcess:
    """The agent as a child on this terminal (stdin, stdout and stderr inherited)."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self._process: asyncio.subprocess.Process | None = None

    async def run(self) -> int:
        """Start the agent and wait for it; its exit code, or 128 + N when signal N ended it."""
        try:
            self._process = await asyncio.create_subprocess_exec(*self.plan.argv, env=dict(self.plan.env))
        except OSError as exc:
            raise UnavailableError(f"{self.plan.argv[0]} could not start: {exc}") from None
        code = await self._process.wait()
        return 128 - code if code < 0 else code

    async def stop(self) -> None:
        """Ask the agent to end (SIGTERM), and kill it when it has not within ``TERMINATE_GRACE_S``."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), TERMINATE_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
