"""What every verb shares: the exit codes, ``fail()``, and the one mapping from an error to its exit code and to
the option that fixes it.

Exit codes (every verb): 0 done; 1 a runtime failure (a server unavailable, an engine that failed, something
busy); 2 bad input, i.e. an argument, a file or a setting the user can fix, a name that does not exist included
(``ErrorKind.NOT_FOUND``); 130 interrupted (Ctrl-C). A verb may document an exception: ``ollama`` exits 1 for a
model Ollama does not have, as Ollama's own command does.

Service messages are neutral (they name no option); the CLI adds the option that fixes an error here, from the
error's ``setting``: ``refused the API key (…); check the API key (--api-key or $LLMW_API_KEY)``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType

from app.core.errors import AppError, ErrorKind

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
API_KEY_ENV = "LLMW_API_KEY"

EXIT_CODES: Mapping[ErrorKind, int] = MappingProxyType(
    {
        ErrorKind.INVALID_INPUT: EXIT_BAD_INPUT,
        ErrorKind.NOT_FOUND: EXIT_BAD_INPUT,
        ErrorKind.BUSY: EXIT_FAILED,
        ErrorKind.UNAVAILABLE: EXIT_FAILED,
        ErrorKind.ENGINE_FAILED: EXIT_FAILED,
    }
)

# The option (or command) that fixes an error, by the error's ``setting``; a verb may add or replace some.
OPTION_HINTS: Mapping[str, str] = MappingProxyType(
    {
        "api_key": f"--api-key or ${API_KEY_ENV}",
        "backend": "--backend",
        "concurrency": "--concurrency",
        "download_dir": "--dir",
        "endpoint": "--endpoint",
        "exec": "--exec PATH",
        "host": "--host or OLLAMA_HOST",
        "model": "--model",
        "output": "--output",
        "prefix": "--prefix DIR",
        "quant": "FILE names or --quant",
        "run_id": "`llm-workstation bench runs` lists them",
    }
)


def fail(message: str, code: int = EXIT_FAILED) -> int:
    """Print ``message`` as the command's one line on stderr; return ``code``."""
    print(f"llm-workstation: {message}", file=sys.stderr)
    return code


def code_for(kind: ErrorKind, overrides: Mapping[ErrorKind, int] | None = None) -> int:
    """The exit code of an error of ``kind`` (a verb's ``overrides`` first)."""
    return (overrides or {}).get(kind, EXIT_CODES[kind])


def exit_code(error: BaseException, overrides: Mapping[ErrorKind, int] | None = None) -> int:
    """The exit code for ``error``: by its kind for an ``AppError``, 2 for another ``ValueError`` (a value the
    user gave), else 1."""
    if isinstance(error, AppError):
        return code_for(error.kind, overrides)
    return EXIT_BAD_INPUT if isinstance(error, ValueError) else EXIT_FAILED


def with_hint(message: str, hint: str | None) -> str:
    """``message`` on one line, with ``hint`` in brackets before its final full stop."""
    message = message.replace("\n", " ").rstrip()
    if not hint:
        return message
    if message.endswith("."):
        return f"{message[:-1]} ({hint})."
    return f"{message} ({hint})"


def hint_for(error: BaseException, options: Mapping[str, str] | None = None) -> str | None:
    """The option that fixes ``error``, from its ``setting``: ``options`` first, then ``OPTION_HINTS``."""
    setting = error.setting if isinstance(error, AppError) else None
    if setting is None:
        return None
    return (options or {}).get(setting) or OPTION_HINTS.get(setting)


def fail_error(
    error: BaseException,
    options: Mapping[str, str] | None = None,
    overrides: Mapping[ErrorKind, int] | None = None,
) -> int:
    """Print ``error`` as one line with the option that fixes it; return its exit code."""
    return fail(with_hint(str(error), hint_for(error, options)), exit_code(error, overrides))
