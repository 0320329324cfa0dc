"""``llm-workstation bench serve --concurrency N``: several streams at once through the API server on one llama.cpp
model, parallel (``serve --parallel N``: continuous batching) against queued (``serve --parallel 1``: one at a time),
in the same run.

For each level (1, 2, 4, 8 streams, up to 2 × N), ``clients`` closed-loop clients each stream ``rounds`` chats one
after the other; the two servers take turns level by level, so drift on the machine hits both alike, and the whole
sweep runs ``repeats`` times (each level's median tok/s is reported, TTFT percentiles pooled over the sweeps). Aggregate
decode tok/s: completion tokens over the level's wall time (first request sent to last reply ended). TTFT: per
request, from sending it to its first content token (a queued request's wait included), p50 and p95.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core.params import LoadParams
from app.devtools.chat_bench import BENCH_PROMPTS

LEVELS = (1, 2, 4, 8)
SAMPLING: dict[str, float | int] = {
    "temperature": 0.8,
    "top_p": 0.95,
    "top_k": 40,
    "min_p": 0.05,
    "repeat_penalty": 1.0,
}


@dataclass
class Level:
    streams: int
    tokens: int = 0
    seconds: float = 0.0
    ttft_ms: list[float] = field(default_factory=list)
    failures: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.ttft_ms)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] if ordered else None
        return {"streams": self.streams, "tokens": self.tokens, "seconds": self.seconds,
                "tokens_per_s": self.tokens_per_s, "ttft_p50_ms": statistics.median(ordered) if ordered else None,
                "ttft_p95_ms": p95, "failures": self.failures}  # fmt: skip


async def _stream(http: Any, model: str, prompt: str, seed: int, max_tokens: int, level: Level) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True, "seed": seed,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens, **SAMPLING}  # fmt: skip
    started, first, tokens = time.perf_counter(), 0.0, 0
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            level.failures += 1
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            choices = chunk.get("choices") or []
            if not first and choices and (choices[0].get("delta") or {}).get("content"):
                first = time.perf_counter()
    level.tokens += tokens
    if first:
        level.ttft_ms.append((first - started) * 1000)


async def run_level(url: str, model: str, streams: int, rounds: int, max_tokens: int, offset: int) -> Level:
    """``streams`` clients, each streaming ``rounds`` chats one after the other."""
    import httpx

    level = Level(streams)
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=nodelay)

    async def client(index: int) -> None:
        for r in range(rounds):
            seed = offset + index * rounds + r
            await _stream(http, model, BENCH_PROMPTS[seed % len(BENCH_PROMPTS)], seed, max_tokens, level)

    async with httpx.AsyncClient(base_url=url, timeout=900, transport=transport) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(streams)))
        level.seconds = time.perf_counter() - started
    return level


def bench_concurrency(
    model: Path, load: LoadParams, *, slots: int, max_tokens: int, rounds: int, no_repack: bool, repeats: int = 1
) -> dict[str, Any]:
    """The curve of both modes, measured level by level in turn, the whole sweep ``repeats`` times (each level's
    median is reported: a busy machine's bursts hit one sweep, not all); ``slots``: the parallel server's N."""
    from app.devtools.serve_bench import model_id, start_api_server

    homes = {mode: Path(tempfile.mkdtemp(prefix=f"llmw-bench-conc-{mode}-")) for mode in ("parallel", "queued")}
    servers = {
        "parallel": start_api_server(model, replace(load, n_parallel=slots), homes["parallel"], no_repack),
        "queued": start_api_server(model, replace(load, n_parallel=1), homes["queued"], no_repack),
    }
    curves: dict[str, list[Level]] = {"parallel": [], "queued": []}
    levels = [n for n in LEVELS if n <= 2 * slots]
    try:
        for server in servers.values():
            server.wait_ready()
        name = model_id(servers["parallel"].url, model)
        for server in servers.values():  # warm-up: loads the model, fills caches
            asyncio.run(run_level(server.url, name, min(2, slots), 1, 8, 10_000))
        for sweep in range(repeats):
            for streams in levels:
                for mode, server in servers.items():
                    offset = sweep * 100_000 + streams * 1000
                    curves[mode].append(asyncio.run(run_level(server.url, name, streams, rounds, max_tokens, offset)))
    finally:
        for mode, server in servers.items():
            server.stop()
            shutil.rmtree(homes[mode], ignore_errors=True)
    return _report(model, load, slots, max_tokens, rounds, curves)


def _report(
    model: Path, load: LoadParams, slots: int, max_tokens: int, rounds: int, curves: dict[str, list[Level]]
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "model": str(model), "n_ctx_per_request": load.n_ctx, "n_threads": load.n_threads, "slots": slots,
        "max_tokens": max_tokens, "rounds": rounds,
        "curves": {mode: _curve(levels) for mode, levels in curves.items()},
        "sweeps": {mode: [level.summary() for level in levels] for mode, levels in curves.items()},
    }  # fmt: skip
    for mode, curve in report["curves"].items():
        by = {level["streams"]: level["tokens_per_s"] for level in curve}
        if by.get(1) and 4 in by:
            report[f"{mode}_4_vs_1"] = by[4] / by[1]
    return report


def _curve(levels: list[Level]) -> list[dict[str, Any]]:
    """One entry per stream count: the median tok/s over the sweeps, TTFT percentiles over all their requests."""
    curve = []
    for streams in sorted({level.streams for level in levels}):
        runs = [level for level in levels if level.streams == streams]
        pooled = Level(streams, ttft_ms=[t for level in runs for t in level.ttft_ms])
        pooled.failures = sum(level.failures for level in runs)
        rates = [level.tokens_per_s for level in runs]
        curve.append({**pooled.summary(), "tokens_per_s": statistics.median(rates), "sweeps_tokens_per_s": rates})
    return curve


def report_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"model {Path(report['model']).name}  context {report['n_ctx_per_request']} per request  threads "
        f"{report['n_threads']}  parallel slots {report['slots']}  max_tokens {report['max_tokens']}  "
        f"{report['rounds']} chats per stream, {len(report['curves']['parallel'][0]['sweeps_tokens_per_s'])} sweeps "
        "(medians)",
        f"{'streams':>7} | {'parallel tok/s':>14} {'TTFT p50':>9} {'p95':>8} | {'queued tok/s':>12} {'TTFT p50':>9} "
        f"{'p95':>8} | {'par/queued':>10}",
    ]
    for par, que in zip(report["curves"]["parallel"], report["curves"]["queued"], strict=True):
        ratio = par["tokens_per_s"] / que["tokens_per_s"] if que["tokens_per_s"] else float("nan")
        lines.append(
            f"{par['streams']:>7} | {par['tokens_per_s']:>14.1f} {_ms(par['ttft_p50_ms'])} {_ms(par['ttft_p95_ms'])} | "
            f"{que['tokens_per_s']:>12.1f} {_ms(que['ttft_p50_ms'])} {_ms(que['ttft_p95_ms'])} | {ratio:>9.2f}×"
        )
    for mode in ("parallel", "queued"):
        if (ratio := report.get(f"{mode}_4_vs_1")) is not None:
            target = "  (target >= 1.7)" if mode == "parallel" else ""
            lines.append(f"{mode}: 4 streams / 1 stream aggregate decode = {ratio:.2f}×{target}")
    failures = sum(level["failures"] for curve in report["curves"].values() for level in curve)
    if failures:
        lines.append(f"{failures} requests failed")
    return lines


def _ms(value: float | None) -> str:
    return f"{value:>7.0f}ms" if value is not None else f"{'-':>9}"
