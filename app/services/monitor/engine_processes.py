"""Which processes are our engines, how much memory they hold, and which GPU processes are theirs.

An engine is named by its root PID (the llama.cpp worker, the vLLM server); its children (vLLM's engine
core and workers) belong to it too. The process tree is re-read every few seconds, not every sample, to keep
the monitor cheap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from app.backends.protocol import Backend, KvUsage, WorkerProcessBackend
from app.core.monitor.snapshot import GpuReading, ProcessRow
from app.services.library.names import model_display_name

if TYPE_CHECKING:
    from app.services.engines.host import EngineHost

TREE_REFRESH_S = 5.0


EMBEDDINGS = "llamacpp-embeddings"  # the engine host's embedding slot: a second llama.cpp worker
PARALLEL = "llamacpp-parallel"  # the engine host's parallel llama.cpp engine (``serve --parallel N``)


@dataclass(frozen=True)
class EngineTarget:
    """What the sampler should watch for one engine. ``metrics_url`` is a vLLM server's base URL."""

    kind: str  # "llamacpp" | "vllm" | EMBEDDINGS | PARALLEL
    label: str
    loaded: bool
    root_pid: int | None = None
    kv: KvUsage | None = None  # llama.cpp: the cells its last reply left
    metrics_url: str | None = None
    generated_tokens: int | None = None  # llama.cpp: tokens sampled so far over all replies (only grows)


class ProcessTrees:
    """Root PID → the PIDs of it and its descendants, cached for ``refresh_s``."""

    def __init__(self, refresh_s: float = TREE_REFRESH_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._refresh_s = refresh_s
        self._clock = clock
        self._cache: dict[int, tuple[float, tuple[int, ...]]] = {}

    def pids(self, root_pid: int) -> tuple[int, ...]:
        """The root and its descendants; () when the root is gone."""
        now = self._clock()
        cached = self._cache.get(root_pid)
        if cached is not None and now - cached[0] < self._refresh_s:
            return cached[1]
        pids = _tree(root_pid)
        self._cache[root_pid] = (now, pids)
        return pids

    def forget_except(self, roots: Iterable[int]) -> None:
        keep = set(roots)
        for root in [r for r in self._cache if r not in keep]:
            del self._cache[root]


def _tree(root_pid: int) -> tuple[int, ...]:
    try:
        root = psutil.Process(root_pid)
        children = root.children(recursive=True)
    except (psutil.Error, OSError):
        return ()
    return (root_pid, *sorted(c.pid for c in children))


def rss_bytes(pids: Iterable[int]) -> int | None:
    """Resident memory summed over the processes still alive; None when none could be read."""
    total, seen = 0, False
    for pid in pids:
        try:
            total += int(psutil.Process(pid).memory_info().rss)
            seen = True
        except (psutil.Error, OSError):
            continue
    return total if seen else None


def attribute_gpu_processes(
    gpus: Iterable[GpuReading], engine_pids: Mapping[str, Iterable[int]]
) -> tuple[tuple[ProcessRow, ...], dict[str, int | None]]:
    """Rows for every GPU process (tagged with its engine or None) and each engine's GPU bytes.

    An engine's figure is None when it has no GPU process or the driver gives no per-process figure.
    """
    owner = {pid: kind for kind, pids in engine_pids.items() for pid in pids}
    rows: list[ProcessRow] = []
    per_engine: dict[str, int | None] = {kind: None for kind in engine_pids}
    for gpu in gpus:
        for proc in gpu.processes:
            kind = owner.get(proc.pid)
            rows.append(ProcessRow(gpu.index, proc.pid, proc.name, proc.used_bytes, kind))
            if kind is not None and proc.used_bytes is not None:
                per_engine[kind] = (per_engine[kind] or 0) + proc.used_bytes
    return tuple(rows), per_engine


def llamacpp_target(backend: Backend) -> EngineTarget | None:
    """The llama.cpp engine as the sampler sees it (worker PID, model, KV cells); None when no worker runs."""
    if not isinstance(backend, WorkerProcessBackend):
        return None
    pid, model = backend.worker_pid, backend.model
    if pid is None and model is None:
        return None
    name = model_display_name(model.name, model.path) if model is not None else ""
    label = f"llama.cpp: {name}" if model is not None else "llama.cpp worker (no model)"
    generated = backend.generated_tokens_total
    return EngineTarget("llamacpp", label, model is not None, pid, backend.kv_usage(), generated_tokens=generated)


def vllm_target(
    base_url: str, *, pid: int | None = None, label: str | None = None, loaded: bool = True
) -> EngineTarget:
    """A vLLM server by address (its KV figures come from ``/metrics``) and, when we started it, its PID."""
    return EngineTarget("vllm", label or f"vLLM at {base_url}", loaded, pid, None, base_url)


def host_targets(host: EngineHost) -> list[EngineTarget]:
    """The engines the host runs, for the monitor: the llama.cpp worker and the vLLM server offered (with its PID
    when the app started it, so its processes' memory is counted), or the app's server still starting; the
    embedding worker and the parallel llama.cpp engine while they run."""
    engines = [llamacpp_target(host.llamacpp), _embedding_target(host), _parallel_target(host)]
    targets = [t for t in engines if t is not None]
    endpoint, server = host.vllm_endpoint, host.vllm_server.server
    if endpoint is not None:
        label = f"vLLM: {endpoint.served_model}"
        targets.append(vllm_target(endpoint.base_url, pid=endpoint.pid, label=label))
    elif server is not None and server.pid is not None:
        targets.append(EngineTarget("vllm", "vLLM (starting)", True, server.pid))  # memory only; no /metrics yet
    return targets


def _embedding_target(host: EngineHost) -> EngineTarget | None:
    """The embedding model loaded beside the chat model, in its own worker (memory and CPU; no KV to show)."""
    slot = host.embedding_slot
    backend = slot.backend if slot is not None else None
    if slot is None or slot.loaded is None or not isinstance(backend, WorkerProcessBackend):
        return None
    name = model_display_name(slot.loaded.info.name, slot.loaded.entry)
    return EngineTarget(EMBEDDINGS, f"llama.cpp embeddings: {name}", True, backend.worker_pid)


def _parallel_target(host: EngineHost) -> EngineTarget | None:
    """The parallel llama.cpp engine while it runs: its process, and its slots' cells as one KV figure (per slot)."""
    loaded = host.parallel.loaded
    if loaded is None:
        return None
    snapshot = host.parallel.snapshot()
    cells = {s.slot: s.cells for s in snapshot.slots}
    kv = KvUsage(snapshot.cells_used, snapshot.cells_total, cells) if snapshot.cells_total else None
    name = model_display_name(loaded.info.name, loaded.entry)
    label = f"llama.cpp parallel ({loaded.slots} slots): {name}"
    return EngineTarget(PARALLEL, label, True, snapshot.pid, kv, generated_tokens=snapshot.generated_total)
