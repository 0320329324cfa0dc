"""``llm-workstation launch claude|codex|opencode [--model M] [-- ARGS…]``: a coding agent on the local server.

It reuses the server that answers at 127.0.0.1 on the settings' API port (``--port``), else starts the workstation's
API service in this process (as ``serve`` does: the library's models, their saved settings, 127.0.0.1 only) and
keeps it serving until the agent exits. The agent runs on this terminal with its environment pointed at the server
(app/services/agents/setup.py says how, per agent); its arguments go after ``--``. The model is ``--model``, else
the one the server has loaded, else the most recently added. The key is ``$LLMW_API_KEY``, else the settings'.

Exit codes: the agent's own (128 + N when signal N ended it); 2 the agent is not installed (the message gives the
install command), no model to offer, a port taken by another program, a key the server refuses; 1 another
failure; 130 interrupted before the agent started. Ctrl-C while the agent runs is the agent's (it gets it from the
terminal); SIGTERM ends the agent, then the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from app.cli.common import API_KEY_ENV, EXIT_BAD_INPUT, EXIT_INTERRUPTED, fail, fail_error
from app.core.errors import AppError

if TYPE_CHECKING:
    from app.services.agents.agents import Agent, Located
    from app.services.agents.launch import LaunchPlan
    from app.services.workstation import Workstation

VERBS = ("launch",)
AGENT_CHOICES = ("claude", "codex", "opencode")  # app.services.agents.agents.AGENT_IDS (kept import-free here)
OPTIONS = {"api_key": f"${API_KEY_ENV} or the Server page's key", "port": "--port", "model": "--model"}


@dataclass
class LaunchOptions:
    model: str | None = None
    port: int | None = None
    models_dir: list[str] = field(default_factory=list)
    keep_open: bool = False


def add_parser(verbs: argparse._SubParsersAction) -> None:
    launch = verbs.add_parser(
        "launch",
        help="run a coding agent (Claude Code, Codex, OpenCode) on the local API server",
        usage="llm-workstation launch {claude,codex,opencode} [--model M] [--port P] [--models-dir DIR] "
        "[--keep-open] [-- ARGS ...]",
        description="Run Claude Code, Codex or OpenCode with its environment pointed at the local API server: the "
        "one running on this machine at the API port, or one started for the agent's session. Claude Code speaks "
        "Anthropic Messages, Codex the Responses API, OpenCode Chat Completions. Nothing in the agent's own "
        "configuration files is changed.",
        epilog="Examples: llm-workstation launch claude · llm-workstation launch codex --model 'Gemma 3 270M' · "
        'llm-workstation launch claude -- -p "hi" --max-turns 1',
    )
    launch.add_argument("agent", choices=AGENT_CHOICES, help="the agent to run")
    _add_options(launch)
    launch.add_argument("agent_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="the agent's own arguments")


def _add_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--model", default=None, help="the model id to give it (default: the loaded model, else the newest)")
    add("--port", type=int, default=None, help="the server's port on 127.0.0.1 (default: the settings' API port)")
    add("--models-dir", action="append", default=[], metavar="DIR",
        help="when it starts the server: serve this folder's GGUFs too (repeatable)")  # fmt: skip
    add("--keep-open", action="store_true", help="after a failure, wait for Enter (a terminal window opened for it)")


class _Refused(Exception):
    pass


class _OwnOptions(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def split_arguments(args: argparse.Namespace) -> tuple[LaunchOptions, list[str]]:
    """This command's options and the agent's arguments. argparse hands everything after the agent's name to
    ``agent_args``: up to a ``--`` it is this command's options when they all parse as such, the rest the agent's."""
    options = LaunchOptions(args.model, args.port, list(args.models_dir), args.keep_open)
    rest = list(args.agent_args)
    head, tail = (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
    if not head:
        return options, tail
    parser = _OwnOptions(add_help=False)
    _add_options(parser)
    try:
        own = parser.parse_args(head)
    except _Refused:
        return options, rest  # not this command's: all of it is the agent's (argparse ate a leading --)
    merged = LaunchOptions(
        own.model or options.model, own.port if own.port is not None else options.port,
        options.models_dir + own.models_dir, own.keep_open or options.keep_open,
    )  # fmt: skip
    return merged, tail


def run(args: argparse.Namespace) -> int:
    options, extra = split_arguments(args)
    code = _run(args.agent, options, extra)
    if code and options.keep_open and sys.stdin.isatty():
        with contextlib.suppress(EOFError, KeyboardInterrupt):
            input(f"llm-workstation: exit code {code}. Press Enter to close.")
    return code


def _run(agent_id: str, options: LaunchOptions, extra: list[str]) -> int:
    from app.services.agents.agents import agent_by_id, locate, not_installed_message

    agent = agent_by_id(agent_id)
    located = locate(agent)
    if located is None:
        return fail(not_installed_message(agent), EXIT_BAD_INPUT)
    folders = [Path(d).expanduser() for d in options.models_dir]
    for folder in folders:
        if not folder.is_dir():
            return fail(f"{folder} is not a folder. Pass an existing folder with --models-dir.", EXIT_BAD_INPUT)
    if options.port is not None and not 0 <= options.port <= 65535:
        return fail(f"--port must be from 0 to 65535, not {options.port}.", EXIT_BAD_INPUT)
    try:
        return asyncio.run(_launch(agent, located, options, folders, extra))
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except AppError as exc:
        return fail_error(exc, OPTIONS)


async def _launch(agent: Agent, located: Located, options: LaunchOptions, folders: list[Path],
                  extra: list[str]) -> int:  # fmt: skip
    from app.services.agents.launch import choose_model, context_of, launch_plan, served_models, server_answers
    from app.services.agents.setup import Target
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    _log_quietly()  # the agent owns the terminal: the server's log lines would land in its screen
    workstation = Workstation.create(app_paths().ensure())
    try:
        port = workstation.settings.api_port if options.port is None else options.port
        key = os.environ.get(API_KEY_ENV) or workstation.settings.api_key.strip() or None
        url = f"http://127.0.0.1:{port}"
        if port and await server_answers(url):
            started = False
        else:
            url, started = await _serve(workstation, port, key, folders), True
        models = await served_models(url, key)
        model = choose_model(models, options.model, url)
        plan = launch_plan(agent, located, Target(url, model, key, context_of(models, model)), extra)
        how = "serving for it here until it exits" if started else "the server already running"
        print(f"llm-workstation: {agent.name} on {url} ({how}), model {model!r}.", file=sys.stderr, flush=True)
        code = await _run_agent(plan)
        if started:
            served = workstation.api.snapshot().requests
            print(f"llm-workstation: {agent.name} exited ({code}); {served} requests served.", file=sys.stderr)
        return code
    finally:
        await workstation.close()


async def _serve(workstation: Workstation, port: int, key: str | None, folders: list[Path]) -> str:
    """The workstation's API service in this process, on 127.0.0.1 (the settings' idle time; ``key`` if any)."""
    from app.services.api.service import config_from_settings

    if workstation.settings_problem:
        print(f"llm-workstation: {workstation.settings_problem}", file=sys.stderr)
    await asyncio.get_running_loop().run_in_executor(None, workstation.model_settings.load)
    workstation.api.also_serve(folders)
    config = replace(config_from_settings(workstation), host="127.0.0.1", port=port, api_key=key)
    return await workstation.api.start(config)


async def _run_agent(plan: LaunchPlan) -> int:
    """The agent on this terminal: Ctrl-C is its own (the terminal sends it to both), SIGTERM stops it."""
    from app.services.agents.launch import AgentProcess

    loop = asyncio.get_running_loop()
    process = AgentProcess(plan)
    stopping: list[asyncio.Task[None]] = []
    handlers = {signal.SIGINT: lambda: None, signal.SIGTERM: lambda: stopping.append(loop.create_task(process.stop()))}
    for number, handler in handlers.items():
        with contextlib.suppress(NotImplementedError):  # Windows' loops have no signal handlers
            loop.add_signal_handler(number, handler)
    try:
        return await process.run()
    finally:
        for number in handlers:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(number)
        for task in stopping:
            await task


def _log_quietly() -> None:
    """The app's log to its file beside the window's (not the terminal); uvicorn's lines nowhere."""
    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths

    install_logging("INFO", app_paths().ensure().cache_dir / "launch.log")
    logging.getLogger("uvicorn").addHandler(logging.NullHandler())
