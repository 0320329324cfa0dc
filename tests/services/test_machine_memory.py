"""read_machine_memory over a fake NvmlReader (no GPU here) that returns contract-A readouts."""

from __future__ import annotations

import psutil

from app.services.monitor.machine_memory import read_machine_memory
from app.services.monitor.nvml import GpuReading, GpuReadout

GIB = 1 << 30


def _gpu(index: int, free: int | None, total: int | None) -> GpuReading:
    return GpuReading(
        index=index, name=f"GPU {index}", uuid=None, memory_total_bytes=total,
        memory_used_bytes=None if total is None or free is None else total - free, memory_free_bytes=free,
        utilization_percent=None, temperature_c=None, power_mw=None, power_limit_mw=None, clock_sm_mhz=None,
        clock_memory_mhz=None, processes=(),
    )  # fmt: skip


class FakeReader:
    def __init__(self, readout: GpuReadout) -> None:
        self.readout = readout
        self.closed = False

    def read(self) -> GpuReadout:
        return self.readout

    def close(self) -> None:
        self.closed = True


def test_two_gpus_and_ram():
    readout = GpuReadout((_gpu(0, 20 * GIB, 24 * GIB), _gpu(1, 7 * GIB, 8 * GIB)), None, "550.1", 12040)
    reader = FakeReader(readout)
    memory = read_machine_memory(reader)
    assert memory.gpu_names == ("GPU 0", "GPU 1") and memory.gpu_free_bytes == (20 * GIB, 7 * GIB)
    assert memory.gpu_total_bytes == (24 * GIB, 8 * GIB) and memory.gpu_unavailable_reason is None
    assert memory.ram_total_bytes == psutil.virtual_memory().total and memory.ram_available_bytes > 0
    assert not reader.closed  # a reader passed in belongs to the caller


def test_no_driver_gives_the_reason():
    readout = GpuReadout((), "No NVIDIA driver found (NVML library not found).", None, None)
    memory = read_machine_memory(FakeReader(readout))
    assert memory.gpu_free_bytes == () and "No NVIDIA driver" in (memory.gpu_unavailable_reason or "")


def test_gpu_without_memory_figures_is_left_out():
    memory = read_machine_memory(FakeReader(GpuReadout((_gpu(0, None, None),), None, None, None)))
    assert memory.gpu_names == () and memory.gpu_unavailable_reason == "No GPU reported its memory."


def test_real_nvml_here_reports_no_gpu():
    memory = read_machine_memory()
    assert memory.ram_available_bytes > 0
    assert memory.gpu_names or memory.gpu_unavailable_reason
