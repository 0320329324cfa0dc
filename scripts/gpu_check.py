#!/usr/bin/env python3
"""Exercise the real NVML path on a machine with an NVIDIA GPU.

Prints the monitor's GPU readings, then (when torch with CUDA is installed) allocates ~1 GiB on each GPU,
reads again, frees it and reads a third time, so the used-memory figures visibly move and this process
shows up in the per-process list. Exits 1 when they do not (used memory rose by less than half the allocation,
or this process is not listed); without a driver it prints why GPU readings are unavailable and exits 0.

    python scripts/gpu_check.py [--gib 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.monitor.snapshot import GpuReadout
from app.core.units import format_bytes
from app.services.monitor.nvml import NvmlReader


def show(title: str, readout: GpuReadout) -> None:
    print(f"== {title}")
    if readout.unavailable_reason:
        print(f"   No NVIDIA GPU: {readout.unavailable_reason}")
        return
    print(f"   driver {readout.driver_version}, CUDA driver API {readout.cuda_driver_version}")
    for g in readout.gpus:
        power = "N/A" if g.power_mw is None else f"{g.power_mw / 1000:.0f}"
        limit = "N/A" if g.power_limit_mw is None else f"{g.power_limit_mw / 1000:.0f} W"
        print(
            f"   GPU{g.index} {g.name} {g.uuid}: used {format_bytes(g.memory_used_bytes)} / "
            f"{format_bytes(g.memory_total_bytes)} (free {format_bytes(g.memory_free_bytes)}), "
            f"util {g.utilization_percent}%, {g.temperature_c} °C, power {power}/{limit}, "
            f"SM {g.clock_sm_mhz} MHz, mem {g.clock_memory_mhz} MHz"
        )
        for p in g.processes:
            mine = " <- this script" if p.pid == os.getpid() else ""
            print(f"      pid {p.pid} {p.name}: {format_bytes(p.used_bytes)}{mine}")


def verdict(before: GpuReadout, during: GpuReadout, allocated_bytes: int, pid: int) -> list[str]:
    """What failed: a GPU whose used memory (when NVML gives it) did not rise by half the allocation, or whose
    process list lacks this process. Empty when the check passed."""
    problems = []
    for b, d in zip(before.gpus, during.gpus, strict=False):
        if b.memory_used_bytes is not None and d.memory_used_bytes is not None:
            moved = d.memory_used_bytes - b.memory_used_bytes
            if moved < allocated_bytes / 2:
                problems.append(
                    f"GPU{b.index}: used memory rose by {format_bytes(moved)}, less than half of the "
                    f"{format_bytes(allocated_bytes)} allocated"
                )
        if all(p.pid != pid for p in d.processes):
            problems.append(f"GPU{b.index}: this process (pid {pid}) is missing from the GPU process list")
    if len(during.gpus) < len(before.gpus):
        problems.append(f"{len(before.gpus) - len(during.gpus)} GPU(s) vanished from the readings")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="GiB to allocate per GPU (default 1)")
    args = parser.parse_args()
    reader = NvmlReader()
    try:
        before = reader.read()
        show("before", before)
        if before.unavailable_reason:
            print("OK: no NVIDIA GPU or driver here, so there is nothing to check (not a failure on a CPU machine).")
            return 0
        try:
            import torch
        except ImportError:
            print("OK: readings only; torch is not installed (pip install torch to check that memory moves).")
            return 0
        if not torch.cuda.is_available():
            print("OK: readings only; this torch has no CUDA, so memory could not be moved.")
            return 0
        count = int(args.gib * 1024**3 // 4)
        blocks = [torch.ones(count, dtype=torch.float32, device=f"cuda:{i}") for i in range(torch.cuda.device_count())]
        torch.cuda.synchronize()
        time.sleep(0.5)
        during = reader.read()
        show(f"holding {args.gib:g} GiB per GPU", during)
        del blocks
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        time.sleep(0.5)
        after = reader.read()
        show("after freeing", after)
        for b, d, a in zip(before.gpus, during.gpus, after.gpus, strict=False):
            moved = (d.memory_used_bytes or 0) - (b.memory_used_bytes or 0)
            back = (d.memory_used_bytes or 0) - (a.memory_used_bytes or 0)
            print(f"GPU{b.index}: +{format_bytes(moved)} while holding, -{format_bytes(back)} after freeing")
        problems = verdict(before, during, count * 4, os.getpid())
        for problem in problems:
            print(f"FAIL: {problem}")
        if not problems:
            print("OK: the readings moved with the allocation and listed this process.")
        return 1 if problems else 0
    finally:
        reader.close()


if __name__ == "__main__":
    sys.exit(main())
