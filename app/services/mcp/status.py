"""What the app shows of an MCP server — its state, its tools — without loading the connection code (the chat's
tools picker is built at start-up; the connection and the SDK load when a server starts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ServerState(StrEnum):
    DISABLED = "disabled"
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class ToolInfo:
    server: str
    name: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass(frozen=True)
class ServerStatus:
    name: str
    transport: str
    enabled: bool
    state: ServerState
    error: str | None = None
    tools: tuple[ToolInfo, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "enabled": self.enabled,
            "state": str(self.state),
            "error": self.error,
            "tools": [tool.to_dict() for tool in self.tools],
        }
