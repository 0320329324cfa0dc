"""The app's side of the worker process: spawn it, read its events on threads, hand them to asyncio."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import IO, Any

from app.backends.llamacpp import protocol

log = logging.getLogger("app.backends.llamacpp")
native_log = logging.getLogger("app.backends.llamacpp.native")

EventHandler = Callable[[dict[str, Any]], None]


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "it stopped answering"
    if returncode < 0:
        try:
            return f"it was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"it was killed by signal {-returncode}"
    return f"it exited with code {returncode}"


# A frozen bundle (PyInstaller) has no Python interpreter to run ``-m``: its executable starts the worker when
# this is its first argument (see app/__main__.py).
FROZEN_WORKER_FLAG = "--llamacpp-worker"


def _frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def worker_command(python: str | None = None) -> list[str]:
    """The argv that starts the worker: ``python -m app.backends.llamacpp.worker``, or in a frozen bundle the
    bundle's own executable with :data:`FROZEN_WORKER_FLAG` (an explicit ``python`` always wins)."""
    if python is None and _frozen():
        return [sys.executable, FROZEN_WORKER_FLAG]
    return [python or sys.executable, "-m", protocol.WORKER_MODULE]


class WorkerProcess:
    """One running worker. Events and the exit are delivered on ``loop`` through ``on_event``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_event: EventHandler,
        python: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self._loop = loop
        self._extra_env = dict(extra_env or {})
        self._on_event = on_event
        self._command = worker_command(python)
        self._proc: subprocess.Popen[bytes] | None = None
        self._write_lock = threading.Lock()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self._extra_env)
        if not _frozen():
            package_root = str(Path(__file__).resolve().parents[3])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a Ctrl+C in the terminal reaches the app, which then stops the worker
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        threading.Thread(target=self._read_events, args=(self._proc.stdout,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(self._proc.stderr,), daemon=True).start()
        log.info("llama.cpp worker started (pid %s)", self._proc.pid)

    def send(self, message: dict[str, Any]) -> bool:
        """Send a command; False when the worker is gone."""
        if not self.alive or self._proc is None or self._proc.stdin is None:
            return False
        try:
            with self._write_lock:
                self._proc.stdin.write(protocol.encode(message))
                self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def _read_events(self, stream: IO[bytes]) -> None:
        for line in stream:
            try:
                event = protocol.decode(line, what="a message from the llama.cpp worker")
            except ValueError:  # safe_json.JsonError: malformed, nested too deeply or too large
                log.warning("unreadable message from the worker: %r", line[:200])
                continue
            self._deliver(event)
        returncode = self._proc.wait() if self._proc else None
        self._deliver({"event": "exit", "returncode": returncode, "pid": self.pid})

    def _read_stderr(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.stderr_tail.append(line)
                native_log.debug("%s", line)

    def _deliver(self, event: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # loop closed: the app is shutting down
            self._loop.call_soon_threadsafe(self._on_event, event)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit, then terminate, then kill. Blocking: call from a thread."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self.send({"op": "shutdown"})
        try:
            proc.stdin.close() if proc.stdin else None
            proc.wait(timeout)
        except (subprocess.TimeoutExpired, OSError):
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()


def restore_library_path(environ: MutableMapping[str, str]) -> None:
    """In a frozen bundle PyInstaller's bootloader points LD_LIBRARY_PATH at the bundle's own libraries (its
    libstdc++, OpenSSL, glib…). This process has already read it; programs we start (pip, vLLM, xdg-open, the
    desktop-cache tools) must see the user's value, or they load the bundle's copies and can fail."""
    original = environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        environ["LD_LIBRARY_PATH"] = original
    else:
        environ.pop("LD_LIBRARY_PATH", None)
