"""Peak memory of an engine while a bench runs, sampled on a helper thread.

With a working NVML the figure is the GPU memory NVML attributes to the engine's processes (the process and
all its descendants, summed over GPUs). Without one (a CPU-only machine, no driver) it is the resident memory
(RSS) of the same process tree. A server the app did not start is found by its listening port.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from app.services.monitor.nvml import NvmlReader

log = logging.getLogger("app.services.bench")

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def process_tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants that still run; empty when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss_bytes(pid: int) -> int | None:
    """Summed RSS of ``pid`` and its descendants; None when the process is gone."""
    total, seen = 0, False
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
            seen = True
    return total if seen else None


def tree_gpu_bytes(pid: int, readout: Any) -> int | None:
    """GPU memory NVML attributes to ``pid``'s tree (a ``GpuReadout``); None when it reports none for them."""
    pids = {p.pid for p in process_tree(pid)}
    used = [proc.used_bytes for gpu in readout.gpus for proc in gpu.processes if proc.pid in pids]
    known = [u for u in used if u is not None]
    return sum(known) if known else None


def pid_listening_on(url: str) -> int | None:
    """The PID of the local process listening on ``url``'s port; None for a remote host or when not found."""
    split = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if (split.hostname or "") not in LOCAL_HOSTS:
        return None
    port = split.port or (443 if split.scheme == "https" else 80)
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError) as exc:
        log.info("cannot list listening sockets: %s", exc)
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    return None


class PeakMemorySampler:
    """Samples the memory of the process tree under ``pid()`` every ``interval_s`` on a daemon thread.

    ``pid`` is a callable so a worker that restarts is followed. ``nvml`` is an ``NvmlReader`` (None: RSS only).
    Use ``start()`` / ``stop()`` around one configuration; ``peak_bytes`` and ``source`` hold the result.
    """

    def __init__(self, pid: Callable[[], int | None], nvml: NvmlReader | None = None, interval_s: float = 0.2) -> None:
        self._pid = pid
        self._nvml = nvml
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_bytes: int | None = None
        self.source: str | None = None

    def start(self) -> None:
        self.peak_bytes, self.source = None, None
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="bench-memory", daemon=True)
        self._thread.start()

    def stop(self) -> int | None:
        """Stop sampling (one last sample first) and return the peak in bytes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        return self.peak_bytes

    def sample(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        value, source = None, None
        if self._nvml is not None:
            value, source = tree_gpu_bytes(pid, self._nvml.read()), "gpu"
        if value is None:
            value, source = tree_rss_bytes(pid), "rss"
        if value is not None and (self.peak_bytes is None or value > self.peak_bytes or self.source != source):
            if self.source == "gpu" and source == "rss":
                return  # once NVML saw the engine, keep GPU figures
            self.peak_bytes, self.source = value, source

    def _loop(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a sampler must never take the bench down
                log.exception("memory sample failed")
            if self._stop.wait(self._interval_s):
                with contextlib.suppress(Exception):
                    self.sample()
                return
