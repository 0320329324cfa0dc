"""``llm-workstation mcp list|import|enable|disable|folder``: the MCP tool servers, checked without the window.

``mcp list`` starts the enabled servers to ask them for their tools (``--no-start``: the configuration only) and
stops them again. ``mcp import FILE`` adds the servers of an ``mcp.json`` (Claude Desktop's or Cursor's format).

Exit codes: 0 done; 1 an enabled server failed to start (``list``); 2 bad input: a malformed ``mcp.json`` (the
message names the entry and what is wrong), an MCP servers file that cannot be read (it is left as it is), an
unknown server name. The ``mcp`` SDK is imported only when a server starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, fail, fail_error
from app.core import safe_json
from app.core.mcp.config import BUILTIN_NAME, McpConfig, McpConfigError, merge_servers, parse_mcp_json

VERBS = ("mcp",)
MAX_MCP_JSON_BYTES = 1024 * 1024


def add_parser(verbs: argparse._SubParsersAction) -> None:
    mcp = verbs.add_parser("mcp", help="the MCP tool servers: list them and their tools, import an mcp.json")
    actions = mcp.add_subparsers(dest="mcp_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the servers, their state and their tools")
    listing.add_argument("--json", action="store_true", help="a JSON list")
    listing.add_argument("--no-start", action="store_true", help="the configuration only: start no server")
    listing.add_argument("--verbose", action="store_true", help="the servers' own output (stderr) on stderr")
    imported = actions.add_parser("import", help="add the servers of an mcp.json (Claude Desktop's or Cursor's)")
    imported.add_argument("file", metavar="FILE")
    imported.add_argument("--replace", action="store_true", help="replace servers of the same name")
    for action, words in (("enable", "start with the app"), ("disable", "no longer start")):
        actions.add_parser(action, help=f"a server the app should {words}").add_argument("name", metavar="NAME")
    folder = actions.add_parser("folder", help=f"the folder the {BUILTIN_NAME!r} server's file tools may read")
    folder.add_argument("path", metavar="FOLDER", nargs="?", default=None, help="none: the calculator only")


def run(args: argparse.Namespace) -> int:
    from app.services.mcp.config_file import McpConfigFile
    from app.services.paths import app_paths

    config_file = McpConfigFile(app_paths().ensure().mcp_servers_file)
    try:
        if args.mcp_action == "list":
            return _list(config_file, args.json, not args.no_start, args.verbose)
        if args.mcp_action == "import":
            return _import(config_file, Path(args.file), args.replace)
        return _change(config_file, args)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return fail("interrupted", EXIT_INTERRUPTED)


# --- list ---------------------------------------------------------------------------------------------------------
def _list(config_file: Any, as_json: bool, start: bool, verbose: bool) -> int:
    from app.services.mcp.manager import McpManager

    config = config_file.load()
    if config_file.problem:
        return fail(config_file.problem, EXIT_BAD_INPUT)
    manager = McpManager(config=config)

    async def session() -> list[Any]:
        try:
            return await manager.start_enabled() if start else manager.statuses()
        finally:
            await manager.close()

    with _server_output(verbose):
        statuses = asyncio.run(session())
    if as_json:
        print(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        _print_statuses(statuses, config, start)
    return EXIT_FAILED if any(s.state == "failed" for s in statuses) else EXIT_OK


def _print_statuses(statuses: list[Any], config: McpConfig, started: bool) -> None:
    for status in statuses:
        kind = "built-in" if status.transport == "builtin" else status.transport
        state = f"ready, {_count(len(status.tools), 'tool')}" if status.state == "ready" else str(status.state)
        print(f"{status.name} ({kind}): {state}" + (f": {status.error}" if status.error else ""))
        server = config.get(status.name)
        if server is not None and server.builtin:
            print(f"  folder: {server.root or 'none (the calculator only)'}")
        for tool in status.tools:
            params = ", ".join(tool.input_schema.get("properties", {}))
            print(f"  {tool.name}({params})" + (f"  {_first_line(tool.description)}" if tool.description else ""))
    if not statuses:
        print("No MCP servers are configured.")
    elif not started:
        print("(not started: run without --no-start to list their tools)")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 100 else line[:99] + "…"


@contextlib.contextmanager
def _server_output(verbose: bool) -> Iterator[None]:
    """The servers' log lines (their stderr among them): on stderr with ``verbose``, else nowhere (what failed is
    in the listing)."""
    from app.services.logbuffer import APP_LOGGER, RedactingFormatter

    logger = logging.getLogger(APP_LOGGER)
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if verbose else logging.NullHandler()
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    if verbose:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- import and changes -------------------------------------------------------------------------------------------
def _import(config_file: Any, path: Path, replace_existing: bool) -> int:
    try:
        servers = parse_mcp_json(safe_json.load_file(path, max_bytes=MAX_MCP_JSON_BYTES), source=str(path))
    except FileNotFoundError:
        return fail(f"there is no file {path}", EXIT_BAD_INPUT)
    except OSError as exc:
        return fail(f"cannot read {path}: {exc.strerror or exc}", EXIT_BAD_INPUT)
    except ValueError as exc:  # JsonError, UserFileError, McpConfigError: the message names the entry
        return fail_error(exc)
    config = config_file.load()
    try:
        report = merge_servers(config, servers, replace_existing)
        config_file.save(config)
    except McpConfigError as exc:
        return fail_error(exc)
    for name in report.added:
        print(f"added {name} ({_describe(config, name)})")
    for name in report.replaced:
        print(f"replaced {name} ({_describe(config, name)})")
    for name in report.skipped:
        print(f"skipped {name}: a server of that name is configured already (--replace to overwrite it)")
    if not servers:
        print(f"{path} lists no servers")
    return EXIT_OK


def _describe(config: McpConfig, name: str) -> str:
    server = config.get(name)
    if server is None:
        return "?"
    where = server.url if server.url else " ".join([server.command, *server.args])
    return where + ("" if server.enabled else ", disabled")


def _change(config_file: Any, args: argparse.Namespace) -> int:
    config = config_file.load()
    try:
        if config_file.problem:
            raise McpConfigError(config_file.problem)
        if args.mcp_action == "folder":
            root = str(Path(args.path).expanduser().resolve()) if args.path else ""
            if root and not Path(root).is_dir():
                return fail(
                    f"{args.path} is not a folder; give the folder whose files the tools may read", EXIT_BAD_INPUT
                )
            config.set_builtin_root(root)
            message = (
                f"the {BUILTIN_NAME} server's file tools read {root}" if root else "file tools off: the calculator only"
            )
        else:
            enabled = args.mcp_action == "enable"
            config.set_enabled(args.name, enabled)
            message = f"{args.name} {'enabled' if enabled else 'disabled'}"
        config_file.save(config)
    except McpConfigError as exc:
        return fail_error(exc)
    print(message)
    return EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
