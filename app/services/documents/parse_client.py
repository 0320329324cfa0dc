"""The app's side of the parse worker: start it, give it one file, wait at most the time bound, kill it when the
bound runs out, when it crashes or when the indexing is cancelled. Blocking: call from a worker thread."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from app.core.documents.chunking import PageText

WORKER_MODULE = "app.services.documents.parse_worker"
START_TIMEOUT_S = 60.0
_EXITED = None  # what the reader thread queues when the worker's stdout closes


@dataclass(frozen=True)
class ParseOutcome:
    pages: list[PageText] | None = None
    reason: str | None = None  # why there are no pages


class ParseWorker:
    """One parse worker at a time, started on first use and again after it was killed."""

    def __init__(self, timeout_s: float, memory_bytes: int) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._lock = threading.Lock()

    def parse(self, path: Path, kind: str) -> ParseOutcome:
        """The pages of ``path``, or the reason there are none (timeout and crash included)."""
        proc = self._running()
        if proc is None:
            return ParseOutcome(reason="the parser process did not start")
        request = json.dumps({"path": str(path), "kind": kind}) + "\n"
        try:
            assert proc.stdin is not None
            proc.stdin.write(request.encode("utf-8"))
            proc.stdin.flush()
        except (OSError, ValueError):  # the worker died, or a cancel killed it and closed the pipe meanwhile
            return ParseOutcome(reason=self._crash_reason(proc))
        try:
            reply = self._replies.get(timeout=self.timeout_s)
        except queue.Empty:
            self.kill()
            return ParseOutcome(reason=f"timed out after {self.timeout_s:g} s (the parser was stopped)")
        if reply is None:
            return ParseOutcome(reason=self._crash_reason(proc))
        if not reply.get("ok"):
            return ParseOutcome(reason=str(reply.get("reason")))
        return ParseOutcome(pages=[_page(item) for item in reply["pages"]])

    def kill(self) -> None:
        """Stop the worker now (thread-safe); the next :meth:`parse` starts a new one."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    # a request half written by the parsing thread cannot be flushed to a dead worker
                    with contextlib.suppress(OSError, ValueError):
                        stream.close()

    close = kill

    def _running(self) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
        return self._start()

    def _start(self) -> subprocess.Popen[bytes] | None:
        self.kill()
        self._replies = queue.Queue()
        proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, "--memory-bytes", str(self.memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_worker_env(),
            start_new_session=True,  # a Ctrl+C in the terminal reaches the app, which then stops the worker
        )
        assert proc.stdout is not None
        threading.Thread(target=_read_replies, args=(proc.stdout, self._replies), daemon=True).start()
        with self._lock:
            self._proc = proc
        try:
            ready = self._replies.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            ready = None
        if ready is None or not ready.get("ready"):
            self.kill()
            return None
        return proc

    def _crash_reason(self, proc: subprocess.Popen[bytes]) -> str:
        returncode = proc.wait()
        self.kill()
        if returncode is not None and returncode < 0:
            try:
                how = f"killed by {signal.Signals(-returncode).name}"
            except ValueError:
                how = f"killed by signal {-returncode}"
        else:
            how = f"exit code {returncode}"
        return f"the parser crashed ({how}; the memory limit is {self.memory_bytes // 2**20} MiB)"


def _read_replies(stream: IO[bytes], replies: queue.Queue[dict[str, Any] | None]) -> None:
    try:
        for line in stream:
            replies.put(json.loads(line))
    except (OSError, ValueError):
        pass
    replies.put(_EXITED)


def _page(item: list[Any]) -> PageText:
    text, page, headings = item
    return PageText(text, page, tuple((int(offset), str(heading)) for offset, heading in headings))


def _worker_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    package_root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env
