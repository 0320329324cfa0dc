"""``bench batch``: the batch runner's output tokens/s against a minimal asyncio + httpx client, same server.

Both paths send the same seeded prompt set to ``/v1/completions`` with the same fields (``max_tokens``,
``ignore_eos: true`` so every request generates exactly ``max_tokens``, greedy sampling, a seed per prompt),
streaming with ``stream_options.include_usage``. For each concurrency level the two paths alternate which goes
first, ``rounds`` times; the medians are compared. Throughput is completion tokens over the wall time of the
whole prompt set, start to last byte, measured around each path's entire run (the runner's output file
included). One warm-up pass (short replies, highest concurrency) runs first so neither path pays for the
server's first-request costs or an empty prefix cache. Each path's client CPU time per 1k tokens is reported
too: unlike wall-clock throughput it hardly moves when other work shares the machine.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.backends.http_lines import iter_lines
from app.backends.openai_stream import DONE, sse_data
from app.backends.server_url import normalize_server_url
from app.core import safe_json
from app.core.batch.input import BatchRequest
from app.core.lazy_import import lazy_import
from app.services.batch.runner import BatchError, BatchRunner, find_model, server_message

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


TARGET_RATIO = 0.95
WARMUP_MAX_TOKENS = 8
_TEXT = (
    "the river mountain story harbor lantern garden market winter letter journey bridge forest engine city "
    "morning village library clock ocean valley window road kitchen storm island silver careful quiet ancient"
)
_WORDS = tuple(_TEXT.split(" "))


def bench_prompts(count: int, seed: int = 1234) -> list[str]:
    """``count`` prompts of 8–48 words from a fixed vocabulary; the same ``seed`` gives the same set."""
    rng = random.Random(seed)
    return [
        f"Prompt {i}: write about " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 48)))
        for i in range(count)
    ]


def request_fields(index: int, max_tokens: int) -> dict[str, Any]:
    """The fields both paths send with prompt ``index`` (besides model, prompt and streaming)."""
    return {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0, "seed": 1000 + index}


async def baseline_run(
    endpoint: str, model: str, prompts: Sequence[str], max_tokens: int, concurrency: int, api_key: str | None = None
) -> dict[str, Any]:
    """The minimal client: one AsyncClient, a semaphore, ``gather``; counts usage tokens. Raises BatchError."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started, cpu_started = time.perf_counter(), time.process_time()
    async with httpx.AsyncClient(base_url=endpoint, headers=headers, timeout=None) as client:
        slots = asyncio.Semaphore(concurrency)

        async def one(index: int, prompt: str) -> int:
            body = {"model": model, "prompt": prompt, **request_fields(index, max_tokens), "stream": True}
            body["stream_options"] = {"include_usage": True}
            tokens = 0
            async with slots, client.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise BatchError(f"the baseline client's request failed: {server_message(response)}")
                try:
                    async for line in iter_lines(response):  # aiter_lines() would also split at U+2028
                        if (data := sse_data(line)) is not None and data != DONE:
                            usage = safe_json.loads(data, what="a stream chunk").get("usage")
                            tokens = usage["completion_tokens"] if usage else tokens
                except (ValueError, AttributeError, KeyError, TypeError) as exc:  # JsonError, or a chunk's shape
                    raise BatchError(f"the baseline client cannot read the server's stream ({exc})") from None
            return tokens

        try:
            counts = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        except httpx.HTTPError as exc:
            raise BatchError(
                f"the baseline client lost the server at {endpoint} ({type(exc).__name__}: {exc})"
            ) from None
    return _sample(sum(counts), time.perf_counter() - started, time.process_time() - cpu_started, 0)


async def runner_run(
    endpoint: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    concurrency: int,
    output_path: Path,
    api_key: str | None = None,
) -> dict[str, Any]:
    """The same prompt set through BatchRunner into a fresh output file."""
    requests = [
        BatchRequest(id=f"p{i}", line=i + 1, prompt=p, params=request_fields(i, max_tokens))
        for i, p in enumerate(prompts)
    ]
    runner = BatchRunner(endpoint, api_key=api_key, model=model, concurrency=concurrency)
    started, cpu_started = time.perf_counter(), time.process_time()
    summary = await runner.run(requests, output_path)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    return _sample(summary.output_tokens, wall_s, cpu_s, summary.failed)


def _sample(tokens: int, wall_s: float, cpu_s: float, failed: int) -> dict[str, Any]:
    """One run's figures; ``cpu_s`` is this process's CPU time (all threads), the client's own cost."""
    return {"output_tokens": tokens, "wall_s": wall_s, "tokens_per_s": tokens / wall_s if wall_s else 0.0,
            "cpu_ms_per_1k_tokens": cpu_s * 1e6 / tokens if tokens else None, "failed": failed}  # fmt: skip


async def bench_batch(
    endpoint: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    prompts: int = 64,
    max_tokens: int = 128,
    concurrencies: Sequence[int] = (1, 8, 32),
    rounds: int = 2,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure both paths at each concurrency; return the report (see ``report_lines`` for its reading)."""
    endpoint = normalize_server_url(endpoint)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=endpoint, headers=headers) as client:
        model = model or await find_model(client, endpoint)
    prompt_set = bench_prompts(prompts)
    say = on_step or (lambda _text: None)
    say(f"warm-up: {prompts} prompts x {WARMUP_MAX_TOKENS} tokens at concurrency {max(concurrencies)}")
    await baseline_run(endpoint, model, prompt_set, WARMUP_MAX_TOKENS, max(concurrencies), api_key)
    levels = []
    with tempfile.TemporaryDirectory(prefix="llmw-bench-batch-") as folder:
        for concurrency in concurrencies:
            runner_samples, baseline_samples = [], []
            for round_index in range(rounds):
                order = ("runner", "baseline") if round_index % 2 == 0 else ("baseline", "runner")
                for path in order:
                    say(f"concurrency {concurrency}, round {round_index + 1}/{rounds}: {path}")
                    if path == "runner":
                        out = Path(folder) / f"c{concurrency}-r{round_index}.jsonl"
                        sample = await runner_run(endpoint, model, prompt_set, max_tokens, concurrency, out, api_key)
                        runner_samples.append(sample)
                    else:
                        sample = await baseline_run(endpoint, model, prompt_set, max_tokens, concurrency, api_key)
                        baseline_samples.append(sample)
                    if sample["failed"]:
                        raise BatchError(f"{sample['failed']} requests failed in the {path} run; the bench needs all")
            levels.append(_level(concurrency, runner_samples, baseline_samples))
    return _report(endpoint, model, prompts, max_tokens, rounds, levels)


def _level(concurrency: int, runner: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    runner_rate = statistics.median(s["tokens_per_s"] for s in runner)
    baseline_rate = statistics.median(s["tokens_per_s"] for s in baseline)
    ratio = runner_rate / baseline_rate if baseline_rate else None
    return {
        "concurrency": concurrency,
        "runner_tokens_per_s": runner_rate,
        "baseline_tokens_per_s": baseline_rate,
        "ratio": ratio,
        "runner_cpu_ms_per_1k_tokens": statistics.median(s["cpu_ms_per_1k_tokens"] or 0.0 for s in runner),
        "baseline_cpu_ms_per_1k_tokens": statistics.median(s["cpu_ms_per_1k_tokens"] or 0.0 for s in baseline),
        "target_met": ratio is not None and ratio >= TARGET_RATIO,
        "samples": {"runner": runner, "baseline": baseline},
    }


def _report(
    endpoint: str, model: str, prompts: int, max_tokens: int, rounds: int, levels: list[dict[str, Any]]
) -> dict[str, Any]:
    by_concurrency = {level["concurrency"]: level for level in levels}
    single, batched = by_concurrency.get(1), by_concurrency[max(by_concurrency)]

    def multiple(key: str) -> float | None:
        return batched[key] / single[key] if single and single[key] else None

    return {
        "endpoint": endpoint,
        "model": model,
        "prompts": prompts,
        "max_tokens": max_tokens,
        "rounds": rounds,
        "target_ratio": TARGET_RATIO,
        "levels": levels,
        "batched_concurrency": batched["concurrency"],
        "batched_vs_single": multiple("runner_tokens_per_s"),
        "baseline_batched_vs_single": multiple("baseline_tokens_per_s"),
        "all_targets_met": all(level["target_met"] for level in levels),
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as text: one line per concurrency level, then the batching multiple."""
    lines = [
        f"model {report['model']}  prompts {report['prompts']}  max_tokens {report['max_tokens']}  "
        f"rounds {report['rounds']} (medians; output tokens/s over the whole set)",
        f"{'concurrency':>11}  {'runner tok/s':>12}  {'baseline tok/s':>14}  {'ratio':>6}  "
        f"{'client CPU ms/1k tok (runner, baseline)':>40}",
    ]
    for level in report["levels"]:
        ratio = f"{level['ratio']:.3f}" if level["ratio"] is not None else "n/a"
        mark = "" if level["target_met"] else f"  below target {report['target_ratio']}"
        cpu = f"{level['runner_cpu_ms_per_1k_tokens']:.1f}, {level['baseline_cpu_ms_per_1k_tokens']:.1f}"
        lines.append(
            f"{level['concurrency']:>11}  {level['runner_tokens_per_s']:>12.1f}  "
            f"{level['baseline_tokens_per_s']:>14.1f}  {ratio:>6}  {cpu:>40}{mark}"
        )
    multiple = report["batched_vs_single"]
    if multiple is not None:
        lines.append(
            f"batched (concurrency {report['batched_concurrency']}) vs single: {multiple:.2f}x "
            f"(baseline client: {report['baseline_batched_vs_single']:.2f}x)"
        )
    lines.append(f"target: runner/baseline >= {report['target_ratio']} at every level: "
                 f"{'met' if report['all_targets_met'] else 'NOT met'}")  # fmt: skip
    return lines
