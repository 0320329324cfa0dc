"""How the API server listens and what it accepts; binding its socket. Safe by default: 127.0.0.1, and an address
other machines can reach only with an API key."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import InvalidInputError
from app.services.api.defaults import (
    DEFAULT_HOST,
    DEFAULT_IDLE_TTL_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_TOKENS_LIMIT,
    DEFAULT_PORT,
)

MIN_CONTEXT = 16  # llama.cpp's and Ollama's floor (LoadParams)
MAX_CONTEXT = 16 * 1024 * 1024  # beyond any model's trained context: a typo, not a wish
MAX_PARALLEL = 64  # llama.cpp sequences at once on one model (its n_seq_max limit)


@dataclass(frozen=True)
class ServerConfig:
    """``idle_ttl_s``: seconds a model the server loaded stays loaded without requests (None: until stopped; 0:
    unloaded after each request); a request's ``keep_alive``/``ttl`` overrides it for that model.
    ``max_queue``: requests that may wait for a single-sequence engine (llama.cpp, Ollama); beyond it the server
    answers 503 (OpenAI) / 529 (Anthropic). ``max_tokens_limit``: the most tokens one request may ask for."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    idle_ttl_s: float | None = DEFAULT_IDLE_TTL_S
    max_queue: int = DEFAULT_MAX_QUEUE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_tokens_limit: int = DEFAULT_MAX_TOKENS_LIMIT
    state_dir: Path | None = None  # the app's data folder (stored responses, model ids); None: in memory only
    n_ctx: int | None = None  # the context every model the server loads gets (``serve --ctx``); None: each model's
    # llama.cpp requests run side by side, up to this many at once per model (``serve --parallel N``); 0: as many as
    # fit by the memory estimate (up to 4); None: each model's own setting (``LoadParams.n_parallel``), else as 0
    n_parallel: int | None = None
    # A streamed reply whose first token takes longer than this starts without it (its opening events, then a
    # ping every ``ping_interval_s``): clients that give up on a silent connection (Claude Code after ~3 min) wait.
    # Within the grace time a failure is still an HTTP error; after it, an error event in the stream.
    first_token_grace_s: float = 30.0
    ping_interval_s: float = 10.0

    def problems(self) -> list[str]:
        found = []
        if not 0 <= self.port <= 65535:
            found.append(f"The port must be from 0 to 65535 (0 picks a free one), not {self.port}.")
        if not self.host.strip():
            found.append("Give the address to listen on, e.g. 127.0.0.1.")
        elif not is_loopback(self.host) and not self.api_key:
            found.append(
                f"Listening on {self.host} lets other machines reach the server, so it needs an API key: set one, "
                "or listen on 127.0.0.1 (this machine only)."
            )
        if self.api_key is not None and (not self.api_key.strip() or any(c.isspace() for c in self.api_key)):
            found.append("The API key must be one word without spaces.")
        if self.max_queue < 0 or self.max_body_bytes < 1024 or self.max_tokens_limit < 1:
            found.append("The queue, body and max_tokens limits must be positive.")
        if self.idle_ttl_s is not None and self.idle_ttl_s < 0:
            found.append("The idle time before a model unloads cannot be negative.")
        if self.n_parallel is not None and not 0 <= self.n_parallel <= MAX_PARALLEL:
            found.append(f"The parallel requests per model must be from 1 to {MAX_PARALLEL} (or auto), "
                         f"not {self.n_parallel}.")  # fmt: skip
        if self.n_ctx is not None and not MIN_CONTEXT <= self.n_ctx <= MAX_CONTEXT:
            found.append(
                f"The context size must be from {MIN_CONTEXT} to {MAX_CONTEXT:,} tokens, not {self.n_ctx:,} "
                "(e.g. 32768); leave it out to use each model's own."
            )
        return found

    def check(self) -> None:
        if found := self.problems():
            setting = "api_key" if any("API key" in p for p in found) else None
            setting = setting or ("n_ctx" if any("context size" in p for p in found) else None)
            setting = setting or ("n_parallel" if any("parallel" in p for p in found) else None)
            raise InvalidInputError(" ".join(found), setting=setting)


class PortInUseError(InvalidInputError):
    """Something already listens on the port: choose another (0 picks a free one) or stop that program."""

    setting = "port"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; a name is resolved (every address must be loopback)."""
    import ipaddress

    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port). PortInUseError when the port is taken,
    InvalidInputError when the address is not one of this machine's."""
    import ipaddress

    host = host.strip().strip("[]")
    address = "127.0.0.1" if host.lower() == "localhost" else host
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET
    try:
        sock = socket.create_server((address, port), family=family, backlog=128)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                f"Port {port} on {host} is already in use: stop the program using it, or choose another port "
                "(0 picks a free one)."
            ) from None
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(exc, socket.gaierror):
            raise InvalidInputError(f"Cannot listen on {host}: it is not an address of this machine ({exc}).") from None
        raise
    sock.setblocking(False)
    return sock


def base_url(sock: socket.socket, host: str) -> str:
    """``http://HOST:PORT`` for the bound socket (IPv6 in brackets)."""
    port = sock.getsockname()[1]
    shown = host.strip().strip("[]")
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
