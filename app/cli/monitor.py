"""``llm-workstation monitor`` (GPUs, RAM, CPU, a vLLM server's KV cache) and ``bench monitor`` (its CPU cost).

Exit codes: 0 done (Ctrl-C ends a continuous run normally); 1 the vLLM endpoint could not be read;
2 bad input (interval, count, endpoint).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from app.cli.common import EXIT_BAD_INPUT, fail
from app.core.monitor.snapshot import MonitorSnapshot
from app.core.units import MISSING, format_bytes

if TYPE_CHECKING:
    from app.services.monitor.sampler import MonitorSampler

VERBS = ("monitor",)
BENCH_KINDS = ("monitor",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    monitor = verbs.add_parser("monitor", help="GPU, RAM, CPU and vLLM KV-cache readings, once or every interval")
    monitor.add_argument("--once", action="store_true", help="print one snapshot and exit")
    monitor.add_argument("--json", action="store_true", help="print snapshots as JSON (one object per line)")
    monitor.add_argument("--interval", type=float, default=0.5, help="seconds between snapshots (default 0.5)")
    monitor.add_argument("--count", type=int, default=None, help="stop after this many snapshots")
    monitor.add_argument("--endpoint", default=None, help="a running vLLM server's URL, to include its KV cache")


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser("monitor", help="the monitor's CPU cost at its interval, against an idle baseline")
    bench.add_argument("--seconds", type=float, default=10.0, help="length of each phase (default 10)")
    bench.add_argument("--interval", type=float, default=0.5, help="sampling interval (default 0.5 = 2 Hz)")
    bench.add_argument("--endpoint", default=None, help="also read this vLLM server's /metrics each sample")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")


def _problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if not 0.05 <= args.interval <= 3600:
        problems.append(f"--interval must be between 0.05 and 3600 seconds (got {args.interval}).")
    if getattr(args, "count", None) is not None and args.count < 1:
        problems.append(f"--count must be 1 or more (got {args.count}).")
    if getattr(args, "seconds", 1.0) <= 0:
        problems.append(f"--seconds must be above 0 (got {args.seconds}).")
    endpoint = args.endpoint
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        problems.append(
            f"--endpoint must be an http:// or https:// URL such as http://127.0.0.1:8000 (got {endpoint!r})."
        )
    return problems


def _sampler(args: argparse.Namespace) -> MonitorSampler:
    from app.services.monitor.engine_processes import vllm_target
    from app.services.monitor.sampler import MonitorSampler

    targets = [vllm_target(args.endpoint.rstrip("/"))] if args.endpoint else []
    return MonitorSampler(targets=lambda: targets, interval_s=args.interval)


def run(args: argparse.Namespace) -> int:
    if problems := _problems(args):
        return fail(" ".join(problems), EXIT_BAD_INPUT)
    sampler = _sampler(args)
    count = 1 if args.once else args.count
    printed, failed = 0, None
    try:
        sampler.sample()  # primes psutil's CPU percentage, which needs two readings
        time.sleep(min(args.interval, 0.2))
        while count is None or printed < count:
            if printed:
                time.sleep(args.interval)
            snapshot = sampler.sample()
            print(json.dumps(snapshot.to_dict()) if args.json else describe(snapshot, printed == 0), flush=True)
            printed += 1
            failed = next((e.problem for e in snapshot.engines if e.problem), None)
    except KeyboardInterrupt:
        return 0
    finally:
        sampler.close()
    return fail(failed) if failed and args.once else 0


def describe(snapshot: MonitorSnapshot, first: bool = False) -> str:
    """One line for a terminal."""
    parts = [time.strftime("%H:%M:%S", time.localtime(snapshot.taken_at_s))]
    if snapshot.gpu_unavailable_reason:
        parts.append(f"No NVIDIA GPU: {snapshot.gpu_unavailable_reason}" if first else f"GPU {MISSING}")
    for gpu in snapshot.gpus:
        memory = f"{format_bytes(gpu.memory_used_bytes)}/{format_bytes(gpu.memory_total_bytes)}"
        util = MISSING if gpu.utilization_percent is None else f"{gpu.utilization_percent}%"
        power = MISSING if gpu.power_mw is None else f"{gpu.power_mw / 1000:.0f} W"
        parts.append(f"GPU{gpu.index} {memory} {util} {power}")
    ram = snapshot.ram
    parts.append(f"RAM {format_bytes(ram.used_bytes)}/{format_bytes(ram.total_bytes)}")
    if snapshot.cpu_percent is not None:
        parts.append(f"CPU {snapshot.cpu_percent:.0f}%")
    for engine in snapshot.engines:
        kv = engine.kv
        if engine.problem:
            parts.append(f"{engine.label}: {engine.problem}")
        elif kv is not None and kv.usage_fraction is not None:
            parts.append(
                f"{engine.label} KV {kv.usage_fraction:.1%} run {kv.requests_running} wait {kv.requests_waiting}"
            )
    return " | ".join(parts)


def run_bench(args: argparse.Namespace) -> int:
    if problems := _problems(args):
        return fail(" ".join(problems), EXIT_BAD_INPUT)
    sampler = _sampler(args)
    sampler.sample()  # warm-up outside both phases: one-time imports (httpx, pynvml) and NVML start-up
    idle_s = _cpu_seconds_over(args.seconds, None)
    samples: list[object] = []
    busy_s = _cpu_seconds_over(args.seconds, lambda: sampler.start(lambda snap, alerts: samples.append(1)))
    sampler.close()
    idle_pct, busy_pct = 100 * idle_s / args.seconds, 100 * busy_s / args.seconds
    result = {
        "interval_s": args.interval,
        "seconds": args.seconds,
        "samples": len(samples),
        "idle_cpu_percent_of_one_core": round(idle_pct, 3),
        "monitor_cpu_percent_of_one_core": round(busy_pct, 3),
        "monitor_cost_percent_of_one_core": round(busy_pct - idle_pct, 3),
        "per_sample_cpu_ms": round(1000 * (busy_s - idle_s) / max(len(samples), 1), 3),
        "budget_percent": 2.0,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"monitor at {1 / args.interval:.1f} Hz: {result['monitor_cpu_percent_of_one_core']}% of one core "
            f"(idle baseline {result['idle_cpu_percent_of_one_core']}%; "
            f"cost {result['monitor_cost_percent_of_one_core']}%,"
            f" {result['per_sample_cpu_ms']} ms per sample over {len(samples)} samples; budget 2%)"
        )
    return 0


def _cpu_seconds_over(seconds: float, start: object) -> float:
    """This process's CPU seconds (all threads) over ``seconds`` of wall time, after calling ``start``."""
    before = time.process_time()
    if callable(start):
        start()
    time.sleep(seconds)
    return time.process_time() - before
