"""The chat page's tools: the drawer's picker kept in step with the MCP servers and the chat on screen, the tool
cards' decisions passed to the chat's session, and the transcript shown as a reply's calls are asked, decided and
run. The servers file is read off the Qt thread; servers start when a chat uses them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from app.core.chat.conversation import Conversation, Message
from app.core.chat.tool_use import Approval, ChatTools
from app.services.chat.session import ChatSession
from app.services.chat.workspace import ChatWorkspace
from app.services.workstation import Workstation
from app.ui.pages.chat.composer import Composer
from app.ui.pages.chat.drawer import SettingsDrawer
from app.ui.pages.chat.transcript import TranscriptView
from app.ui.tasks import spawn

if TYPE_CHECKING:
    from app.services.mcp.manager import McpManager


class _Origins(Protocol):
    def origin_note(self, conversation: Conversation) -> str: ...


class ToolsPage(Protocol):
    """What the tools need of the chat page."""

    workstation: Workstation
    workspace: ChatWorkspace
    drawer: SettingsDrawer
    view: TranscriptView
    composer: Composer
    closed: bool

    @property
    def session(self) -> ChatSession | None: ...

    @property
    def conversations(self) -> _Origins: ...

    def busy(self, what: str, any_chat: bool = False) -> bool: ...

    def show_notice(self, text: str, level: str = "info", key: str | None = None, **options: object) -> None: ...


class ChatToolsControl:
    def __init__(self, panel: ToolsPage) -> None:
        self.panel = panel
        self.manager: McpManager | None = None  # made by start(): not at start-up
        self.picker = panel.drawer.tools
        self.picker.changed.connect(self.servers_chosen)
        self.picker.restart_requested.connect(self.restart)
        panel.view.tool_decided.connect(self.decided)
        panel.view.tools_continue_requested.connect(self.continue_tools)

    def start(self) -> None:
        self.manager = self.panel.workstation.mcp
        self.manager.add_listener(lambda _name: self.refresh())
        spawn(self._load(self.manager), "read the MCP servers file")

    async def _load(self, manager: McpManager) -> None:
        await manager.load()
        self.refresh()

    def refresh(self) -> None:
        """The picker shows every server's state and what the chat on screen uses."""
        if self.panel.closed or self.manager is None:
            return
        session = self.panel.session
        tools = session.conversation.tools if session and session.conversation else ChatTools()
        self.picker.show_servers(self.manager.statuses(), tools, self.manager.problem)

    def servers_chosen(self, chosen: dict[str, list[str] | None]) -> None:
        session = self.panel.session
        if session is None:
            return
        current = session.conversation.tools if session.conversation else ChatTools()
        spawn(session.set_tools(ChatTools(dict(chosen), list(current.always))), "choose the chat's tools")

    def restart(self, name: str) -> None:
        if self.manager is not None:
            spawn(self.manager.restart(name), f"restart the MCP server {name}")

    def decided(self, call_id: str, approval: str, reason: str) -> None:
        session = self.panel.session
        if session is not None:
            session.decide(call_id, Approval(approval), reason)

    def continue_tools(self) -> None:
        session = self.panel.session
        if session is None or self.panel.busy("continuing"):
            return
        if self.panel.workspace.model is None:
            self.panel.show_notice("No model is loaded. Load a model, then continue.", "warning", key="model")
            return
        spawn(session.continue_tools(), "continue after tool calls")

    def tools_changed(self, message: Message) -> None:
        """A reply's calls changed (shown, decided, run): the transcript shows them, the chat stays busy."""
        panel, session = self.panel, self.panel.session
        if session is None or session.conversation is None:
            return
        if panel.view.is_streaming:
            panel.view.end_reply()
        panel.view.set_tools_state(session.tools.waiting, busy=True)
        panel.view.show_messages(session.conversation.messages, panel.conversations.origin_note(session.conversation))
        panel.composer.set_generating(True)

    def chat_shown(self) -> None:
        session = self.panel.session
        waiting = session.tools.waiting if session else []
        self.panel.view.set_tools_state(waiting, busy=bool(session and session.generating))
        self.refresh()
