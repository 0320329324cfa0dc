"""Opening a command in the desktop's terminal emulator, as argv (no shell): ``$TERMINAL`` when set, else the
first on ``PATH`` of Debian's ``x-terminal-emulator`` and the common emulators. Each is given the command the way
it takes one (``-e CMD ARGS…``, ``-- CMD ARGS…``, ``-x …``, or the command alone)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import UnavailableError

# name on PATH -> what goes between it and the command
TERMINALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x-terminal-emulator", ("-e",)),
    ("gnome-terminal", ("--",)),
    ("konsole", ("-e",)),
    ("xfce4-terminal", ("-x",)),
    ("mate-terminal", ("-x",)),
    ("tilix", ("-e",)),
    ("kitty", ()),
    ("alacritty", ("-e",)),
    ("wezterm", ("start", "--")),
    ("foot", ()),
    ("xterm", ("-e",)),
)
_started: list[subprocess.Popen[bytes]] = []  # terminals opened: kept to be reaped (no zombie, no warning)
NO_TERMINAL = (
    "No terminal emulator was found (none of $TERMINAL, " + ", ".join(name for name, _ in TERMINALS) + " is on "
    "PATH): copy the command and run it in a terminal."
)


@dataclass(frozen=True)
class Terminal:
    path: str
    before_command: tuple[str, ...]

    def argv(self, command: Sequence[str]) -> list[str]:
        return [self.path, *self.before_command, *command]


def find_terminal(env: Mapping[str, str] | None = None) -> Terminal | None:
    """The terminal emulator to use (see the module docstring), or None."""
    env = os.environ if env is None else env
    path = env.get("PATH", os.defpath)
    chosen = (env.get("TERMINAL") or "").strip()
    if chosen and (found := shutil.which(chosen, path=path)):
        known = dict(TERMINALS).get(Path(found).name)
        return Terminal(found, ("-e",) if known is None else known)
    for name, before in TERMINALS:
        if found := shutil.which(name, path=path):
            return Terminal(found, before)
    return None


def open_in_terminal(command: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Start ``command`` in a new terminal window, detached (it outlives the app); returns the argv that ran.
    UnavailableError (saying to copy the command) when there is no terminal or it cannot start."""
    env = dict(os.environ if env is None else env)
    terminal = find_terminal(env)
    if terminal is None:
        raise UnavailableError(NO_TERMINAL)
    argv = terminal.argv(command)
    _started[:] = [p for p in _started if p.poll() is None]
    try:
        process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    except OSError as exc:
        raise UnavailableError(f"{terminal.path} could not start ({exc}): copy the command and run it.") from None
    _started.append(process)
    return argv
