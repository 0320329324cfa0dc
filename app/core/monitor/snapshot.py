"""Immutable monitor readings: GPUs, RAM, CPU and the engines (memory and KV cache) at one moment.

Pure data: the sampler (``app.services.monitor.sampler``) fills them, the panel and the CLI read them.
The GPU classes are re-exported by ``app.services.monitor.nvml``, which produces them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory; ``used_bytes`` is None where the driver cannot tell."""

    pid: int
    name: str | None
    used_bytes: int | None


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment; every figure is None when NVML cannot give it."""

    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_percent: int | None
    temperature_c: int | None
    power_mw: int | None
    power_limit_mw: int | None
    clock_sm_mhz: int | None
    clock_memory_mhz: int | None
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class GpuReadout:
    """All GPUs at one moment, or the reason there are none to show."""

    gpus: tuple[GpuReading, ...]
    unavailable_reason: str | None
    driver_version: str | None
    cuda_driver_version: int | None


@dataclass(frozen=True)
class RamReading:
    total_bytes: int
    used_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class KvReading:
    """An engine's KV cache. llama.cpp: context cells per sequence against ``total_cells`` (n_ctx).
    vLLM: the block pool (``num_blocks`` × ``block_size_tokens``) and its usage fraction, from ``/metrics``."""

    usage_fraction: float | None = None
    used_cells: int | None = None
    total_cells: int | None = None
    cells_per_sequence: tuple[tuple[int, int], ...] = ()
    num_blocks: int | None = None
    used_blocks: int | None = None
    block_size_tokens: int | None = None
    requests_running: int | None = None
    requests_waiting: int | None = None
    preemptions_total: int | None = None
    prefix_cache_hit_rate: float | None = None  # over the last sample interval (the first: since start)
    generation_tokens_per_s: float | None = None
    # speculative decoding (vLLM): accepted / drafted over the last interval, else since start; tokens per step
    spec_acceptance_rate: float | None = None
    spec_mean_accepted_length: float | None = None
    # vLLM's host KV tier (KV offloading): configured size, bytes moved since start and per second now
    host_tier_capacity_bytes: int | None = None
    host_tier_store_bytes_total: float | None = None
    host_tier_load_bytes_total: float | None = None
    host_tier_store_bytes_per_s: float | None = None
    host_tier_load_bytes_per_s: float | None = None
    host_swap_bytes_lower_bound: float | None = None  # store + load: swap traffic is at least this
    cached_prompt_tokens_by_source: tuple[tuple[str, float], ...] = ()  # ("device", 70.0), ("host", 20.0)…


@dataclass(frozen=True)
class EngineReading:
    """One engine (llama.cpp worker, vLLM server): its processes, their memory and its KV cache."""

    kind: str  # "llamacpp" | "vllm"
    label: str  # model name or server address
    loaded: bool
    pids: tuple[int, ...] = ()
    rss_bytes: int | None = None
    gpu_bytes: int | None = None  # summed over its processes, None when NVML cannot tell
    kv: KvReading | None = None
    problem: str | None = None  # e.g. "/metrics unreachable", in words


@dataclass(frozen=True)
class ProcessRow:
    """A GPU process for the table: which engine it belongs to, or None for other programs."""

    gpu_index: int
    pid: int
    name: str | None
    used_bytes: int | None
    engine: str | None


@dataclass(frozen=True)
class MonitorSnapshot:
    taken_at_s: float  # wall-clock seconds (time.time())
    gpus: tuple[GpuReading, ...]
    gpu_unavailable_reason: str | None
    ram: RamReading
    cpu_percent: float | None
    engines: tuple[EngineReading, ...] = ()
    processes: tuple[ProcessRow, ...] = field(default=())

    @property
    def gpu_used_bytes(self) -> int | None:
        values = [g.memory_used_bytes for g in self.gpus if g.memory_used_bytes is not None]
        return sum(values) if values else None

    @property
    def gpu_total_bytes(self) -> int | None:
        values = [g.memory_total_bytes for g in self.gpus if g.memory_total_bytes is not None]
        return sum(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        """The ``monitor --once --json`` shape."""
        return {
            "taken_at_s": self.taken_at_s,
            "gpus": [asdict(g) for g in self.gpus],
            "gpu_unavailable_reason": self.gpu_unavailable_reason,
            "ram": asdict(self.ram),
            "cpu_percent": self.cpu_percent,
            "backends": [asdict(e) for e in self.engines],
            "processes": [asdict(p) for p in self.processes],
        }
