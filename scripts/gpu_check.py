#!/usr/bin/env python3
"""Exercise the real NVML path on a machine with an NVIDIA GPU.

Prints the monitor's GPU readings, then (when torch with CUDA is installed) allocates ~1 GiB on each GPU,
reads again, frees it and reads a third time, so the used-memory figures visibly move and this process
shows up in the per-process list. Without a driver it prints why GPU readings are unavailable and exits 0.

    python scripts/gpu_check.py [--gib 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.monitor_snapshot import GpuReadout, format_bytes
from app.services.nvml import NvmlReader


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="GiB to allocate per GPU (default 1)")
    args = parser.parse_args()
    reader = NvmlReader()
    try:
        before = reader.read()
        show("before", before)
        if before.unavailable_reason:
            return 0
        try:
            import torch
        except ImportError:
            print("torch is not installed: readings only (pip install torch to see memory move).")
            return 0
        if not torch.cuda.is_available():
            print("torch has no CUDA here: readings only.")
            return 0
        blocks = []
        for index in range(torch.cuda.device_count()):
            count = int(args.gib * 1024**3 // 4)
            blocks.append(torch.ones(count, dtype=torch.float32, device=f"cuda:{index}"))
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
        return 0
    finally:
        reader.close()


if __name__ == "__main__":
    sys.exit(main())
