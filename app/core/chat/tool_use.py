"""Tools in a chat, the pure parts: the tool calls a reply made (with the user's decision and what the model was
sent back), which MCP servers and tools a chat may use, and which it runs without asking.

A reply that called tools keeps its calls in order (``Message.tool_calls``); the model is sent the reply with its
``tool_calls`` and then one ``tool`` message per call, in the same order (``tool_prompt_messages``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

MAX_ROUNDS = 8  # model replies with tool calls per message the user sends; then a Continue marker


class Approval(StrEnum):
    PENDING = "pending"  # waiting for the user (approvals default to ask)
    APPROVED = "approved"  # approved once
    ALWAYS = "always"  # ran without asking: "always for this tool in this chat"
    DENIED = "denied"  # the user said no, with a reason the model is sent
    CANCELLED = "cancelled"  # Stop ended the reply before the call finished
    UNKNOWN = "unknown"  # the model called a tool this chat does not offer: nothing ran

    @property
    def runs(self) -> bool:
        return self in (Approval.APPROVED, Approval.ALWAYS)


@dataclass
class ToolUse:
    """One tool call of a reply: what the model asked for, the decision, and the result the model was sent."""

    id: str
    name: str  # the name the model called (as it was offered)
    arguments: str  # JSON text, as the model wrote it
    server: str = ""  # the MCP server the tool belongs to ("" when no offered tool has this name)
    tool: str = ""  # the tool's own name on its server
    approval: Approval = Approval.PENDING
    reason: str = ""  # why it was denied (sent to the model)
    result: str | None = None  # what the model was sent back (at most 64 KiB); None before it is decided
    result_bytes: int = 0  # the size of the tool's whole result, in bytes of UTF-8
    is_error: bool = False  # the tool failed, or could not be reached

    @property
    def key(self) -> str:
        """How "always for this tool in this chat" remembers it."""
        return tool_key(self.server, self.tool)

    @property
    def settled(self) -> bool:
        return self.result is not None

    def arguments_object(self) -> dict[str, Any] | None:
        """The arguments as a JSON object; None when the model wrote something else."""
        try:
            value = json.loads(self.arguments or "{}")
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def sent_result(self) -> str:
        """What the model is sent for this call (a call never decided says so)."""
        return self.result if self.result is not None else "The call did not run (the reply was interrupted)."

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"approval": str(self.approval)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolUse:
        names = cls.__dataclass_fields__
        values = {k: v for k, v in data.items() if k in names}
        try:
            values["approval"] = Approval(values.get("approval", Approval.PENDING))
        except ValueError:
            values["approval"] = Approval.PENDING
        return cls(**values)


def tool_key(server: str, tool: str) -> str:
    return f"{server}/{tool}"


@dataclass
class ChatTools:
    """The tools a chat may use: ``servers`` maps each enabled MCP server to the names of its tools it offers
    (None: all of them); ``always`` holds the tools (``server/tool``) that run without asking in this chat."""

    servers: dict[str, list[str] | None] = field(default_factory=dict)
    always: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.servers)

    def offers(self, server: str, tool: str) -> bool:
        if server not in self.servers:
            return False
        chosen = self.servers[server]
        return chosen is None or tool in chosen

    def runs_always(self, server: str, tool: str) -> bool:
        return tool_key(server, tool) in self.always

    def to_dict(self) -> dict[str, Any]:
        return {"servers": dict(self.servers), "always": list(self.always)}

    @classmethod
    def from_dict(cls, data: object) -> ChatTools:
        """A stored or imported setting; what is not understood is left out (a chat then offers fewer tools)."""
        if not isinstance(data, dict):
            return cls()
        servers: dict[str, list[str] | None] = {}
        raw = data.get("servers")
        for name, tools in (raw if isinstance(raw, dict) else {}).items():
            if isinstance(name, str) and (tools is None or isinstance(tools, list)):
                servers[name] = None if tools is None else [t for t in tools if isinstance(t, str)]
        always = data.get("always")
        return cls(servers, [k for k in always if isinstance(k, str)] if isinstance(always, list) else [])


def calls_for_prompt(calls: list[ToolUse]) -> list[dict[str, Any]]:
    """A reply's calls in OpenAI's ``tool_calls`` shape."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in calls]  # fmt: skip


def tool_prompt_messages(calls: list[ToolUse]) -> list[dict[str, Any]]:
    """One ``tool`` message per call, in call order."""
    return [{"role": "tool", "tool_call_id": c.id, "name": c.name, "content": c.sent_result()} for c in calls]
