"""The address of an HTTP model server (vLLM, llama.cpp server, any OpenAI-compatible one), as every client of
one takes it: the chat's vLLM backend, the batch runner, the Bench page, the batch benchmark."""

from __future__ import annotations

import urllib.parse

from app.backends.protocol import BackendError
from app.core.errors import ErrorKind, InvalidInputError

EXAMPLE_URL = "http://127.0.0.1:8000"


class ServerAddressError(BackendError, InvalidInputError):
    """Not a usable server address: a ``BackendError`` for engine callers, a ``ValueError`` for the rest."""

    kind = ErrorKind.INVALID_INPUT
    setting = "endpoint"


def normalize_server_url(url: str | None, *, default: str | None = None) -> str:
    """``http://host:port`` for ``host:port``, ``http://host:port/``, ``…/v1`` or ``…/v1/`` (surrounding spaces
    are dropped; a path before ``/v1``, e.g. a proxy's, is kept; a query or fragment is dropped).

    No address gives ``default``. Raises ``ServerAddressError`` for anything but an http(s) address with a host
    and a valid port, and for an address with a user name or password (the message does not repeat it)."""
    raw = (url or "").strip() or default
    if not raw:
        raise ServerAddressError(f"No server address was given. Give one like {EXAMPLE_URL}.")
    split = urllib.parse.urlsplit(raw if "://" in raw else "http://" + raw)
    if split.username is not None or split.password is not None:
        raise ServerAddressError(
            "The server address holds a user name or password. Give the API key on its own, not in the address."
        )
    if split.scheme not in ("http", "https") or not split.hostname or not _port_ok(split) or _has_space(raw):
        raise ServerAddressError(f"{raw!r} is not an http:// or https:// address. Use one like {EXAMPLE_URL}.")
    path = split.path.rstrip("/").removesuffix("/v1").rstrip("/")
    return urllib.parse.urlunsplit((split.scheme, split.netloc.rstrip(":"), path, "", ""))


def _port_ok(split: urllib.parse.SplitResult) -> bool:
    """False for a port that is not a number from 0 to 65535 (``SplitResult.port`` raises ValueError)."""
    try:
        return split.port is None or split.port >= 0
    except ValueError:
        return False


def _has_space(raw: str) -> bool:
    return any(c.isspace() or ord(c) < 32 for c in raw)
