"""SIGINT/SIGTERM for the window, from the entry point's first line to the process's exit, and the start-up and
shutdown phases tests send them at. Qt-free and stdlib-only: the entry point imports it before anything else."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

QUIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# For tests: "print" writes "llmw-phase NAME" on stderr as start-up and shutdown reach each phase; "step" also waits
# for a line on stdin after each, so a test can send a signal at exactly that moment.
PHASES_ENV = "LLMW_PHASES"


class QuitRequest:
    """Until the window can close, a quit signal is remembered; then it closes the window once, the normal way (the
    reply in flight saved, the worker stopped); later ones change nothing. A process that turns out not to be the
    window gets its signals back with :meth:`release`, and one that came meanwhile is delivered then."""

    def __init__(self) -> None:
        self.requested: int | None = None  # the first quit signal received
        self._close: Callable[[], None] | None = None
        self._before: dict[int, Any] = {}  # the handlers catch() replaced

    def catch(self) -> None:
        if not self._before:
            self._before = {signum: signal.signal(signum, self._signalled) for signum in QUIT_SIGNALS}

    def release(self) -> None:
        """Not the window after all (a CLI verb, the worker): the handlers from before :meth:`catch` again, and a
        signal that came since takes effect now."""
        before, self._before = self._before, {}
        for signum, handler in before.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: one set outside Python
        if before and self.requested is not None:
            signum, self.requested = self.requested, None
            signal.raise_signal(signum)

    def close_with(self, close: Callable[[], None] | None) -> None:
        """From now on a quit request calls ``close`` (None: nothing more to do); one made earlier calls it now."""
        self._close = close
        if self.requested is not None and close is not None:
            close()

    def _signalled(self, signum: int, _frame: object) -> None:
        if self.requested is None:
            self.requested = signum
            if self._close is not None:
                self._close()


QUIT = QuitRequest()


def phase(name: str) -> None:
    """Say that start-up or shutdown reached ``name`` (``LLMW_PHASES``; tests send signals at these moments)."""
    mode = os.environ.get(PHASES_ENV)
    if not mode:
        return
    print(f"llmw-phase {name}", file=sys.stderr, flush=True)
    if mode == "step":
        sys.stdin.readline()
