"""``llm-workstation ollama list|ps|pull|rm|create``: the local Ollama server from the command line.

Exit codes: 0 done, 1 a runtime failure (Ollama not running, a pull or create that failed), 2 bad input (a
Modelfile Ollama would refuse, with Ollama's own text; an unreadable file; an unusable ``--host``). Every
failure is one line on stderr, never a traceback. Progress goes to stderr: one line rewritten in place on a
terminal, one line per new step otherwise. The Ollama libraries are imported only when a verb runs, so the
window's start-up does not pay for them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from app.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, fail, fail_error
from app.core.errors import ErrorKind
from app.core.modelfile.parser import Modelfile, ModelfileError, parse_modelfile, read_modelfile
from app.core.units import format_bytes, relative_time
from app.core.user_files import UserFileError

if TYPE_CHECKING:
    from app.services.ollama.client import OllamaService

HOST_HELP = "the Ollama server (default: OLLAMA_HOST, else http://127.0.0.1:11434)"
# As Ollama's own command: a model Ollama does not have is a failed pull or rm (1), not bad input.
EXIT_CODES = {ErrorKind.NOT_FOUND: EXIT_FAILED}


VERBS = ("ollama",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    ollama = verbs.add_parser("ollama", help="list, pull, delete and create models in a local Ollama server")
    ollama.add_argument("--host", metavar="URL", default=None, help=HOST_HELP)
    host = argparse.ArgumentParser(add_help=False)  # --host also after the action: `ollama list --host URL`
    host.add_argument("--host", metavar="URL", default=argparse.SUPPRESS, help=HOST_HELP)
    actions = ollama.add_subparsers(dest="ollama_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[host], help="the models Ollama has installed")
    listing.add_argument("--json", action="store_true", help="a JSON list")
    ps = actions.add_parser("ps", parents=[host], help="the models Ollama holds in memory, and where")
    ps.add_argument("--json", action="store_true", help="a JSON list")
    pull = actions.add_parser("pull", parents=[host], help="download a model from the Ollama library")
    pull.add_argument("name")
    rm = actions.add_parser("rm", parents=[host], help="delete models from Ollama")
    rm.add_argument("names", nargs="+", metavar="NAME")
    create = actions.add_parser("create", parents=[host], help="create a model from a Modelfile, as `ollama create`")
    create.add_argument("name")
    create.add_argument("-f", "--file", default="Modelfile", metavar="MODELFILE", help="default: ./Modelfile")
    create.add_argument("-q", "--quantize", default=None, help="quantize the new model (e.g. q4_K_M)")


def run(args: argparse.Namespace) -> int:
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "list": lambda a: _with_ollama(a, lambda s: _list(s, a.json)),
        "ps": lambda a: _with_ollama(a, lambda s: _ps(s, a.json)),
        "pull": lambda a: _with_ollama(a, lambda s: _pull(s, a.name)),
        "rm": lambda a: _with_ollama(a, lambda s: _rm(s, a.names)),
        "create": _create,
    }
    try:
        return handlers[args.ollama_action](args)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return fail("interrupted", EXIT_INTERRUPTED)


def _with_ollama(args: argparse.Namespace, work: Callable[[OllamaService], Awaitable[int]]) -> int:
    """Resolve the host, check that Ollama answers (calmly, once), then do the work; OllamaError is one line."""
    from app.backends.ollama import resolve_host
    from app.services.ollama.client import OllamaError, OllamaService

    try:
        host = resolve_host(args.host)
    except ValueError as exc:
        return fail_error(exc)

    async def session() -> int:
        async with OllamaService(host) as service:
            status = await service.status()
            if not status.running:
                return fail(status.reason)
            try:
                return await work(service)
            except OllamaError as exc:
                return fail_error(exc, overrides=EXIT_CODES)

    return asyncio.run(session())


# --- list, ps, rm ---------------------------------------------------------------------------------------------
async def _list(service: OllamaService, as_json: bool) -> int:
    models = await service.list_models()
    if as_json:
        print(json.dumps([asdict(m) for m in models], indent=2))
        return 0
    rows = [["NAME", "ID", "SIZE", "PARAMETERS", "QUANTIZATION", "MODIFIED"]]
    for m in models:
        modified = relative_time(m.modified_at)
        rows.append([m.name, m.digest[:12], format_bytes(m.size), m.parameter_size, m.quantization_level, modified])
    _print_columns(rows)
    return 0


async def _ps(service: OllamaService, as_json: bool) -> int:
    models = await service.running_models()
    if as_json:
        print(json.dumps([{**asdict(m), "vram_fraction": round(m.vram_fraction, 4)} for m in models], indent=2))
        return 0
    rows = [["NAME", "SIZE", "VRAM", "PROCESSOR", "CONTEXT", "UNTIL"]]
    for m in models:
        context = str(m.context_length or "")
        rows.append(
            [
                m.name,
                format_bytes(m.size),
                format_bytes(m.size_vram),
                processor(m.vram_fraction),
                context,
                relative_time(m.expires_at),
            ]
        )
    _print_columns(rows)
    return 0


async def _rm(service: OllamaService, names: list[str]) -> int:
    from app.services.ollama.client import OllamaError

    code = 0
    for name in names:
        try:
            await service.delete(name)
        except OllamaError as exc:
            code = fail_error(exc, overrides=EXIT_CODES)
            continue
        print(f"deleted '{name}'")
    return code


# --- pull, create ---------------------------------------------------------------------------------------------
async def _pull(service: OllamaService, name: str) -> int:
    progress = Progress()
    try:
        # sizes only on the download lines: the totals PullProgress keeps are the layers seen so far
        await service.pull(name, lambda p: progress.show(p.status, p.completed, p.total if p.digest else 0))
    finally:
        progress.end()
    return 0


def _create(args: argparse.Namespace) -> int:
    try:
        data = read_modelfile(args.file)  # a FIFO, a device or a file over 1 MiB is refused before reading
    except UserFileError as exc:
        return fail_error(exc)
    except OSError as exc:
        return fail(f"cannot read {args.file}: {exc.strerror or exc}", EXIT_BAD_INPUT)
    try:
        modelfile = parse_modelfile(data)
    except ModelfileError as exc:
        print(str(exc), file=sys.stderr)  # Ollama's own text, as `modelfile parse` prints it
        return EXIT_BAD_INPUT
    folder = Path(os.path.abspath(args.file)).parent  # relative paths start here, as in `ollama create`
    return _with_ollama(args, lambda s: _create_in(s, args.name, modelfile, folder, args.quantize))


async def _create_in(
    service: OllamaService, name: str, modelfile: Modelfile, folder: Path, quantize: str | None
) -> int:
    from app.services.ollama.create import CreatePlanError, create_model, plan_create

    try:
        plan = await plan_create(modelfile, folder)  # hashes the files in a worker thread
    except CreatePlanError as exc:
        return fail_error(exc, overrides=EXIT_CODES)
    for warning in plan.warnings:
        print(warning, file=sys.stderr)
    progress = Progress()
    try:
        await create_model(
            service, name, plan, lambda p: progress.show(p.status, p.completed, p.total), quantize=quantize
        )
    finally:
        progress.end()
    return 0


class Progress:
    """Progress on stderr: on a terminal one line rewritten in place; otherwise one line per new step."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.last = ""
        self.width = 0

    def show(self, status: str, completed: int = 0, total: int = 0) -> None:
        sizes = f" {100 * completed // total:3d}% {format_bytes(completed)}/{format_bytes(total)}" if total else ""
        if self.tty:
            line = f"{status}{sizes}"
            if status != self.last and self.width:
                self.stream.write("\n")
                self.width = 0
            self.stream.write("\r" + line + " " * max(0, self.width - len(line)))
            self.width = len(line)
        elif status != self.last:
            self.stream.write(f"{status}\n")
        self.stream.flush()
        self.last = status

    def end(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
        self.width = 0


# --- formatting -----------------------------------------------------------------------------------------------
def processor(vram_fraction: float) -> str:
    """Where a loaded model sits, as ``ollama ps`` says it: ``100% GPU``, ``100% CPU``, ``48%/52% CPU/GPU``."""
    gpu = round(100 * vram_fraction)
    if gpu >= 100:
        return "100% GPU"
    return "100% CPU" if gpu <= 0 else f"{100 - gpu}%/{gpu}% CPU/GPU"


def _print_columns(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("    ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
