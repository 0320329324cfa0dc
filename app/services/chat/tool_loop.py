"""The tools a chat offers its model, and the calls of one reply settled: each asked of the user (unless the chat
always runs that tool), the approved ones run at once on their MCP servers, every result (or denial, or error)
kept on the call as what the model is sent back, cut to 64 KiB.

Qt-free. Nothing runs before the user approves it; cancelling ``settle`` (Stop) cancels the calls in flight and
marks every call not finished as cancelled."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.core.chat.tool_use import Approval, ChatTools, ToolUse
from app.core.errors import AppError
from app.services.mcp.connection import ServerState, ToolInfo
from app.services.mcp.manager import McpManager

log = logging.getLogger("app.services.chat")

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64  # OpenAI's limit on a function's name
STOPPED_RESULT = "The call was cancelled: the user stopped the reply."
CUT_CALL_TEXT = (
    "Error: the reply reached its token limit while this call was being written, so it may be incomplete and was "
    "not run. Raise the reply's token limit to let such calls finish."
)


@dataclass(frozen=True)
class OfferedTool:
    name: str  # as the model sees it: the tool's own name, or ``server__tool`` when two servers share a name
    info: ToolInfo

    def as_function(self, strict: bool = False) -> dict[str, Any]:
        """The tool in OpenAI's shape; ``strict`` asks the engine to hold a call's arguments to the tool's schema
        (vLLM does, with a structural tag; without it a forced call's arguments are free JSON, even ``true``)."""
        schema = self.info.input_schema or {"type": "object", "properties": {}}
        function: dict[str, Any] = {"name": self.name, "description": self.info.description or "", "parameters": schema}
        if strict:
            function["strict"] = True
        return {"type": "function", "function": function}


def offered_tools(manager: McpManager | None, chosen: ChatTools) -> list[OfferedTool]:
    """The tools of the chat's enabled servers that are ready (and chosen), named for the model."""
    if manager is None or not chosen.any:
        return []
    tools = [t for t in manager.tools() if chosen.offers(t.server, t.name)]
    names = [_clean(t.name) for t in tools]
    shared = {n for n in names if names.count(n) > 1}
    return [
        OfferedTool(_clean(f"{t.server}__{t.name}") if n in shared else n, t) for t, n in zip(tools, names, strict=True)
    ]


def _clean(name: str) -> str:
    return _NAME_CHARS.sub("_", name)[:MAX_NAME] or "tool"


async def start_servers(manager: McpManager | None, chosen: ChatTools) -> None:
    """Start the chat's servers that are not running yet (a failure shows in the server's state, not here)."""
    if manager is None or not chosen.any:
        return
    await manager.load()
    waiting = []
    for status in manager.statuses():
        if status.name in chosen.servers and status.enabled and status.state is ServerState.STOPPED:
            waiting.append(manager.start(status.name))
    for outcome in await asyncio.gather(*waiting, return_exceptions=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, AppError):
            raise outcome


def tool_uses(calls: list[tuple[str, str, str]], offered: list[OfferedTool], last_cut: bool = False) -> list[ToolUse]:
    """A reply's calls (id, name, arguments) matched to the tools offered; a call that cannot run is settled
    at once with a result that tells the model why (nothing is asked of the user). ``last_cut``: the reply hit
    its token limit while the engine streamed its last call, which may be incomplete and is not run."""
    uses = _matched(calls, offered)
    if last_cut and uses and uses[-1].approval is Approval.PENDING:
        _refuse(uses[-1], CUT_CALL_TEXT)
    return uses


def _matched(calls: list[tuple[str, str, str]], offered: list[OfferedTool]) -> list[ToolUse]:
    by_name = {tool.name: tool.info for tool in offered}
    uses = []
    for call_id, name, arguments in calls:
        use = ToolUse(call_id, name, arguments)
        info = by_name.get(name)
        if info is None:
            offer = ", ".join(by_name) or "none"
            _refuse(use, f"Error: there is no tool named {name!r} in this chat. The tools offered are: {offer}.")
        else:
            use.server, use.tool = info.server, info.name
            if use.arguments_object() is None:
                _refuse(use, f"Error: the arguments of {name} must be a JSON object; they were {arguments!r}.")
        uses.append(use)
    return uses


def _refuse(use: ToolUse, text: str) -> None:
    use.approval, use.is_error = Approval.UNKNOWN, True
    _set_result(use, text)


def _set_result(use: ToolUse, text: str) -> None:
    use.result, use.result_bytes = text, len(text.encode("utf-8", "surrogatepass"))


def denial_text(reason: str) -> str:
    reason = reason.strip()
    return f"The user denied this call. Their reason: {reason}" if reason else "The user denied this call."


def refused_tools_text(error: str) -> str:
    """What the chat says when a vLLM server refused a request with tools (started without tool parsing)."""
    return (
        "This vLLM server does not accept tools: it was started without --enable-auto-tool-choice and "
        "--tool-call-parser. Start it with them (the server the app starts has them for known models), or turn "
        f"this chat's tools off. The server said: {error}"
    )


class ToolCalls:
    """Settles the calls of the replies of one chat session. ``changed(call)`` is told of every change of a call
    (a card to show, a decision, a result); ``remember_always()`` saves the chat's always-run tools."""

    def __init__(
        self, manager: McpManager | None, changed: Callable[[], None], remember_always: Callable[[], Awaitable[None]]
    ) -> None:
        self.manager = manager
        self._changed = changed
        self._remember_always = remember_always
        self._waiting: dict[str, asyncio.Future[tuple[Approval, str]]] = {}

    @property
    def waiting(self) -> list[str]:
        """Ids of the calls waiting for the user's decision."""
        return list(self._waiting)

    def decide(self, call_id: str, approval: Approval, reason: str = "") -> bool:
        """The user's decision on a call waiting for one (APPROVED, ALWAYS or DENIED); False when none waits."""
        if approval not in (Approval.APPROVED, Approval.ALWAYS, Approval.DENIED):
            raise ValueError(f"a call is approved once, always, or denied (not {approval})")
        future = self._waiting.pop(call_id, None)
        if future is None or future.done():
            return False
        future.set_result((approval, reason))
        return True

    async def settle(self, calls: list[ToolUse], chosen: ChatTools) -> None:
        """Ask about each call in order, then run the approved ones together. Cancelled (Stop): the calls in
        flight are cancelled and every call without a result is marked cancelled."""
        try:
            for call in calls:
                if call.approval is Approval.PENDING:
                    await self._decide(call, chosen)
            self._changed()
            await asyncio.gather(*(self._run(call) for call in calls if call.approval.runs and not call.settled))
        except asyncio.CancelledError:
            for call in calls:
                if not call.settled:
                    call.approval = Approval.CANCELLED if call.approval is Approval.PENDING else call.approval
                    call.is_error = True
                    _set_result(call, STOPPED_RESULT)
            raise
        finally:
            for future in self._waiting.values():
                future.cancel()
            self._waiting.clear()
            self._changed()

    async def _decide(self, call: ToolUse, chosen: ChatTools) -> None:
        if chosen.runs_always(call.server, call.tool):
            call.approval = Approval.ALWAYS
            return
        future: asyncio.Future[tuple[Approval, str]] = asyncio.get_running_loop().create_future()
        self._waiting[call.id] = future
        self._changed()  # the card asks now
        approval, reason = await future
        call.approval = approval
        if approval is Approval.DENIED:
            call.reason = reason.strip()
            _set_result(call, denial_text(reason))
        elif approval is Approval.ALWAYS and call.key not in chosen.always:
            chosen.always.append(call.key)
            await self._remember_always()
        self._changed()

    async def _run(self, call: ToolUse) -> None:
        assert self.manager is not None
        arguments = call.arguments_object() or {}
        try:
            result = await self.manager.call_tool(call.server, call.tool, arguments)
        except AppError as exc:  # the server failed, stopped or timed out: the model is told, the chat goes on
            log.warning("the tool %s on %s failed: %s", call.tool, call.server, exc)
            call.is_error = True
            _set_result(call, f"Error: {exc}")
        else:
            cut = result.for_model()
            call.result, call.result_bytes, call.is_error = cut.text, cut.total_bytes, result.is_error
        self._changed()
