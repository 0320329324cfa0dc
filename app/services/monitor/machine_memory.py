"""The machine's memory right now: free VRAM per GPU (NVML) and system RAM (psutil), and whether llama.cpp keeps
AMX copies of weights on its CPU. Blocking: call it off the Qt thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.backends.llamacpp.cpu_features import llama_cpp_uses_amx
from app.core.memory.fit import MachineMemory
from app.services.paths import app_paths

if TYPE_CHECKING:
    from app.services.monitor.nvml import NvmlReader


def read_machine_memory(nvml: NvmlReader | None = None) -> MachineMemory:
    """Free/total memory of every GPU NVML sees (none, with the reason, when it sees none) and system RAM.

    ``nvml`` is an ``app.services.monitor.nvml.NvmlReader`` (anything with ``read()`` returning a ``GpuReadout``); a
    private one is created and closed when it is None.
    """
    import psutil

    own = nvml is None
    if nvml is None:
        from app.services.monitor.nvml import NvmlReader

        nvml = NvmlReader()
    try:
        readout = nvml.read()
    finally:
        if own:
            nvml.close()
    gpus = [g for g in readout.gpus if g.memory_free_bytes is not None and g.memory_total_bytes is not None]
    reason = readout.unavailable_reason
    if not gpus and reason is None:
        reason = "No GPU reported its memory." if readout.gpus else "No NVIDIA GPU found."
    ram = psutil.virtual_memory()
    return MachineMemory(
        gpu_names=tuple(g.name for g in gpus),
        gpu_free_bytes=tuple(g.memory_free_bytes or 0 for g in gpus),
        gpu_total_bytes=tuple(g.memory_total_bytes or 0 for g in gpus),
        ram_total_bytes=int(ram.total),
        ram_available_bytes=int(ram.available),
        gpu_unavailable_reason=reason if not gpus else None,
        cpu_amx=llama_cpp_uses_amx() and not app_paths().llama_kernel_fallback.exists(),
    )
