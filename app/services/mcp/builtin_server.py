"""The app's own MCP server, safe to start on first use: a calculator (no ``eval``) and, given a folder, read-only
access to the files inside it (``..``, absolute paths and links leading out are refused; reads are capped).

``python -m app.services.mcp.builtin_server [--root FOLDER]`` speaks MCP on stdin/stdout; the app starts it
from the ``builtin`` entry of its MCP servers file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.core.mcp.calculator import MAX_EXPRESSION_CHARS, CalculatorError, evaluate, format_number
from app.core.mcp.folder import MAX_READ_BYTES, FolderAccessError, list_folder, read_chunk

SERVER_NAME = "LLM Workstation built-in tools"
BINARY_SNIFF_BYTES = 8192


def build_server(root: Path | None) -> Any:
    """The server (an SDK ``MCPServer``) with the calculator, and the file tools when ``root`` is given."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(
        SERVER_NAME,
        instructions="Arithmetic, and reading the files of one folder the user chose.",
        log_level="WARNING",  # a refused call is the tool's answer, not a line for the app's log
    )

    def calculate(expression: str) -> str:
        try:
            return format_number(evaluate(expression))
        except CalculatorError as exc:
            raise ToolError(str(exc)) from None

    server.add_tool(
        calculate,
        description=(
            "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses "
            f"(at most {MAX_EXPRESSION_CHARS} characters), e.g. '(2 + 3) * 4 ** 2'."
        ),
        structured_output=False,
    )
    if root is not None:
        _add_file_tools(server, root, ToolError)
    return server


def _add_file_tools(server: Any, root: Path, tool_error: type[Exception]) -> None:
    def list_files(path: str = ".") -> str:
        try:
            return "\n".join(list_folder(root, path)) or "(the folder is empty)"
        except FolderAccessError as exc:
            raise tool_error(str(exc)) from None

    def read_file(path: str, offset: int = 0) -> str:
        try:
            return _file_text(read_chunk(root, path, offset), path)
        except FolderAccessError as exc:
            raise tool_error(str(exc)) from None

    server.add_tool(
        list_files,
        description="List a folder inside the user's chosen folder ('.' is the folder itself): names, sizes, '/'.",
        structured_output=False,
    )
    server.add_tool(
        read_file,
        description=(
            f"Read a text file inside the user's chosen folder, at most {MAX_READ_BYTES // 1024} KiB from 'offset' "
            "(a byte position; read on from where a cut-off answer ends). Paths are relative to the folder."
        ),
        structured_output=False,
    )


def _file_text(chunk: Any, path: str) -> str:
    if b"\0" in chunk.data[:BINARY_SNIFF_BYTES]:
        return f"[{path} is a binary file of {chunk.size:,} bytes; it is not shown as text]"
    text = chunk.data.decode("utf-8", "replace")
    if chunk.complete and chunk.offset == 0:
        return text
    end = chunk.offset + len(chunk.data)
    return f"{text}\n[bytes {chunk.offset:,} to {end:,} of {chunk.size:,}; read on with offset={end}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.services.mcp.builtin_server", description=__doc__)
    parser.add_argument("--root", default=None, help="the folder whose files may be listed and read")
    args = parser.parse_args(argv)
    root = None
    if args.root:
        root = Path(args.root).expanduser()
        if not root.is_dir():
            print(f"the folder {root} does not exist or is not a folder; choose another one", file=sys.stderr)
            return 2
    build_server(root).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
