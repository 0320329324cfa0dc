"""The chat's tools, in the drawer's "This chat" section: one row per MCP server with a box that lets this chat
use it, the server's state (starting, ready with N tools, failed with its reason) and a Restart button. Calls
always ask first; "Always" choices are per chat and per tool."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.core.chat.tool_use import ChatTools
from app.services.mcp.status import ServerState, ServerStatus
from app.ui.style.icons import icon
from app.ui.style.theme import set_role, tokens
from app.ui.widgets.factories import wrapped_label
from app.ui.widgets.palette import set_text_color

NOTE = "The model may call the tools of the servers ticked here. Every call waits for your approval."
TOOL_INDENT = 18
NO_SERVERS = "No MCP servers are configured. Add them with `llm-workstation mcp import FILE`."


def state_text(status: ServerStatus) -> tuple[str, str]:
    """(words, level) for a server's state."""
    if status.state is ServerState.READY:
        count = len(status.tools)
        return f"ready · {count} tool{'s' if count != 1 else ''}", ""
    if status.state is ServerState.STARTING:
        return "starting…", ""
    if status.state is ServerState.FAILED:
        return f"failed: {status.error or 'unknown reason'}", "error"
    if status.state is ServerState.DISABLED:
        return "turned off in the MCP settings", "warning"
    return "not started (starts when the chat uses it)", ""


class ToolsPicker(QWidget):
    """Emits ``changed`` with the servers this chat uses, each with the names of its tools it offers (None: all;
    the chat's "always" choices are kept by the page) and ``restart_requested`` with a server's name."""

    changed = Signal(dict)  # server name -> list of tool names, or None for all of them
    restart_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tools_picker")
        self._boxes: dict[str, QCheckBox] = {}
        self._states: dict[str, QLabel] = {}
        self._restarts: dict[str, QToolButton] = {}
        self._tool_boxes: dict[str, dict[str, QCheckBox]] = {}  # server -> tool -> box (ready servers' tools)
        self._shape: list[tuple[str, tuple[str, ...]]] = []
        self._grid = QGridLayout()
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(6)
        self._grid.setVerticalSpacing(0)
        self.note = wrapped_label(NOTE)
        set_role(self.note, "muted")
        self.problem = wrapped_label("", hidden=True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(wrapped_label("Tools"))
        layout.addLayout(self._grid)
        layout.addWidget(self.problem)
        layout.addWidget(self.note)

    def show_servers(self, statuses: list[ServerStatus], tools: ChatTools, problem: str | None = None) -> None:
        """Every configured server, ticked when this chat uses it, with its tools once it is ready; ``problem``:
        why the servers file is unreadable."""
        shape = [(s.name, tuple(t.name for t in s.tools)) for s in statuses]
        if shape != self._shape:
            self._rebuild(shape)
        t = tokens(self.palette())
        for status in statuses:
            used = status.name in tools.servers
            _set_checked(self._boxes[status.name], used)
            self._boxes[status.name].setEnabled(status.enabled)
            for name, box in self._tool_boxes[status.name].items():
                _set_checked(box, used and tools.offers(status.name, name))
                box.setEnabled(used)
            words, level = state_text(status)
            label = self._states[status.name]
            label.setText(words)
            label.setToolTip(words)
            set_text_color(label, t.error if level == "error" else t.warning if level == "warning" else t.muted)
            self._restarts[status.name].setEnabled(status.enabled and status.state is not ServerState.STARTING)
        self.problem.setText(problem or ("" if statuses else NO_SERVERS))
        self.problem.setVisible(bool(problem) or not statuses)

    def names(self) -> list[str]:
        """The servers listed."""
        return list(self._boxes)

    def chosen(self) -> dict[str, list[str] | None]:
        """The servers ticked, each with its tools ticked (None when all are, or none is listed yet)."""
        out: dict[str, list[str] | None] = {}
        for name, box in self._boxes.items():
            if box.isChecked():
                tools = self._tool_boxes[name]
                ticked = [tool for tool, tool_box in tools.items() if tool_box.isChecked()]
                out[name] = None if not tools or len(ticked) == len(tools) else ticked
        return out

    def box(self, name: str) -> QCheckBox:
        return self._boxes[name]

    def tool_names(self, server: str) -> list[str]:
        """The tools listed under ``server`` (none until it is ready)."""
        return list(self._tool_boxes.get(server, {}))

    def tool_box(self, server: str, tool: str) -> QCheckBox:
        return self._tool_boxes[server][tool]

    def state_label(self, name: str) -> QLabel:
        return self._states[name]

    def restart_button(self, name: str) -> QToolButton:
        return self._restarts[name]

    def _server_ticked(self, name: str, checked: bool) -> None:
        for box in self._tool_boxes[name].values():  # a server ticked again offers all its tools
            _set_checked(box, checked)
            box.setEnabled(checked)
        self.changed.emit(self.chosen())

    def _rebuild(self, shape: list[tuple[str, tuple[str, ...]]]) -> None:
        while (item := self._grid.takeAt(0)) is not None:
            if (widget := item.widget()) is not None:
                widget.deleteLater()
        self._boxes, self._states, self._restarts, self._tool_boxes = {}, {}, {}, {}
        row = 0
        for name, tools in shape:
            box = QCheckBox(name)
            box.setAccessibleName(f"Use the tools of {name} in this chat")
            box.toggled.connect(lambda checked, n=name: self._server_ticked(n, checked))
            restart = QToolButton()
            restart.setIcon(icon("refresh"))
            restart.setAutoRaise(True)
            restart.setToolTip(f"Restart {name}")
            restart.clicked.connect(lambda _=False, n=name: self.restart_requested.emit(n))
            state = QLabel()
            state.setWordWrap(True)
            state.setTextFormat(Qt.TextFormat.PlainText)
            self._grid.addWidget(box, row, 0)
            self._grid.addWidget(restart, row, 1, Qt.AlignmentFlag.AlignRight)
            self._grid.addWidget(state, row + 1, 0, 1, 2)
            row += 2
            self._tool_boxes[name] = {}
            for tool in tools:
                tool_box = QCheckBox(tool)
                tool_box.setAccessibleName(f"Offer {tool} of {name} in this chat")
                tool_box.setStyleSheet(f"margin-left: {TOOL_INDENT}px;")
                tool_box.toggled.connect(lambda _checked: self.changed.emit(self.chosen()))
                self._grid.addWidget(tool_box, row, 0, 1, 2)
                self._tool_boxes[name][tool] = tool_box
                row += 1
            self._boxes[name], self._states[name], self._restarts[name] = box, state, restart
        self._grid.setColumnStretch(0, 1)
        self._shape = shape


def _set_checked(box: QCheckBox, checked: bool) -> None:
    box.blockSignals(True)
    box.setChecked(checked)
    box.blockSignals(False)
