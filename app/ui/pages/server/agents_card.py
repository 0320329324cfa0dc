"""The Server page's "Launch a coding agent" card: a row per agent (Claude Code, Codex, OpenCode) saying whether it
is installed (and how to install it when not), with a button that opens it in a terminal on this server. The page
does the launching (``launch_requested``); this card only shows and asks."""

from __future__ import annotations

import asyncio
import html
import shlex
from collections.abc import Mapping

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.services.agents.agents import AGENTS, Agent, Located, locate
from app.ui.style.icons import icon
from app.ui.style.theme import SPACE_S, set_role
from app.ui.tasks import spawn


class _AgentRow:
    def __init__(self, agent: Agent, card: AgentsCard) -> None:
        self.agent = agent
        self.name = QLabel(f"<b>{agent.name}</b>")
        self.wire = QLabel(agent.wire)
        set_role(self.wire, "muted")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_install = QToolButton()
        self.copy_install.setIcon(icon("copy"))
        self.copy_install.setToolTip(f"Copy the install command ({agent.install_command})")
        self.copy_install.clicked.connect(lambda: card.copy_install_command(agent.id))
        self.open = QPushButton(icon("play"), "Open in terminal")
        self.open.setObjectName(f"launch_{agent.id}")
        self.open.clicked.connect(lambda: card.launch_requested.emit(agent.id))

    def show_state(self, found: Located | None) -> None:
        installed = found is not None
        command = f"<nobr><code>{html.escape(self.agent.install_command)}</code></nobr>"
        self.status.setText(f"Installed · {html.escape(found.where)}" if found else f"Not installed: {command}")
        self.status.setToolTip(shlex.join(found.argv) if found else "npm comes with Node.js")
        self.copy_install.setVisible(not installed)
        self.open.setEnabled(installed)
        self.open.setToolTip(
            f"Start {self.agent.name} in a terminal, its environment pointed at this server (started first)"
            if installed
            else f"Install {self.agent.name} first: {self.agent.install_command}"
        )


class AgentsCard(QFrame):
    launch_requested = Signal(str)  # an agent's id

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "card")
        heading = QLabel("Launch a coding agent")
        set_role(heading, "section")
        about = QLabel(
            "Each runs unmodified in a terminal, pointed at this server (started first; its own settings are left "
            "alone). From a shell: <code>llm-workstation launch claude</code> (or codex, opencode)."
        )
        about.setWordWrap(True)
        set_role(about, "muted")
        recheck = QPushButton(icon("refresh"), "Check again")
        recheck.setToolTip("Look for the agents again (after installing one)")
        recheck.clicked.connect(lambda: self.refresh())
        top = QHBoxLayout()
        top.addWidget(heading, 1)
        top.addWidget(recheck)
        grid = QGridLayout()
        grid.setHorizontalSpacing(SPACE_S * 2)
        grid.setColumnStretch(1, 1)
        self.rows: dict[str, _AgentRow] = {}
        for index, agent in enumerate(AGENTS):
            row = self.rows[agent.id] = _AgentRow(agent, self)
            names = QVBoxLayout()
            names.setSpacing(0)
            names.addWidget(row.name)
            names.addWidget(row.wire)
            grid.addLayout(names, index, 0)
            grid.addWidget(row.status, index, 1)
            grid.addWidget(row.copy_install, index, 2)
            grid.addWidget(row.open, index, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(about)
        layout.addLayout(grid)
        self.refresh()

    def refresh(self, env: Mapping[str, str] | None = None) -> asyncio.Task[None]:
        """Look for each agent again, off the Qt thread (``env``: the environment to search, the app's by default);
        the rows say "Checking…" until the lookup is done. Returns the task, which tests await."""
        for row in self.rows.values():
            row.status.setText("Checking…")
            row.open.setEnabled(False)
        self.checking = spawn(self._look(env), "look for coding agents")
        return self.checking

    async def _look(self, env: Mapping[str, str] | None) -> None:
        agents = [row.agent for row in self.rows.values()]
        # PATH lookups and the npx cache listing read the disk
        found = await asyncio.to_thread(lambda: [locate(agent, env) for agent in agents])
        for row, located in zip(self.rows.values(), found, strict=True):
            row.show_state(located)

    def copy_install_command(self, agent_id: str) -> str:
        command = self.rows[agent_id].agent.install_command
        QGuiApplication.clipboard().setText(command)
        return command
