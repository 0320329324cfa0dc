"""The MCP servers the app knows: its own versioned file, and the ``mcp.json`` that Claude Desktop and Cursor use.

The app's file::

    {"version": 1, "servers": [
        {"name": "builtin", "builtin": true, "enabled": true, "root": "/home/me/Documents"},
        {"name": "github", "enabled": true, "command": "npx", "args": ["-y", "…"], "env": {"GITHUB_TOKEN": "…"}},
        {"name": "search", "enabled": false, "url": "https://example.com/mcp", "headers": {"Authorization": "…"}}]}

An imported ``mcp.json``: ``{"mcpServers": {NAME: {"command", "args", "env", "cwd"} or {"url", "headers"}}}``
(VS Code's ``"servers"`` is read too; ``"disabled": true`` imports a server switched off). Every error names
the entry and what is wrong with it. ``env`` and ``headers`` may hold tokens: their values never appear in a
``repr``, and :func:`redacted` is what log lines show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from app.core.errors import InvalidInputError

CONFIG_VERSION = 1
BUILTIN_NAME = "builtin"
MAX_SERVERS = 100
STDIO, HTTP, BUILTIN = "stdio", "http", "builtin"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")
_HTTP_TYPES = ("http", "streamable-http", "streamableHttp", "streamable_http")


class McpConfigError(InvalidInputError):
    """A configuration that cannot be used; the message names the entry and what is wrong."""


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    builtin: bool = False
    root: str = ""  # the built-in server's folder (its file tools read inside it); empty: the calculator only

    @property
    def transport(self) -> str:
        return BUILTIN if self.builtin else HTTP if self.url else STDIO

    def __repr__(self) -> str:
        where = f"url={self.url!r}, headers={redacted(self.headers)}" if self.url else f"command={self.command!r}"
        return f"ServerConfig(name={self.name!r}, {where}, env={redacted(self.env)}, enabled={self.enabled})"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "enabled": self.enabled}
        if self.builtin:
            return {**data, "builtin": True, "root": self.root}
        if self.url:
            return {**data, "url": self.url, "headers": dict(self.headers)}
        data.update(command=self.command, args=list(self.args), env=dict(self.env))
        return {**data, "cwd": self.cwd} if self.cwd else data


def redacted(values: Mapping[str, str]) -> dict[str, str]:
    """``values`` with every value hidden: what a log line may show of ``env`` and ``headers``."""
    return dict.fromkeys(values, "***")


def builtin_server(enabled: bool = True, root: str = "") -> ServerConfig:
    return ServerConfig(BUILTIN_NAME, builtin=True, enabled=enabled, root=root)


@dataclass
class McpConfig:
    servers: list[ServerConfig] = field(default_factory=lambda: [builtin_server()])

    def get(self, name: str) -> ServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)

    def put(self, server: ServerConfig) -> None:
        """Add ``server``, or replace the one of that name where it stands."""
        for index, existing in enumerate(self.servers):
            if existing.name == server.name:
                self.servers[index] = server
                return
        if len(self.servers) >= MAX_SERVERS:
            raise McpConfigError(f"at most {MAX_SERVERS} servers can be configured")
        self.servers.append(server)

    def set_enabled(self, name: str, enabled: bool) -> ServerConfig:
        return self._change(name, enabled=enabled)

    def set_builtin_root(self, root: str) -> ServerConfig:
        return self._change(BUILTIN_NAME, root=root)

    def _change(self, name: str, **changes: Any) -> ServerConfig:
        server = self.get(name)
        if server is None:
            raise McpConfigError(f"there is no MCP server named {name!r}; configured: {self._names()}")
        changed = replace(server, **changes)
        self.put(changed)
        return changed

    def _names(self) -> str:
        return ", ".join(s.name for s in self.servers) or "none"

    def to_dict(self) -> dict[str, Any]:
        return {"version": CONFIG_VERSION, "servers": [s.to_dict() for s in self.servers]}

    @classmethod
    def from_dict(cls, data: object, source: str = "the MCP servers file") -> McpConfig:
        if not isinstance(data, dict):
            raise McpConfigError(f"{source} does not hold a JSON object")
        version = data.get("version", CONFIG_VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version > CONFIG_VERSION:
            raise McpConfigError(f"{source} was written by a newer version of the app (version {version!r})")
        entries = data.get("servers", [])
        if not isinstance(entries, list):
            raise McpConfigError(f'{source}: "servers" must be a list')
        config = cls([])
        for index, entry in enumerate(entries):
            where = f"{source}: server {index + 1}"
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise McpConfigError(f'{where} must be an object with a "name"')
            server = _app_entry(entry, f"{where} ({entry['name']!r})")
            if config.get(server.name) is not None:
                raise McpConfigError(f"{where}: the name {server.name!r} is used twice")
            config.put(server)
        if config.get(BUILTIN_NAME) is None:
            config.servers.insert(0, builtin_server())
        return config


def parse_mcp_json(data: object, source: str = "the file") -> list[ServerConfig]:
    """The servers of an ``mcp.json`` (Claude Desktop's, Cursor's, VS Code's), in the file's order."""
    if not isinstance(data, dict):
        raise McpConfigError(f"{source} does not hold a JSON object")
    key = "mcpServers" if "mcpServers" in data else "servers" if "servers" in data else None
    if key is None:
        raise McpConfigError(
            f'{source} has no "mcpServers" object (the format Claude Desktop and Cursor use: '
            '{"mcpServers": {"NAME": {"command": "…", "args": […]}}})'
        )
    entries = data[key]
    if not isinstance(entries, dict):
        raise McpConfigError(f'{source}: "{key}" must be an object of servers by name')
    servers = []
    for name, entry in entries.items():
        where = f'{source}: server "{name}"'
        if name == BUILTIN_NAME:
            raise McpConfigError(f"{where}: {BUILTIN_NAME!r} is the name of the app's own server; rename this entry")
        if not isinstance(entry, dict):
            raise McpConfigError(f"{where} must be an object with a command or a url")
        servers.append(_server(name, entry, where, enabled=entry.get("disabled") is not True))
    if len(servers) > MAX_SERVERS:
        raise McpConfigError(f"{source} has {len(servers)} servers; at most {MAX_SERVERS} can be configured")
    return servers


# --- one entry ----------------------------------------------------------------------------------------------------
def _app_entry(entry: dict[str, Any], where: str) -> ServerConfig:
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise McpConfigError(f'{where}: "enabled" must be true or false')
    if entry.get("builtin") is True or entry["name"] == BUILTIN_NAME:
        root = entry.get("root", "")
        if entry["name"] != BUILTIN_NAME or not isinstance(root, str):
            raise McpConfigError(f'{where}: the built-in server is named {BUILTIN_NAME!r} and its "root" is a folder')
        return builtin_server(enabled, root)
    return _server(entry["name"], entry, where, enabled)


def _server(name: str, entry: dict[str, Any], where: str, enabled: bool) -> ServerConfig:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise McpConfigError(
            f"{where}: a server name is 1 to 64 letters, digits, spaces, '.', '_' or '-', starting with a letter "
            "or a digit"
        )
    kind = entry.get("type")
    if kind == "sse":
        raise McpConfigError(f"{where}: SSE servers are not supported; give the server's Streamable HTTP URL")
    command, url = entry.get("command"), entry.get("url")
    if command is not None and url is not None:
        raise McpConfigError(f'{where} has both a "command" and a "url"; keep one')
    if url is not None or kind in _HTTP_TYPES:
        return ServerConfig(name, url=_url(url, where), headers=_strings(entry, "headers", where), enabled=enabled)
    if command is None:
        raise McpConfigError(f'{where} has neither a "command" (a program to start) nor a "url" (an HTTP server)')
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        raise McpConfigError(f'{where}: "command" must be the name or path of a program')
    cwd = entry.get("cwd", "")
    if not isinstance(cwd, str):
        raise McpConfigError(f'{where}: "cwd" must be a folder path')
    return ServerConfig(
        name, command=command, args=_args(entry.get("args", []), where), env=_strings(entry, "env", where),
        cwd=cwd, enabled=enabled,
    )  # fmt: skip


def _args(args: object, where: str) -> tuple[str, ...]:
    if not isinstance(args, list):
        raise McpConfigError(f'{where}: "args" must be a list of strings')
    for index, arg in enumerate(args):
        if not isinstance(arg, str) or "\0" in arg:
            raise McpConfigError(f'{where}: "args" item {index + 1} must be a string (it is {_kind(arg)})')
    return tuple(args)


def _strings(entry: dict[str, Any], key: str, where: str) -> dict[str, str]:
    values = entry.get(key, {})
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise McpConfigError(f'{where}: "{key}" must be an object of names and string values')
    for name, value in values.items():
        if not name or ("=" in name and key == "env") or any(c in name for c in "\0\r\n"):
            raise McpConfigError(f'{where}: "{key}" has an unusable name {name!r}')
        if not isinstance(value, str) or any(c in value for c in "\0\r\n"):
            # the value itself is never shown: it may be a token
            raise McpConfigError(f"{where}: {key} {name!r} must be a string on one line (it is {_kind(value)})")
    return dict(values)


def _url(url: object, where: str) -> str:
    if not isinstance(url, str):
        raise McpConfigError(f'{where}: "url" must be the server\'s http:// or https:// address')
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise McpConfigError(f'{where}: "url" must be an http:// or https:// address, not {url[:80]!r}')
    return url


def _kind(value: object) -> str:
    if isinstance(value, str):
        return "a string with a line break or a NUL"
    if isinstance(value, bool):
        return "true/false"
    return {int: "a number", float: "a number", list: "a list", dict: "an object", type(None): "null"}.get(
        type(value), type(value).__name__
    )


@dataclass(frozen=True)
class ImportReport:
    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # already configured, and not replaced


def merge_servers(config: McpConfig, servers: list[ServerConfig], replace_existing: bool = False) -> ImportReport:
    """Add imported ``servers`` to ``config``: a name already configured is kept as it is unless
    ``replace_existing``."""
    added, replaced, skipped = [], [], []
    for server in servers:
        if config.get(server.name) is None:
            config.put(server)
            added.append(server.name)
        elif replace_existing:
            config.put(server)
            replaced.append(server.name)
        else:
            skipped.append(server.name)
    return ImportReport(tuple(added), tuple(replaced), tuple(skipped))
